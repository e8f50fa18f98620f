package swarm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
)

// TestSessionHonoursCredit: a session sends a forward only with hop 0's
// credit, so abandoned steps cannot pile forwards up at hop 0.
func TestSessionHonoursCredit(t *testing.T) {
	hop0, err := node.NewHost(node.HostOptions{Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer hop0.Close()
	h, err := node.NewHost(node.HostOptions{Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()

	// Hop 0 grants two forwards, then only what the test says; it never
	// answers.
	forwards := make(chan *wire.Forward, 16)
	grant := make(chan uint32)
	hop0.SetStreamHandler(protocol.ID(wire.StageProtocol), func(s network.Stream) {
		r := wire.NewReader(s, 0)
		m, err := r.Read()
		if err != nil {
			return
		}
		o := m.(*wire.Open)
		wire.Write(s, &wire.Opened{Session: o.Session})
		wire.Write(s, &wire.Credit{Session: o.Session, N: 2})
		go func() {
			for n := range grant {
				wire.Write(s, &wire.Credit{Session: o.Session, N: n})
			}
		}()
		for {
			m, err := r.Read()
			if err != nil {
				return
			}
			if f, ok := m.(*wire.Forward); ok {
				forwards <- f
			}
		}
	})
	res := &results{sessions: map[wire.SessionID]chan wire.Message{}}
	route := []Hop{{Peer: peer.AddrInfo{ID: hop0.ID(), Addrs: hop0.Addrs()}}}
	s, err := openSession(context.Background(), h, res, route, SessionOptions{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	step := func(pos int, abandonAfter time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), abandonAfter)
		defer cancel()
		_, err := s.Step(ctx, generate.Step{Pos: pos, IDs: []int32{1}})
		return err
	}
	arrived := func(want int) {
		t.Helper()
		for i := range want {
			select {
			case f := <-forwards:
				t.Logf("hop 0 got forward %d (pos %d)", f.Seq, f.Pos)
			case <-time.After(20 * time.Second):
				t.Fatalf("hop 0 got %d forwards, want %d", i, want)
			}
		}
	}
	// Two steps, abandoned without results: both forwards go out.
	for pos := range 2 {
		if err := step(pos, 100*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("step %d: %v, want the caller's deadline", pos, err)
		}
	}
	arrived(2)
	// The credit is spent: the third waits for credit, and nothing goes out.
	if err := step(2, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("step without credit: %v, want the caller's deadline", err)
	}
	if c := s.Credit(); c != 0 {
		t.Fatalf("credit %d after two forwards of two", c)
	}
	select {
	case f := <-forwards:
		t.Fatalf("a forward (pos %d) went out without credit", f.Pos)
	case <-time.After(200 * time.Millisecond):
	}
	// One more credit: one more forward.
	grant <- 1
	for deadline := time.Now().Add(20 * time.Second); s.Credit() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the credit did not arrive")
		}
	}
	if err := step(2, 200*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("step with credit: %v", err)
	}
	arrived(1)
	close(grant)
}
