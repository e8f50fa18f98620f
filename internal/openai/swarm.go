package openai

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// Swarm is a Generator over a swarm. Every sequence gets its own session
// on one route shared by all requests, so the stages batch the forwards
// of concurrent sequences. Each session fails over on its own when a node
// of its route dies (swarm.Client.OpenResilient); after a failover, or
// when a session cannot be opened, the shared route is re-planned. With
// Verify > 0, steps are checked against other providers (swarm.Generate)
// and tokens are passed on only once a check has covered them (or at the
// end of the sequence), since a check may take unchecked tokens back.
type Swarm struct {
	Client *swarm.Client
	Model  *shards.Manifest
	// Verify is the fraction of steps checked (0: off, 1: every step);
	// Bans is the ban list the sequences share (nil: one of its own).
	Verify float64
	Bans   *swarm.Bans
	F16    bool // hidden states as fp16 on the wire
	// Drafter, if set, makes every sequence speculate
	// (generate.RunSpeculative) with the drafter it returns for it, K
	// drafts a traversal (0: tuned). Output is unchanged: greedy, or
	// sampled for the seed (the drafts are verified as point masses).
	// Sequences that are verified (Verify > 0) do not speculate.
	Drafter  func() spec.Drafter
	SpecK    int
	SpecTree int // draft tree nodes (generate.SpecOptions.Tree)
	// Remember, if set, is given every sequence that ended by itself
	// (its prompt and output), as an n-gram history wants them.
	Remember func(seq []int)
	// FindTimeout bounds a request's wait for a route (default 30 s);
	// RouteTTL is how long a planned route is reused before it is
	// planned again from a new discovery (default 1 min).
	FindTimeout time.Duration
	RouteTTL    time.Duration
	Log         *slog.Logger

	active atomic.Int64 // sequences generating: they share draft tree budgets

	mu      sync.Mutex // guards the shared route; held while planning one
	hops    []swarm.Hop
	provs   []swarm.Provider
	planned time.Time
}

// Route returns the shared route, planning it when there is none or it
// is older than RouteTTL.
func (s *Swarm) Route(ctx context.Context) ([]swarm.Hop, []swarm.Provider, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ttl := s.RouteTTL
	if ttl <= 0 {
		ttl = time.Minute
	}
	if s.hops != nil && time.Since(s.planned) < ttl {
		return s.hops, s.provs, nil
	}
	wait := s.FindTimeout
	if wait <= 0 {
		wait = 30 * time.Second
	}
	fctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	hops, _, provs, err := s.Client.FindRoute(fctx, s.Model, nil)
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.hops, s.provs, s.planned = hops, provs, time.Now()
	return hops, provs, nil
}

// forget drops the shared route if it is still hops.
func (s *Swarm) forget(hops []swarm.Hop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.hops) > 0 && len(hops) > 0 && &s.hops[0] == &hops[0] {
		s.hops = nil
	}
}

// adopt makes hops, the route a sequence failed over to, the shared one.
func (s *Swarm) adopt(hops []swarm.Hop) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hops, s.planned = hops, time.Now()
}

func (s *Swarm) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// open opens a resilient session for r on the shared route, planning a
// new one once if the shared one does not open.
func (s *Swarm) open(ctx context.Context, r Request) (*swarm.Resilient, error) {
	m := s.Model
	so := swarm.SessionOptions{ModelID: m.ModelID, Sampling: sample.Params{Temp: r.Temperature, TopP: r.TopP, Seed: r.Seed},
		Vocab: m.Config.Vocab, F16: s.F16, MaxLen: m.Config.Context}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		var hops []swarm.Hop
		var provs []swarm.Provider
		if hops, provs, err = s.Route(ctx); err != nil {
			return nil, err
		}
		fo := swarm.FailoverOptions{Log: s.log()}
		if s.Verify > 0 {
			fo.Verify = &swarm.VerifyOptions{Rate: s.Verify, Bans: s.Bans}
		}
		var rs *swarm.Resilient
		if rs, err = s.Client.OpenResilient(ctx, m, provs, hops, so, fo); err == nil {
			if len(rs.Failovers()) > 0 || rs.Session() != nil && !sameRoute(rs.Session().Route, hops) {
				s.adopt(rs.Session().Route)
			}
			return rs, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.log().Warn("openai: no session on the shared route; planning a new one", "err", err)
		s.forget(hops)
	}
	return nil, unavailable(err)
}

func sameRoute(a, b []swarm.Hop) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Peer.ID != b[i].Peer.ID || a[i].Shard != b[i].Shard {
			return false
		}
	}
	return true
}

// unavailable marks the errors that mean no route serves the model.
func unavailable(err error) error {
	if errors.Is(err, swarm.ErrNoRoute) || errors.Is(err, swarm.ErrFailover) || swarm.Retryable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Generate runs r on its own session of the shared route.
func (s *Swarm) Generate(ctx context.Context, r Request, emit func(id int) bool) (Result, error) {
	rs, err := s.open(ctx, r)
	if err != nil {
		return Result{}, err
	}
	defer rs.Close()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		pending []int // generated tokens, as far as they stand
		emitted int   // how many of pending emit has seen
		stopped bool  // emit said stop
	)
	release := func(upto int) {
		for ; emitted < min(upto, len(pending)) && !stopped; emitted++ {
			if !emit(pending[emitted]) {
				stopped = true
				cancel()
			}
		}
	}
	hold := s.Verify > 0 && s.Verify < 1
	opts := generate.Options{MaxTokens: r.MaxTokens, Seed: r.Seed, EOS: s.Model.Config.EOS, Context: s.Model.Config.Context,
		OnToken: func(id int) {
			pending = append(pending, id)
			if hold {
				release(rs.Settled(len(r.Prompt)))
			} else {
				release(len(pending))
			}
		}}
	var res generate.Result
	switch {
	case s.Verify > 0:
		res, err = swarm.Generate(gctx, rs, r.Prompt, opts, func(kept int) {
			if kept < emitted { // cannot happen: emitted tokens were verified
				s.log().Error("openai: verification took back tokens already sent", "kept", kept, "sent", emitted)
				kept = emitted
			}
			pending = pending[:kept]
		})
	case s.Drafter != nil:
		s.active.Add(1)
		res, err = generate.RunSpeculative(gctx, rs, s.Drafter(), r.Prompt, opts,
			generate.SpecOptions{K: s.SpecK, Tree: s.SpecTree, Sampling: sample.Params{Temp: r.Temperature, TopP: r.TopP, Seed: r.Seed},
				Streams: func() int { return int(s.active.Load()) }})
		s.active.Add(-1)
	default:
		res, err = generate.Run(gctx, rs, r.Prompt, opts)
	}
	if len(rs.Failovers()) > 0 {
		s.adopt(rs.Session().Route)
	}
	if stopped {
		return Result{Stopped: "stopped"}, nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return Result{}, ctx.Err()
		}
		return Result{}, unavailable(err)
	}
	release(len(pending))
	if stopped {
		return Result{Stopped: "stopped"}, nil
	}
	if s.Remember != nil {
		s.Remember(append(slices.Clone(r.Prompt), res.IDs...))
	}
	return Result{Stopped: res.Stopped}, nil
}
