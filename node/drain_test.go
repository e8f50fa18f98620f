package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/idle"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
)

// A draining node refuses new sessions and hands open ones over: each
// client hears ErrDraining, which a Resilient client takes as "move".
func TestDrainHandsSessionsOver(t *testing.T) {
	n, c, ref := stageNode(t, node.StageOptions{})
	h := open(t, c, n, ref, 1)
	if got := n.Drain(context.Background(), 0); got != 1 {
		t.Fatalf("handed over %d sessions, want 1", got)
	}
	h.expectError(wire.ErrDraining)
	if n.Stage.Sessions() != 0 {
		t.Fatalf("%d sessions left after drain", n.Stage.Sessions())
	}
	// No new sessions while draining...
	d := dialStage(t, c, n)
	d.send(&wire.Open{Session: wire.SessionID{2}, ModelID: n.Header.ModelID, Route: []wire.Hop{
		{Peer: []byte(n.ID()), Shard: ref.CID, Start: 0, End: 3},
		{Peer: []byte(c.ID()), Shard: "next", Start: 3, End: 6},
	}, Client: []byte(c.ID()), DType: wire.F32, Output: wire.OutArgmax})
	d.expectError(wire.ErrDraining)
	// ...and again after Resume.
	n.Resume()
	open(t, c, n, ref, 3)
}

// busyThenIdle is a load source: other processes use the whole machine
// for the first samples, then nothing.
type busyThenIdle struct{ n int }

func (b *busyThenIdle) Sample() (idle.Sample, error) {
	b.n++
	s := idle.Sample{At: time.Now(), Total: uint64(b.n) * 200}
	s.Busy = min(uint64(b.n), 20) * 200 // busy for 20 samples, idle after
	return s, nil
}

// With --idle-only the node drains when the owner's processes load the
// machine and serves again when it is idle.
func TestServeWhenIdle(t *testing.T) {
	n, _, _ := stageNode(t, node.StageOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.ServeWhenIdle(ctx, &busyThenIdle{}, idle.Config{BusyFor: 20 * time.Millisecond, IdleFor: 20 * time.Millisecond}, 5*time.Millisecond)
	wait := func(draining bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for n.Stage.Draining() != draining {
			if time.Now().After(deadline) {
				t.Fatalf("draining stayed %v", !draining)
			}
			time.Sleep(time.Millisecond)
		}
	}
	wait(true)
	wait(false)
}
