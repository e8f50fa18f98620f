package swarm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/shards"
)

// ErrFailover means a sequence could not be moved to a working route.
var ErrFailover = errors.New("swarm: failover failed")

// FailoverOptions control how a Resilient sequence survives its hops.
type FailoverOptions struct {
	// MaxFailovers bounds the route changes of one sequence (default 8).
	MaxFailovers int
	// Probe bounds the ping that judges each hop of a failed route
	// (default 2 s).
	Probe time.Duration
	// Rediscover bounds a new search of the DHT when the providers known
	// from the first discovery no longer make a route (default 60 s).
	Rediscover time.Duration
	Now        func() time.Time
	Log        *slog.Logger // default: the client's
	// Verify, with a Rate > 0, checks steps against a shadow route and
	// bans the nodes that lie (verify.go).
	Verify *VerifyOptions
}

func (o *FailoverOptions) defaults() {
	if o.MaxFailovers == 0 {
		o.MaxFailovers = 8
	}
	if o.Probe == 0 {
		o.Probe = 2 * time.Second
	}
	if o.Rediscover == 0 {
		o.Rediscover = 60 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
}

// Failover records one change of route.
type Failover struct {
	Pos      int           // start position of the step that failed
	Cause    string        // the error that ended the old route
	Detect   time.Duration // from the failed step's start to its error (a stall waits out the step timeout)
	Dropped  []string      // peers routed around (IDs)
	Replayed int           // tokens prefilled on the new route
	Recovery time.Duration // from the failure to the step's result on the new route
	Route    []Hop         // the new route
}

// Resilient is a generate.Backend that survives the loss of its hops:
// when a step fails because a node died, stalled, drained, evicted the
// session or could not reach its next hop, it routes around the nodes
// that failed, opens a session on the new route, replays the sequence so
// far (the new stages rebuild their KV by prefill), and runs the step
// again. Because the runtime is deterministic, greedy output is the same
// as an uninterrupted run's, and a seeded sampled one too (the step keeps
// its random numbers).
//
// A Resilient is used by one goroutine at a time, like a Session.
type Resilient struct {
	c     *Client
	m     *shards.Manifest
	opts  SessionOptions
	fo    FailoverOptions
	provs []Provider

	s     *Session
	fed   []int32         // ids at positions 0..len(fed)-1, as the route holds them
	drop  map[string]bool // peers this sequence routes around
	hist  []Failover      // done
	cur   *Failover       // in progress: the step has not yet succeeded
	t0    time.Time       // when cur began
	began time.Time       // when the current step began
	mu    sync.Mutex      // guards hist for readers on other goroutines
	v     *verifier       // nil: no verification
}

// OpenResilient opens a session on hops (planned from provs, the
// providers discovery found) that fails over as Resilient describes.
func (c *Client) OpenResilient(ctx context.Context, m *shards.Manifest, provs []Provider, hops []Hop, o SessionOptions, fo FailoverOptions) (*Resilient, error) {
	if fo.Log == nil {
		fo.Log = c.log
	}
	fo.defaults()
	o = fo.Verify.sessionOptions(o)
	r := &Resilient{c: c, m: m, opts: o, fo: fo, provs: provs, drop: map[string]bool{}}
	r.v = newVerifier(r, fo.Verify)
	s, err := c.Open(ctx, hops, o)
	if err == nil {
		r.s = s
		return r, nil
	}
	if !Retryable(err) {
		return nil, err
	}
	// The route broke before the first token: fail over now, blaming
	// its hops.
	r.begin(0, err)
	if err := r.rerouteFrom(ctx, hops, 0, err); err != nil {
		return nil, err
	}
	return r, nil
}

// Session returns the current route's session (its Trace and StepRTT
// describe the last step).
func (r *Resilient) Session() *Session { return r.s }

// Failovers returns the route changes so far.
func (r *Resilient) Failovers() []Failover {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Failover(nil), r.hist...)
}

// Close closes the current session.
func (r *Resilient) Close() error {
	if r.v != nil {
		r.v.close()
	}
	if r.s == nil {
		return nil
	}
	return r.s.Close()
}

// Trees implements generate.TreeBackend. A failover replays the
// positions before the failed step, which a tree step's caller keeps as
// a sequence, so trees fail over like chains. Verification compares rows
// by position and replays them as a sequence on a shadow route, which a
// tree's rows are not: with verification on, speculation drafts chains.
func (r *Resilient) Trees() bool { return r.v == nil }

// Step runs st, failing over as often as it must and may.
func (r *Resilient) Step(ctx context.Context, st generate.Step) (generate.StepResult, error) {
	if st.Pos > len(r.fed) {
		return generate.StepResult{}, fmt.Errorf("%w: step at %d after %d tokens", ErrSession, st.Pos, len(r.fed))
	}
	if r.s == nil {
		return generate.StepResult{}, fmt.Errorf("%w: the sequence has no route", ErrFailover)
	}
	r.began = r.fo.Now()
	if r.v != nil {
		st.Walk = false // the verifier compares every row with a shadow's
	}
	for {
		res, err := r.s.Step(ctx, st)
		if err == nil {
			r.fed = append(r.fed[:st.Pos], st.IDs...)
			if r.v != nil {
				before := r.Verification()
				res, err = r.v.after(ctx, st, res)
				after := r.Verification()
				if after.Checked > before.Checked || after.Mismatches > before.Mismatches {
					r.c.obs.Verified(after.Mismatches - before.Mismatches)
				}
			}
		}
		if err == nil {
			r.finish()
			r.c.obs.Tokens(chosen(st, res))
			return res, nil
		}
		if ctx.Err() != nil || !Retryable(err) {
			return res, err
		}
		if len(r.hist) >= r.fo.MaxFailovers {
			return res, fmt.Errorf("%w: %d route changes already: %w", ErrFailover, len(r.hist), err)
		}
		r.begin(st.Pos, err)
		if err := r.reroute(ctx, st.Pos, err); err != nil {
			return res, err
		}
	}
}

// begin starts the record of a failover, unless one is in progress (a
// new route that fails before its first result is the same failover).
func (r *Resilient) begin(pos int, err error) {
	if r.cur != nil {
		return
	}
	r.t0 = r.fo.Now()
	r.cur = &Failover{Pos: pos, Cause: err.Error()}
	if !r.began.IsZero() {
		r.cur.Detect = r.t0.Sub(r.began)
	}
}

func (r *Resilient) finish() {
	if r.cur == nil {
		return
	}
	r.cur.Recovery = r.fo.Now().Sub(r.t0)
	r.fo.Log.Info("failover done", "pos", r.cur.Pos, "dropped", r.cur.Dropped, "replayed", r.cur.Replayed, "recovery", r.cur.Recovery)
	r.mu.Lock()
	r.hist = append(r.hist, *r.cur)
	r.mu.Unlock()
	r.cur = nil
	r.c.obs.RouteChanged()
}

// chosen is how many new tokens a step gave its sequence: one, and for a
// step that checks drafts (All), also each draft its result agrees with
// before the first that it does not (the greedy acceptance rule; a
// sampled speculative step may accept more).
func chosen(st generate.Step, res generate.StepResult) int {
	if !st.All {
		return 1
	}
	n := 1
	for i := 1; i < len(st.IDs) && i-1 < len(res.Next) && int(st.IDs[i]) == res.Next[i-1]; i++ {
		n++
	}
	return n
}

// reroute drops the hops that failed, plans around them, opens the new
// route and replays the first pos tokens into it.
func (r *Resilient) reroute(ctx context.Context, pos int, cause error) error {
	return r.rerouteFrom(ctx, nil, pos, cause)
}

// rerouteFrom is reroute when the failed route is hops, or, if hops is
// nil, the current session's.
func (r *Resilient) rerouteFrom(ctx context.Context, hops []Hop, pos int, cause error) error {
	old := r.s
	if old != nil {
		hops = old.Route
		// Don't wait on a peer that may be gone.
		old.stream.SetWriteDeadline(r.fo.Now().Add(100 * time.Millisecond))
		old.Close()
		r.s = nil
	}
	for _, id := range r.blame(ctx, hops, cause) {
		if !r.drop[id] {
			r.drop[id] = true
			r.cur.Dropped = append(r.cur.Dropped, id)
		}
	}
	r.fo.Log.Warn("route failed; failing over", "pos", pos, "err", cause, "dropping", r.cur.Dropped)
	for attempt := 0; ; attempt++ {
		if attempt >= r.fo.MaxFailovers {
			return fmt.Errorf("%w: no working route after %d tries: %w", ErrFailover, attempt, cause)
		}
		next, err := r.plan(ctx)
		if err != nil {
			return fmt.Errorf("%w: %w (after %v)", ErrFailover, err, cause)
		}
		s, err := r.c.Open(ctx, next, r.opts)
		if err == nil && pos > 0 {
			// The new stages hold nothing: prefill the sequence so far.
			// The row's choice is discarded; its random number is not
			// one of the generation's.
			_, err = s.Step(ctx, generate.Step{Pos: 0, IDs: r.fed[:pos], Uniform: []float64{0}})
			if err != nil {
				s.Close()
			}
		}
		if err == nil {
			r.s = s
			r.cur.Route = next
			r.cur.Replayed = pos
			return nil
		}
		if ctx.Err() != nil || !Retryable(err) {
			return err
		}
		cause = err
		for _, id := range r.blame(ctx, next, err) {
			if !r.drop[id] {
				r.drop[id] = true
				r.cur.Dropped = append(r.cur.Dropped, id)
			}
		}
	}
}

// plan finds a route around the dropped peers: first among the providers
// already known, then by a new discovery.
func (r *Resilient) plan(ctx context.Context) ([]Hop, error) {
	hops, _, err := r.c.Plan(r.m, r.provs, r.exclude())
	if err == nil {
		return hops, nil
	}
	dctx, cancel := context.WithTimeout(ctx, r.fo.Rediscover)
	defer cancel()
	hops, _, provs, err := r.c.FindRoute(dctx, r.m, r.exclude())
	if err != nil {
		return nil, err
	}
	r.provs = provs
	return hops, nil
}

// blame names the peers of hops to route around after err: the hop the
// client could not reach (a *HopError), the hop a stage's error report
// points at, and every hop that does not answer a ping within the probe
// time. A peer that answers pings but would not open a stage stream (a
// node still starting) is thus dropped too.
func (r *Resilient) blame(ctx context.Context, hops []Hop, err error) []string {
	var out []string
	var he *HopError
	if errors.As(err, &he) && he.Peer != "" {
		// By the peer it names: a route that failed to open is no
		// longer the session's (hops is then empty).
		out = append(out, he.Peer.String())
	}
	var we *wire.Error
	if errors.As(err, &we) {
		h := int(we.Hop)
		switch {
		case errors.Is(we, wire.ErrNextHop):
			h++ // the reporter could not reach its next hop
		case errors.Is(we, wire.ErrClosed):
			h = -1 // says nothing of who closed it
		}
		if h >= 0 && h < len(hops) {
			out = append(out, hops[h].Peer.ID.String())
		}
	}
	pctx, cancel := context.WithTimeout(ctx, r.fo.Probe)
	defer cancel()
	dead := make([]bool, len(hops))
	var wg sync.WaitGroup
	for i, h := range hops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.c.Ping(pctx, h.Peer, 1); err != nil {
				dead[i] = true
			}
		}()
	}
	wg.Wait()
	for i, h := range hops {
		if dead[i] {
			out = append(out, h.Peer.ID.String())
		}
	}
	return out
}

// Retryable reports whether a failed step may succeed on another route:
// the route broke (a node died, stalled, drained, was overloaded, evicted
// or idled the session out, or lost its next hop). Errors in the request
// itself (position, shape, token range, context length, frame size,
// protocol) are not retryable.
func Retryable(err error) bool {
	for _, bad := range []error{wire.ErrPosition, wire.ErrShape, wire.ErrTokenRange, wire.ErrContextFull,
		wire.ErrProtocol, wire.ErrTooLarge, ErrNoRoute, context.Canceled} {
		if errors.Is(err, bad) {
			return false
		}
	}
	return errors.Is(err, ErrSession) || errors.Is(err, wire.ErrNextHop) || errors.Is(err, context.DeadlineExceeded)
}
