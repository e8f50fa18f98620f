package node_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/shards"
)

// nextHop plays the hop after the node on host h: it stands every chain
// at once, grants unlimited credit, and counts what arrives by session.
type nextHop struct {
	mu       sync.Mutex
	forwards map[wire.SessionID]int
	tokens   map[wire.SessionID]int
}

func newNextHop(h host.Host) *nextHop {
	d := &nextHop{forwards: map[wire.SessionID]int{}, tokens: map[wire.SessionID]int{}}
	h.SetStreamHandler(protocol.ID(wire.StageProtocol), func(s network.Stream) {
		r := wire.NewReader(s, 0)
		m, err := r.Read()
		if err != nil {
			return
		}
		o := m.(*wire.Open)
		wire.Write(s, &wire.Opened{Session: o.Session, Hop: o.Hop})
		wire.Write(s, &wire.Credit{Session: o.Session, N: 1 << 30})
		for {
			m, err := r.Read()
			if err != nil {
				return
			}
			if f, ok := m.(*wire.Forward); ok {
				d.mu.Lock()
				d.forwards[f.Session]++
				d.tokens[f.Session] += int(f.NTok)
				d.mu.Unlock()
			}
		}
	})
	return d
}

// count returns the forwards and tokens that arrived for a session.
func (d *nextHop) count(id byte) (forwards, tokens int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.forwards[wire.SessionID{id}], d.tokens[wire.SessionID{id}]
}

// clientHost starts another client host connected to n.
func clientHost(t *testing.T, n *node.Node) host.Host {
	t.Helper()
	h, err := node.NewHost(node.HostOptions{Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	if err := h.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	return h
}

// openFrom opens session id from client host from along node n, then the
// next hop on host next. It returns the raw stream after Opened.
func openFrom(t *testing.T, from host.Host, n *node.Node, ref shards.ShardRef, next host.Host, id byte) *hostile {
	t.Helper()
	h := dialStage(t, from, n)
	var addrs []string
	for _, a := range next.Addrs() {
		addrs = append(addrs, a.String())
	}
	h.send(&wire.Open{Session: wire.SessionID{id}, ModelID: n.Header.ModelID, Route: []wire.Hop{
		{Peer: []byte(n.ID()), Shard: ref.CID, Start: 0, End: 3},
		{Peer: []byte(next.ID()), Addrs: addrs, Shard: "next", Start: 3, End: 6},
	}, Client: []byte(from.ID()), DType: wire.F32, Output: wire.OutArgmax})
	m, err := h.r.Read()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(*wire.Opened); !ok {
		t.Fatalf("open answered with %v: %v", m.Type(), m)
	}
	h.s.SetReadDeadline(time.Time{})
	return h
}

// paced sends forwards on h as hop 0's credit allows, until ctx ends: a
// well-behaved upstream. fw builds the i-th forward. It returns the
// number sent and a channel of the first error the stage reported.
func paced(ctx context.Context, h *hostile, fw func(i int) *wire.Forward) (sent *atomic.Int64, failed chan error) {
	sent, failed = new(atomic.Int64), make(chan error, 1)
	credit := make(chan int, 64)
	go func() {
		for {
			m, err := h.r.Read()
			if err != nil {
				close(credit)
				return
			}
			switch m := m.(type) {
			case *wire.Credit:
				credit <- int(m.N)
			case *wire.Error:
				select {
				case failed <- m:
				default:
				}
			}
		}
	}()
	go func() {
		have := 0
		for i := 0; ; i++ {
			for have == 0 {
				select {
				case n, ok := <-credit:
					if !ok {
						return
					}
					have += n
				case <-ctx.Done():
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			h.s.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if err := wire.Write(h.s, fw(i)); err != nil {
				return
			}
			have--
			sent.Add(1)
		}
	}()
	return sent, failed
}

func tokenForward(id byte, seq, pos, ntok int) *wire.Forward {
	ids := make([]int32, ntok)
	for i := range ids {
		ids[i] = int32(1 + (seq+i)%1000)
	}
	f := &wire.Forward{Session: wire.SessionID{id}, Seq: uint64(seq), Pos: uint32(pos)}
	f.SetTokens(ids)
	return f
}

// TestBackpressure: a client that floods the stage with forwards and
// ignores its credit is not read past its credit, so the stage's queue
// stays within sessions × credit forwards while the flood goes on, and a
// well-behaved client on the same node keeps being served.
func TestBackpressure(t *testing.T) {
	const credit, maxFrame = 2, 1 << 20
	n, c, ref := stageNode(t, node.StageOptions{Credit: credit, MaxFrame: maxFrame})
	next := newNextHop(c)
	bad := clientHost(t, n)
	good := clientHost(t, n)
	flood := openFrom(t, bad, n, ref, c, 1)
	polite := openFrom(t, good, n, ref, c, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The flood: 32-token prefills, written as fast as the transport
	// takes them, never reading the stage's credit.
	var flooded atomic.Int64
	go func() {
		for i := 0; ctx.Err() == nil; i++ {
			flood.s.SetWriteDeadline(time.Now().Add(time.Second))
			if err := wire.Write(flood.s, tokenForward(1, i, 0, 32)); err != nil {
				if ctx.Err() == nil {
					continue // the transport pushed back for a second: try again
				}
				return
			}
			flooded.Add(1)
		}
	}()
	// The polite client decodes, one token at a time, within its credit.
	sent, failed := paced(ctx, polite, func(i int) *wire.Forward { return tokenForward(2, i, i, 1) })

	const sessions, want = 2, 60 // the polite client's forwards to see served
	var maxJobs, maxBytes int64
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := n.Stage.Snapshot()
		maxJobs, maxBytes = max(maxJobs, st.QueuedJobs), max(maxBytes, st.QueuedBytes)
		if st.QueuedJobs > sessions*credit || st.QueuedBytes > sessions*credit*maxFrame {
			t.Fatalf("the stage holds %d forwards, %d bytes: past %d sessions × credit %d", st.QueuedJobs, st.QueuedBytes, sessions, credit)
		}
		if served, _ := next.count(2); served >= want {
			break
		}
		select {
		case err := <-failed:
			t.Fatalf("the polite session failed: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			got, _ := next.count(2)
			t.Fatalf("the polite client got %d forwards served (%d sent) in 2 minutes", got, sent.Load())
		}
		time.Sleep(2 * time.Millisecond)
	}
	floodServed, _ := next.count(1)
	t.Logf("flood: %d forwards written, %d served; polite: %d sent; the stage held at most %d forwards, %d bytes",
		flooded.Load(), floodServed, sent.Load(), maxJobs, maxBytes)
	if flooded.Load() < int64(floodServed)+100 {
		t.Fatalf("no flood: %d forwards written, %d served", flooded.Load(), floodServed)
	}
	if floodServed == 0 {
		t.Fatalf("the flooding session was not served at all")
	}
}

// TestFairClients: over the real network, a client with four sessions
// and a client with one, both keeping the stage's credit full of prefill
// chunks (16 tokens per session for the first, 32 for the second, under
// a batch budget of 64), get the same tokens: within 20% over the same
// interval. (Taking every waiting forward would give a 2:1.)
func TestFairClients(t *testing.T) {
	n, c, ref := stageNode(t, node.StageOptions{BatchTokens: 64})
	next := newNextHop(c)
	a, b := clientHost(t, n), clientHost(t, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var fails []chan error
	start := func(from host.Host, id byte, ntok int) {
		h := openFrom(t, from, n, ref, c, id)
		_, failed := paced(ctx, h, func(i int) *wire.Forward { return tokenForward(id, i, 0, ntok) })
		fails = append(fails, failed)
	}
	for id := byte(1); id <= 4; id++ {
		start(a, id, 16)
	}
	start(b, 5, 32)
	tokens := func() (int, int) {
		ta := 0
		for id := byte(1); id <= 4; id++ {
			_, tok := next.count(id)
			ta += tok
		}
		_, tb := next.count(5)
		return ta, tb
	}
	wait := func(cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Minute)
		for !cond() {
			for _, f := range fails {
				select {
				case err := <-f:
					t.Fatalf("a session failed: %v", err)
				default:
				}
			}
			if time.Now().After(deadline) {
				ta, tb := tokens()
				t.Fatalf("too slow: %d and %d tokens served", ta, tb)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Warm up until every session is flowing, then count an interval of
	// 60 of b's forwards.
	wait(func() bool {
		for id := byte(1); id <= 5; id++ {
			if f, _ := next.count(id); f < 2 {
				return false
			}
		}
		return true
	})
	a0, b0 := tokens()
	wait(func() bool { _, tb := tokens(); return tb-b0 >= 60*32 })
	a1, b1 := tokens()
	da, db := a1-a0, b1-b0
	st := n.Stage.Snapshot()
	t.Logf("over the same interval: client a (4 sessions) %d tokens, client b (1 session) %d; %d batches of %.1f forwards on average",
		da, db, st.Batches, float64(st.Forwards)/float64(st.Batches))
	if lo, hi := min(da, db), max(da, db); float64(hi) > 1.2*float64(lo) {
		t.Fatalf("client a got %d tokens, client b %d: more than 20%% apart", da, db)
	}
}

// TestRefusedForwardsGiveCreditBack: a forward the stage refuses (here, a
// position past the cache) does not cost the session its credit: after
// more refusals than its credit, it still sends and is served.
func TestRefusedForwardsGiveCreditBack(t *testing.T) {
	const credit = 2
	n, c, ref := stageNode(t, node.StageOptions{Credit: credit})
	next := newNextHop(c)
	h := openFrom(t, c, n, ref, c, 1)
	h.s.SetReadDeadline(time.Now().Add(20 * time.Second))
	have := 0
	// expect reads until the stage has granted want credit in all and
	// sent errs errors.
	expect := func(want, errs int) {
		t.Helper()
		for have < want || errs > 0 {
			m, err := h.r.Read()
			if err != nil {
				t.Fatalf("credit %d of %d, %d errors to come: %v", have, want, errs, err)
			}
			switch m := m.(type) {
			case *wire.Credit:
				have += int(m.N)
			case *wire.Error:
				if !errors.Is(m, wire.ErrPosition) {
					t.Fatalf("error %v, want a position error", m)
				}
				errs--
			}
		}
	}
	expect(credit, 0)
	for i := range 2 * credit {
		h.send(tokenForward(1, i, 7, 1)) // position 7 of an empty cache
		expect(credit+i+1, 1)
	}
	h.send(tokenForward(1, 9, 0, 3))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if f, _ := next.count(1); f == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the good forward after the refused ones was not served")
		}
	}
}
