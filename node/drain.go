package node

import (
	"context"
	"fmt"
	"time"

	"github.com/pipeshard/pipeshard/internal/idle"
	"github.com/pipeshard/pipeshard/internal/wire"
)

// Drain takes the node out of service without failing anyone: it stops
// admitting sessions, announces that it is draining (its next status
// record, sent at once, says so, and routes planned from then on avoid
// it), waits up to wait for its sessions to end by themselves, and then
// hands the rest over: each is closed with wire.ErrDraining, which tells
// its client to move. A client using swarm.Resilient routes around the
// node and replays its sequence on the new route, so its user sees no
// error. Drain returns how many sessions it handed over. The node keeps
// running until Close.
func (n *Node) Drain(ctx context.Context, wait time.Duration) int {
	n.Stage.Drain()
	if n.statusPub != nil {
		n.statusPub.Poke()
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for n.Stage.Sessions() > 0 {
		select {
		case <-ctx.Done():
		case <-deadline.C:
		case <-tick.C:
			continue
		}
		break
	}
	handed := n.Stage.HandOver()
	n.log.Info("drained", "handed_over", handed)
	return handed
}

// HandOver closes every open session with wire.ErrDraining, telling each
// client (through the hops before this one) to move to another route. It
// returns the number of sessions closed.
func (st *Stage) HandOver() int {
	st.mu.Lock()
	open := make([]*session, 0, len(st.sessions))
	for _, s := range st.sessions {
		open = append(open, s)
	}
	st.mu.Unlock()
	for _, s := range open {
		st.drop(s, fmt.Errorf("%w: handing the session over", wire.ErrDraining))
	}
	return len(open)
}

// Resume takes sessions again after Drain and announces it.
func (n *Node) Resume() {
	n.Stage.Resume()
	if n.statusPub != nil {
		n.statusPub.Poke()
	}
}

// Resume undoes Drain: the stage admits sessions again.
func (st *Stage) Resume() {
	st.mu.Lock()
	st.draining = false
	st.mu.Unlock()
}

// ServeWhenIdle hosts only while the machine is idle (`pipeshard node
// --idle-only`): it samples src every period, drains (handing sessions
// over at once) when the owner's processes need the machine or it runs on
// battery, and resumes when it is idle again. It returns when ctx ends.
func (n *Node) ServeWhenIdle(ctx context.Context, src idle.Source, cfg idle.Config, period time.Duration) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return idle.Run(ctx, src, cfg, period, func(s idle.State, why string) {
		if s == idle.Yield {
			n.log.Info("the machine's owner needs it: draining", "why", why)
			n.Drain(ctx, 0)
			return
		}
		n.log.Info("the machine is idle: serving again", "why", why)
		n.Resume()
	})
}
