package node_test

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/shards"
)

// stageNode starts a node serving layers [0, 3) of stories15M, and
// returns it with a second host that plays the client.
func stageNode(t *testing.T, opts node.StageOptions) (*node.Node, host.Host, shards.ShardRef) {
	t.Helper()
	n, c, ref, _, _ := runStageNode(t, opts)
	return n, c, ref
}

// runStageNode is stageNode that also returns what ends the node's Run,
// and a channel closed when Run has returned.
func runStageNode(t *testing.T, opts node.StageOptions) (*node.Node, host.Host, shards.ShardRef, context.CancelFunc, <-chan struct{}) {
	t.Helper()
	model, _ := testmodel.Stories15M(t)
	w, err := checkpoint.LoadLlama2C(model, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	home := filepath.Join(t.TempDir(), "n")
	st, err := shards.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	m, mc, err := st.Import(context.Background(), shards.Source{Name: "s", Weights: w}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, _, err = st.Split(context.Background(), mc, []shards.Stage{{Start: 0, End: 3}, {Start: 3, End: 6}}, ovrt.F32, "ranges", nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	ref := m.Layouts[1].Shards[0]
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n, err := node.New(ctx, node.Config{Home: home, Shard: ref.CID, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, Stage: opts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		n.Run(ctx)
	}()
	c, err := node.NewHost(node.HostOptions{Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.Connect(ctx, peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return n, c, ref, cancel, ran
}

// TestRunEndsWithOpenSessions: when a node's context ends while sessions
// are open, Run drops them and returns. (It used to hang: Run held the
// stage's lock while each drop took it again.)
func TestRunEndsWithOpenSessions(t *testing.T) {
	n, c, ref, cancel, ran := runStageNode(t, node.StageOptions{})
	open(t, c, n, ref, 1)
	open(t, c, n, ref, 2)
	if got := n.Stage.Sessions(); got != 2 {
		t.Fatalf("%d sessions open, want 2", got)
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if got := n.Stage.Sessions(); got != 0 {
		t.Fatalf("%d sessions left after Run returned", got)
	}
}

// hostile is a raw stage stream from the client host.
type hostile struct {
	t *testing.T
	s network.Stream
	r *wire.Reader
}

func dialStage(t *testing.T, c host.Host, n *node.Node) *hostile {
	t.Helper()
	s, err := c.NewStream(context.Background(), n.ID(), protocol.ID(wire.StageProtocol))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Reset() })
	s.SetReadDeadline(time.Now().Add(20 * time.Second))
	return &hostile{t: t, s: s, r: wire.NewReader(s, 0)}
}

func (h *hostile) send(m wire.Message) {
	h.t.Helper()
	if err := wire.Write(h.s, m); err != nil {
		h.t.Fatal(err)
	}
}

// expectError reads until an Error frame arrives (past the stage's
// credits) and checks its kind.
func (h *hostile) expectError(want error) {
	h.t.Helper()
	m, err := h.r.Read()
	for err == nil && m.Type() == wire.TypeCredit {
		m, err = h.r.Read()
	}
	if err != nil {
		h.t.Fatalf("want an error frame (%v), got read error %v", want, err)
	}
	e, ok := m.(*wire.Error)
	if !ok {
		h.t.Fatalf("want an error frame (%v), got %v", want, m.Type())
	}
	if !errors.Is(e, want) {
		h.t.Fatalf("error %v (code %d), want %v", e, e.Code, want)
	}
}

// open starts a one-hop session whose next hop is the client itself; the
// client answers the node's Open with Opened so the chain stands, and
// grants the node all the credit it may want.
func open(t *testing.T, c host.Host, n *node.Node, ref shards.ShardRef, id byte) *hostile {
	t.Helper()
	c.SetStreamHandler(protocol.ID(wire.StageProtocol), func(s network.Stream) {
		r := wire.NewReader(s, 0)
		m, err := r.Read()
		if err != nil {
			return
		}
		o := m.(*wire.Open)
		wire.Write(s, &wire.Opened{Session: o.Session, Hop: o.Hop})
		wire.Write(s, &wire.Credit{Session: o.Session, N: 1 << 30})
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	})
	h := dialStage(t, c, n)
	sess := wire.SessionID{id}
	var addrs []string
	for _, a := range c.Addrs() {
		addrs = append(addrs, a.String())
	}
	h.send(&wire.Open{Session: sess, ModelID: n.Header.ModelID, Route: []wire.Hop{
		{Peer: []byte(n.ID()), Shard: ref.CID, Start: 0, End: 3},
		{Peer: []byte(c.ID()), Addrs: addrs, Shard: "next", Start: 3, End: 6},
	}, Client: []byte(c.ID()), DType: wire.F32, Output: wire.OutArgmax})
	m, err := h.r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*wire.Opened); !ok {
		t.Fatalf("open answered with %v: %v", m.Type(), m)
	}
	return h
}

func forward(sess byte, seq uint64, pos int, ids ...int32) *wire.Forward {
	f := &wire.Forward{Session: wire.SessionID{sess}, Seq: seq, Pos: uint32(pos)}
	f.SetTokens(ids)
	return f
}

func TestHostilePeers(t *testing.T) {
	n, c, ref := stageNode(t, node.StageOptions{MaxFrame: 1 << 20})
	good := open(t, c, n, ref, 1)
	good.send(forward(1, 1, 0, 1, 450))

	tests := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"garbage bytes", func(t *testing.T) {
			h := dialStage(t, c, n)
			h.s.Write([]byte{5, 0, 0, 0, 99, 1, 2, 3, 4})
			h.expectError(wire.ErrBadFrame)
		}},
		{"oversized frame", func(t *testing.T) {
			h := dialStage(t, c, n)
			h.s.Write([]byte{0, 0, 0, 0x10}) // 256 MiB promised
			h.expectError(wire.ErrTooLarge)
		}},
		{"forward before open", func(t *testing.T) {
			h := dialStage(t, c, n)
			h.send(forward(9, 1, 0, 1))
			h.expectError(wire.ErrProtocol)
		}},
		{"wrong shard", func(t *testing.T) {
			h := dialStage(t, c, n)
			h.send(&wire.Open{Session: wire.SessionID{7}, ModelID: n.Header.ModelID, Route: []wire.Hop{{Peer: []byte(n.ID()), Shard: "bafynot", Start: 0, End: 3}},
				Client: []byte(c.ID()), DType: wire.F32, Output: wire.OutArgmax})
			h.expectError(wire.ErrWrongShard)
		}},
		{"wrong model", func(t *testing.T) {
			h := dialStage(t, c, n)
			h.send(&wire.Open{Session: wire.SessionID{8}, ModelID: "bafkother", Route: []wire.Hop{{Peer: []byte(n.ID()), Shard: ref.CID, Start: 0, End: 3}},
				Client: []byte(c.ID()), DType: wire.F32, Output: wire.OutArgmax})
			h.expectError(wire.ErrWrongShard)
		}},
		{"wrong session", func(t *testing.T) {
			h := open(t, c, n, ref, 2)
			h.send(forward(3, 1, 0, 1))
			h.expectError(wire.ErrUnknownSession)
		}},
		{"wrong position", func(t *testing.T) {
			h := open(t, c, n, ref, 4)
			h.send(forward(4, 1, 5, 1))
			h.expectError(wire.ErrPosition)
		}},
		{"token out of range", func(t *testing.T) {
			h := open(t, c, n, ref, 5)
			h.send(forward(5, 1, 0, 1, 40000))
			h.expectError(wire.ErrTokenRange)
		}},
		{"hidden states to the first stage", func(t *testing.T) {
			h := open(t, c, n, ref, 6)
			h.send(&wire.Forward{Session: wire.SessionID{6}, Seq: 1, NTok: 1, Kind: wire.KindHiddenF32, Data: make([]byte, 4*288)})
			h.expectError(wire.ErrShape)
		}},
		{"abrupt disconnect", func(t *testing.T) {
			h := open(t, c, n, ref, 10)
			h.send(forward(10, 1, 0, 1, 2, 3))
			h.s.Reset()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, tt.run)
	}
	// Through all of that, the good session kept its state and goes on.
	good.send(forward(1, 2, 2, 8338))
	good.s.CloseWrite()
	for {
		m, err := good.r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("good session: %v", err)
		}
		if e, ok := m.(*wire.Error); ok {
			t.Fatalf("good session got %v", e)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.Stage.Snapshot().Forwards < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := n.Stage.Snapshot().Forwards; got < 2 {
		t.Fatalf("the good session's forwards ran %d times, want 2", got)
	}
}
