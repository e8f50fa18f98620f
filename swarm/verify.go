package swarm

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/wire"
)

// Verification of untrusted nodes.
//
// A Resilient sequence with FailoverOptions.Verify checks a fraction of
// its steps against a shadow route: a second session whose hops are, in
// every range that has another provider of the same shard, other peers
// than the main route's. The runtime is deterministic, so honest routes
// give the same bits; a difference means that some hop lied.
//
// What is compared. Each output row of the main route is recorded: its
// chosen id, the random number it was drawn with, and, for greedy
// sequences, the top K candidates with their logits (the main route asks
// the last hop for top-K results, which costs 8 bytes per candidate). On
// a checked step the shadow catches up with one prefill of every token
// since its last position, asking for every row, so every row the main
// route produced since the last check is compared, not only the step's:
// candidates and logits exactly (or within Tolerance), and ids for
// sampled sequences (drawn with the same numbers; a lie that does not
// change a draw goes unseen there).
//
// Localization. At the first row q that differs, the client replays
// tokens 0..q through tie-break routes that differ from the main route in
// one hop: for every hop whose peer differs between main and shadow, the
// main route with the shadow's peer there and with a third provider of
// the shard, where one exists. Of the candidates for that hop, the odd
// one out is banned; when only two exist and they disagree, both are.
// This assumes at most one liar per range per mismatch, that liars do
// not collude (two liars lying alike in one range look honest), and that
// a liar lies alike when the same input comes again. Bans are local to
// the client, for a minute doubling with every repeat (Bans).
//
// Recovery. When a banned peer gave the main route's rows, the sequence
// re-routes around it, replays the verified prefix (positions before q),
// runs the rest again, and checks it again. If a token the caller already
// took came from a lying row (possible only between checks), Step returns
// a *RewindError: the caller regenerates from its position (Generate does
// that), so greedy output equals the honest output.

// ErrVerification means a route's results could not be verified: routes
// disagreed and the liar could not be found or routed around, or tokens
// already returned came from a liar (a *RewindError).
var ErrVerification = errors.New("swarm: verification failed")

// DefaultVerifyRate is the fraction of steps checked when verification is
// asked for without a rate.
const DefaultVerifyRate = 0.05

// VerifyOptions configure verification (FailoverOptions.Verify).
type VerifyOptions struct {
	// Rate is the fraction of steps checked against the shadow route: 0
	// is off, 1 every step.
	Rate float64
	// K is how many candidates per row are compared (greedy; default 8).
	K int
	// Tolerance is the largest difference accepted between two logits (0:
	// bit-exact). Routes are deterministic, fp16 hidden states included;
	// a tolerance is for nodes on different backends.
	Tolerance float32
	// Rand draws which steps are checked (default: seeded from
	// crypto/rand). Tests inject a seeded one.
	Rand *rand.Rand
	// Bans is the client's ban list; share one between sequences (nil: a
	// new one per sequence).
	Bans *Bans
	// MaxRounds bounds the localizations of one step (default 8).
	MaxRounds int
	// OnMismatch, if set, is called for every mismatch (tests, logs).
	OnMismatch func(Mismatch)
}

// Mismatch describes routes that disagreed.
type Mismatch struct {
	Step   int      // index of the sequence's step (0: the prompt's)
	Pos    int      // first position whose row differed
	Banned []string // peers banned for it
}

// Ban is one peer banned by a sequence.
type Ban struct {
	Peer string        `json:"peer"`
	Step int           `json:"step"` // index of the step that found it
	Pos  int           `json:"pos"`  // the row that differed
	For  time.Duration `json:"for_ns"`
	Why  string        `json:"why"`
}

// VerifyStats count a sequence's verification.
type VerifyStats struct {
	Rate       float64 `json:"rate"`
	Steps      int     `json:"steps"`         // steps run
	Checked    int     `json:"checked_steps"` // steps checked against the shadow
	Rows       int     `json:"checked_rows"`  // rows compared
	Mismatches int     `json:"mismatches"`
	Rewinds    int     `json:"rewinds"` // tokens taken back (RewindError)
	// Verified counts the positions (prompt included) whose results a
	// check has covered: the token at position p, the result of position
	// p-1, is the honest route's when p <= Verified.
	Verified int `json:"verified_positions"`
	// Unverifiable is set while no range of the route has a second
	// provider: no check can run, so output held back for one would wait
	// for nothing.
	Unverifiable bool `json:"unverifiable"`
	// Skipped counts steps drawn for a check that could not be checked: no
	// range has a second provider, or the shadow route failed.
	Skipped int   `json:"skipped"`
	Banned  []Ban `json:"banned"`
}

// RewindError means tokens the caller already has came from a lying row:
// positions from Pos on are discarded (the route holds 0..Pos-1) and must
// be generated again. The liar is banned and the route rebuilt.
type RewindError struct {
	Pos    int
	Banned []string
}

func (e *RewindError) Error() string {
	return fmt.Sprintf("%v: the tokens from position %d on were chosen by a lying node (banned: %v); generate them again", ErrVerification, e.Pos, e.Banned)
}

func (e *RewindError) Unwrap() error { return ErrVerification }

// Bans is a client's local list of banned peers. A peer is banned for
// Base (default 1 min), doubled with every ban after the first, at most
// Max (default 24 h). It is safe for concurrent use.
type Bans struct {
	Base, Max time.Duration
	mu        sync.Mutex
	m         map[string]*banEntry
}

type banEntry struct {
	until time.Time
	n     int
}

// Ban bans id from now, and returns for how long.
func (b *Bans) Ban(id string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	base, most := b.Base, b.Max
	if base == 0 {
		base = time.Minute
	}
	if most == 0 {
		most = 24 * time.Hour
	}
	if b.m == nil {
		b.m = map[string]*banEntry{}
	}
	e := b.m[id]
	if e == nil {
		e = &banEntry{}
		b.m[id] = e
	}
	d := base << min(e.n, 30)
	if d <= 0 || d > most {
		d = most
	}
	e.n++
	e.until = now.Add(d)
	return d
}

// Banned reports whether id is banned at now.
func (b *Bans) Banned(id string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[id]
	return e != nil && now.Before(e.until)
}

// active returns the peers banned at now.
func (b *Bans) active(now time.Time) map[string]bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]bool{}
	for id, e := range b.m {
		if now.Before(e.until) {
			out[id] = true
		}
	}
	return out
}

// sessionOptions returns the main route's session options under o: greedy
// sequences ask for top-K candidates.
func (o *VerifyOptions) sessionOptions(so SessionOptions) SessionOptions {
	if o == nil || o.Rate <= 0 {
		return so
	}
	if so.Sampling.Greedy() && !so.Logits {
		so.TopK = o.k()
	}
	return so
}

func (o *VerifyOptions) k() int {
	if o.K <= 0 {
		return 8
	}
	return o.K
}

// row is one output row of a route: what it says comes after a position.
type row struct {
	ok    bool
	id    int
	u     float64     // the random number it was drawn with
	cands []wire.Cand // top K with logits (greedy), best first
	route []Hop       // the route that gave it
}

// verifier is the verification state of one Resilient sequence.
type verifier struct {
	r    *Resilient
	o    VerifyOptions
	bans *Bans
	rows []row // the main route's rows, by position; len(rows) == len(r.fed)

	shadow *Session
	base   []Hop // the main route the shadow was built for
	sPos   int   // positions the shadow holds, agreeing with r.fed
	noAlt  bool  // no range has a second provider (logged once)

	mu    sync.Mutex // guards stats
	stats VerifyStats
}

func newVerifier(r *Resilient, o *VerifyOptions) *verifier {
	if o == nil || o.Rate <= 0 {
		return nil
	}
	v := &verifier{r: r, o: *o, bans: o.Bans}
	v.o.Rate = min(v.o.Rate, 1)
	if v.o.Rand == nil {
		var seed [16]byte
		crand.Read(seed[:])
		v.o.Rand = rand.New(rand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
	}
	if v.o.MaxRounds == 0 {
		v.o.MaxRounds = 8
	}
	if v.bans == nil {
		v.bans = &Bans{}
	}
	v.stats.Rate = v.o.Rate
	return v
}

// Verification returns the sequence's verification counts (zero without
// verification).
func (r *Resilient) Verification() VerifyStats {
	if r.v == nil {
		return VerifyStats{}
	}
	r.v.mu.Lock()
	defer r.v.mu.Unlock()
	out := r.v.stats
	out.Banned = append([]Ban{}, out.Banned...)
	return out
}

// Settled returns how many of the tokens generated after a prompt of
// promptLen tokens a caller may pass on as final: those a check has
// covered, or all of them when none can be checked (no verification, or
// no range of the route has a second provider). Tokens past it may still
// be taken back by a *RewindError.
func (r *Resilient) Settled(promptLen int) int {
	if r.v == nil {
		return math.MaxInt
	}
	st := r.Verification()
	if st.Unverifiable {
		return math.MaxInt
	}
	return max(st.Verified-promptLen+1, 0)
}

// exclude is the set of peers plans route around: those this sequence
// dropped, and the client's bans.
func (r *Resilient) exclude() map[string]bool {
	if r.v == nil {
		return r.drop
	}
	out := maps.Clone(r.drop)
	maps.Copy(out, r.v.bans.active(r.fo.Now()))
	return out
}

func (v *verifier) close() {
	if v.shadow != nil {
		v.shadow.Close()
		v.shadow = nil
	}
}

func (v *verifier) count(f func(*VerifyStats)) {
	v.mu.Lock()
	f(&v.stats)
	v.mu.Unlock()
}

// rowsOf turns the result of st on s into rows, one per output row.
func (v *verifier) rowsOf(st generate.Step, res generate.StepResult, s *Session) []row {
	out := make([]row, len(res.Next))
	k := 0
	if s.output == wire.OutTopK && len(res.Next) > 0 {
		k = len(s.Cands) / len(res.Next)
	}
	for i, id := range res.Next {
		out[i] = row{ok: true, id: id, route: s.Route}
		if i < len(st.Uniform) {
			out[i].u = st.Uniform[i]
		}
		if k > 0 {
			out[i].cands = slices.Clone(s.Cands[i*k : (i+1)*k])
		}
	}
	return out
}

// record keeps the main route's rows of st (run on s), dropping what was
// recorded at positions >= st.Pos.
func (v *verifier) record(st generate.Step, res generate.StepResult, s *Session) {
	end := st.Pos + len(st.IDs)
	v.rows = v.rows[:st.Pos]
	for len(v.rows) < end {
		v.rows = append(v.rows, row{})
	}
	copy(v.rows[end-len(res.Next):], v.rowsOf(st, res, s))
}

// same reports whether two routes' rows agree.
func (v *verifier) same(a, b row) bool {
	if a.cands == nil || b.cands == nil {
		return a.id == b.id
	}
	if len(a.cands) != len(b.cands) {
		return false
	}
	for i, x := range a.cands {
		y := b.cands[i]
		if x.ID != y.ID {
			return false
		}
		if v.o.Tolerance == 0 && math.Float32bits(x.Logit) != math.Float32bits(y.Logit) ||
			v.o.Tolerance > 0 && !(math.Abs(float64(x.Logit-y.Logit)) <= float64(v.o.Tolerance)) {
			return false
		}
	}
	return true
}

// after runs once a step of the main route succeeded (r.fed already holds
// its tokens): it records the rows and, for a drawn step, checks them.
// It may re-route and run the step again, so it returns the step's result.
func (v *verifier) after(ctx context.Context, st generate.Step, res generate.StepResult) (generate.StepResult, error) {
	v.record(st, res, v.r.s)
	v.sPos = min(v.sPos, st.Pos)
	step := 0
	v.count(func(s *VerifyStats) { s.Steps++; step = s.Steps - 1 })
	if step == 0 {
		// Whether any check can run is known before the first is drawn.
		_, differs := v.shadowRoute()
		v.count(func(s *VerifyStats) { s.Unverifiable = !differs })
	}
	if v.o.Rate < 1 && v.o.Rand.Float64() >= v.o.Rate {
		return res, nil
	}
	return v.check(ctx, st, res, step)
}

// check compares the main route's rows since the shadow's position with
// the shadow's, localizes and bans liars, re-routes, and checks again
// until the routes agree.
func (v *verifier) check(ctx context.Context, st generate.Step, res generate.StepResult, step int) (generate.StepResult, error) {
	r := v.r
	end := len(r.fed)
	orig := slices.Clone(v.rows)
	var banned []string
	retried := false
	for round := 0; ; round++ {
		if round > v.o.MaxRounds {
			return res, fmt.Errorf("%w: routes still disagree after %d rounds", ErrVerification, v.o.MaxRounds)
		}
		if v.shadow != nil && !slices.EqualFunc(v.base, r.s.Route, sameHop) {
			v.close() // the main route changed: build a shadow for the new one
		}
		if v.shadow == nil {
			if err := v.openShadow(ctx); err != nil || v.shadow == nil {
				if err != nil {
					r.fo.Log.Warn("verification: no shadow route", "err", err)
				}
				v.count(func(s *VerifyStats) { s.Skipped++ })
				return res, nil
			}
		}
		from, srows, err := v.catchUp(ctx, end)
		if err != nil {
			v.close()
			if ctx.Err() == nil && Retryable(err) && !retried {
				retried = true
				continue
			}
			r.fo.Log.Warn("verification: shadow route failed; step not checked", "pos", st.Pos, "err", err)
			v.count(func(s *VerifyStats) { s.Skipped++ })
			return res, nil
		}
		q, n := -1, 0
		for i, sr := range srows {
			mr := v.rows[from+i]
			if !mr.ok {
				continue
			}
			n++
			if !v.same(mr, sr) {
				q = from + i
				break
			}
		}
		v.count(func(s *VerifyStats) {
			s.Rows += n
			if round == 0 {
				s.Checked++
			}
		})
		if q < 0 {
			res, err := v.rewind(st, res, orig, banned)
			var rw *RewindError
			switch {
			case err == nil:
				v.count(func(s *VerifyStats) { s.Verified = max(s.Verified, end) })
			case errors.As(err, &rw):
				v.count(func(s *VerifyStats) { s.Verified = max(s.Verified, rw.Pos-1) })
			}
			return res, err
		}
		v.count(func(s *VerifyStats) { s.Mismatches++ })
		r.fo.Log.Warn("verification: routes disagree", "pos", q, "main", routeIDs(v.rows[q].route), "shadow", routeIDs(v.shadow.Route))
		bad, err := v.localize(ctx, q, v.rows[q], srows[q-from], v.shadow.Route)
		if v.o.OnMismatch != nil {
			v.o.OnMismatch(Mismatch{Step: step, Pos: q, Banned: bad})
		}
		if err != nil {
			return res, err
		}
		now := r.fo.Now()
		for _, id := range bad {
			d := v.bans.Ban(id, now)
			banned = append(banned, id)
			r.fo.Log.Warn("verification: peer banned", "peer", id, "for", d, "pos", q)
			v.count(func(s *VerifyStats) {
				s.Banned = append(s.Banned, Ban{Peer: id, Step: step, Pos: q, For: d, Why: fmt.Sprintf("its results at position %d disagreed with other providers'", q)})
			})
		}
		isBad := func(h Hop) bool { return slices.Contains(bad, h.Peer.ID.String()) }
		if slices.ContainsFunc(v.shadow.Route, isBad) {
			v.close()
		}
		if slices.ContainsFunc(v.rows[q].route, isBad) {
			// The main route's rows from q on are lies: recompute them on
			// a route without the liar, then check them again.
			if slices.ContainsFunc(r.s.Route, isBad) {
				if err := v.rebuildMain(ctx, q); err != nil {
					v.invalidate(q, end)
					return res, err
				}
			}
			if res, err = v.rerun(ctx, st, q, end); err != nil {
				v.invalidate(q, end)
				return res, err
			}
			v.sPos = min(v.sPos, q, st.Pos)
		}
	}
}

// rewind ends a check whose rows agree: if a token the caller took came
// from a row that has since been found a lie, it takes the sequence back
// to that token.
func (v *verifier) rewind(st generate.Step, res generate.StepResult, orig []row, banned []string) (generate.StepResult, error) {
	fed := v.r.fed
	for i := 0; i < st.Pos && i < len(orig) && i+1 < len(fed); i++ {
		next := int(fed[i+1])
		if orig[i].ok && orig[i].id == next && v.rows[i].ok && v.rows[i].id != next {
			m := i + 1
			v.r.fed = fed[:m]
			v.rows = v.rows[:m]
			v.sPos = min(v.sPos, m)
			v.count(func(s *VerifyStats) { s.Rewinds++ })
			v.r.fo.Log.Warn("verification: rewinding past a lie", "pos", m)
			return generate.StepResult{}, &RewindError{Pos: m, Banned: banned}
		}
	}
	return res, nil
}

// invalidate forgets the main route's rows in [from, end) (they came
// from a route found lying, and could not be recomputed).
func (v *verifier) invalidate(from, end int) {
	for i := from; i < end && i < len(v.rows); i++ {
		v.rows[i] = row{}
	}
}

// shadowRoute is the main route with, in every range that has another
// provider of the same shard, another peer; differs is false when no
// range has one (no step can be checked).
func (v *verifier) shadowRoute() (hops []Hop, differs bool) {
	r := v.r
	avoid := r.exclude()
	for _, h := range r.s.Route {
		avoid[h.Peer.ID.String()] = true
	}
	hops = slices.Clone(r.s.Route)
	for i, h := range hops {
		if alt, ok := v.alternate(h, avoid); ok {
			hops[i], differs = alt, true
			avoid[alt.Peer.ID.String()] = true
		}
	}
	return hops, differs
}

// openShadow opens the shadow route (shadowRoute).
func (v *verifier) openShadow(ctx context.Context) error {
	r := v.r
	hops, differs := v.shadowRoute()
	v.count(func(s *VerifyStats) { s.Unverifiable = !differs })
	if !differs {
		if !v.noAlt {
			v.noAlt = true
			r.fo.Log.Info("verification: no range of the route has a second provider; steps cannot be checked", "route", routeIDs(r.s.Route))
		}
		return nil
	}
	s, err := r.c.Open(ctx, hops, v.shadowOptions())
	if err != nil {
		return err
	}
	v.shadow, v.base, v.sPos = s, slices.Clone(r.s.Route), 0
	return nil
}

// shadowOptions are the shadow's and the tie-break routes' session
// options: the main route's, without full logits.
func (v *verifier) shadowOptions() SessionOptions {
	o := v.r.opts
	if o.Logits {
		o.Logits = false
		o = v.o.sessionOptions(o)
	}
	return o
}

// alternate returns a provider of h's shard that avoid does not name:
// the one of least known round trip.
func (v *verifier) alternate(h Hop, avoid map[string]bool) (Hop, bool) {
	var best *Provider
	for i := range v.r.provs {
		p := &v.r.provs[i]
		if p.Shard.CID != h.Shard || avoid[p.Peer.ID.String()] {
			continue
		}
		if best == nil || rttLess(p, best) {
			best = p
		}
	}
	if best == nil {
		return Hop{}, false
	}
	out := h
	out.Peer, out.RTT = best.Peer, best.RTT
	return out, true
}

// rttLess orders providers by known round trip (unknown last), then ID.
func rttLess(a, b *Provider) bool {
	if (a.RTT > 0) != (b.RTT > 0) {
		return a.RTT > 0
	}
	if a.RTT != b.RTT {
		return a.RTT < b.RTT
	}
	return a.Peer.ID < b.Peer.ID
}

// catchUp runs the shadow over every token since its position, asking
// for every row, and returns the first row's position and the rows.
func (v *verifier) catchUp(ctx context.Context, end int) (int, []row, error) {
	from := min(v.sPos, end-1)
	us := make([]float64, end-from)
	for i := range us {
		us[i] = v.rows[from+i].u
	}
	st := generate.Step{Pos: from, IDs: v.r.fed[from:end], All: true, Uniform: us}
	res, err := v.shadow.Step(ctx, st)
	if err != nil {
		return 0, nil, err
	}
	v.sPos = end
	return from, v.rowsOf(st, res, v.shadow), nil
}

// probe runs tokens through route in a new session and returns the last
// row, drawn with u.
func (v *verifier) probe(ctx context.Context, route []Hop, tokens []int32, u float64) (row, error) {
	s, err := v.r.c.Open(ctx, route, v.shadowOptions())
	if err != nil {
		return row{}, err
	}
	defer s.Close()
	st := generate.Step{Pos: 0, IDs: tokens, Uniform: []float64{u}}
	res, err := s.Step(ctx, st)
	if err != nil {
		return row{}, err
	}
	return v.rowsOf(st, res, s)[0], nil
}

// localize finds who lied at row q, where main (the route of mr) and
// shadow disagree: for each hop where their peers differ, it runs tokens
// 0..q through the main route with that hop's peer replaced by the
// shadow's and by a third provider, and returns the odd ones out.
func (v *verifier) localize(ctx context.Context, q int, mr, sr row, shadow []Hop) ([]string, error) {
	main := mr.route
	if len(main) != len(shadow) {
		return nil, fmt.Errorf("%w: routes disagree at position %d, and differ in shape", ErrVerification, q)
	}
	var diff []int
	for i := range main {
		if main[i].Shard != shadow[i].Shard {
			return nil, fmt.Errorf("%w: routes disagree at position %d, and differ in shape", ErrVerification, q)
		}
		if main[i].Peer.ID != shadow[i].Peer.ID {
			diff = append(diff, i)
		}
	}
	tokens := v.r.fed[:q+1]
	excl := v.r.exclude()
	var bad []string
	type cand struct {
		peer string
		row  row
	}
	for _, i := range diff {
		cs := []cand{{main[i].Peer.ID.String(), mr}}
		try := func(h Hop) bool {
			route := slices.Clone(main)
			route[i] = h
			got, err := v.probe(ctx, route, tokens, mr.u)
			if err != nil {
				v.r.fo.Log.Warn("verification: tie-break route failed", "hop", i, "peer", h.Peer.ID.ShortString(), "err", err)
				return false
			}
			cs = append(cs, cand{h.Peer.ID.String(), got})
			return true
		}
		if len(diff) == 1 {
			cs = append(cs, cand{shadow[i].Peer.ID.String(), sr})
		} else if !try(shadow[i]) {
			continue // no verdict on this hop
		}
		// A third provider breaks the tie; if one fails, try another.
		avoid := maps.Clone(excl)
		avoid[main[i].Peer.ID.String()], avoid[shadow[i].Peer.ID.String()] = true, true
		thirds := 0
		for ; thirds < 3; thirds++ {
			third, ok := v.alternate(main[i], avoid)
			if !ok || try(third) {
				break
			}
			avoid[third.Peer.ID.String()] = true
		}
		if len(cs) < 3 && thirds > 0 {
			continue // thirds exist but none answered: no verdict
		}
		// Group the candidates by the row they gave.
		var groups [][]string
		var reps []row
	next:
		for _, c := range cs {
			for g, rep := range reps {
				if v.same(rep, c.row) {
					groups[g] = append(groups[g], c.peer)
					continue next
				}
			}
			groups, reps = append(groups, []string{c.peer}), append(reps, c.row)
		}
		switch {
		case len(groups) == 1:
			// This hop's providers agree: the liar is elsewhere.
		case len(cs) == 3 && len(groups) == 2:
			for _, g := range groups {
				if len(g) == 1 {
					bad = append(bad, g[0]) // the odd one out
				}
			}
		default:
			// Two providers that disagree, or three that all do: nobody
			// can tell who is honest. Ban them all; route around them if
			// another layout can.
			v.r.fo.Log.Warn("verification: providers of one range disagree and no majority", "hop", i, "peers", cs)
			for _, g := range groups {
				bad = append(bad, g...)
			}
		}
	}
	if len(bad) == 0 {
		return nil, fmt.Errorf("%w: routes disagree at position %d and no hop could be blamed", ErrVerification, q)
	}
	return bad, nil
}

// rebuildMain moves the main route around banned peers and replays the
// verified prefix, positions 0..q-1, into it.
func (v *verifier) rebuildMain(ctx context.Context, q int) error {
	r := v.r
	old := r.s
	r.s = nil
	old.stream.SetWriteDeadline(r.fo.Now().Add(100 * time.Millisecond))
	old.Close()
	hops, err := r.plan(ctx)
	if err != nil {
		return fmt.Errorf("%w: no route around the banned peers: %w", ErrVerification, err)
	}
	s, err := r.c.Open(ctx, hops, r.opts)
	if err != nil {
		return err
	}
	if q > 0 {
		if _, err := s.Step(ctx, generate.Step{Pos: 0, IDs: r.fed[:q], Uniform: []float64{0}}); err != nil {
			s.Close()
			return err
		}
	}
	r.s = s
	r.fo.Log.Info("verification: re-routed around banned peers", "route", routeIDs(hops), "replayed", q)
	return nil
}

// rerun recomputes the main route's rows from q to end (the step st
// ends at end), from st's start if q is later, and returns st's result
// from them.
func (v *verifier) rerun(ctx context.Context, st generate.Step, q, end int) (generate.StepResult, error) {
	r := v.r
	q = min(q, st.Pos)
	us := make([]float64, end-q)
	for i := range us {
		us[i] = v.rows[q+i].u
	}
	for i, u := range st.Uniform { // the step's own rows: its numbers
		if at := end - len(st.Uniform) + i; at >= q {
			us[at-q] = u
		}
	}
	all := generate.Step{Pos: q, IDs: r.fed[q:end], All: true, Uniform: us, Logits: st.Logits}
	res, err := r.s.Step(ctx, all)
	if err != nil {
		return generate.StepResult{}, err
	}
	v.record(all, res, r.s)
	first := len(res.Next) - 1
	if st.All {
		first = st.Pos - q
	}
	out := generate.StepResult{Next: res.Next[first:]}
	if len(res.Logits) > 0 {
		w := len(res.Logits) / len(res.Next)
		out.Logits = res.Logits[first*w:]
	}
	return out, nil
}

func sameHop(a, b Hop) bool {
	return a.Peer.ID == b.Peer.ID && a.Shard == b.Shard
}

func routeIDs(hops []Hop) []string {
	var out []string
	for _, h := range hops {
		out = append(out, h.Peer.ID.ShortString())
	}
	return out
}

// Generate runs generate.Run on a verified sequence and regenerates after
// a *RewindError: it keeps the tokens before the rewound position and
// runs again from there, drawing the same random numbers a run without
// the rewind would have, so the output is the honest route's (greedy or
// seeded). onRewind, if set, is told how many generated tokens were kept
// (the caller's OnToken saw the discarded ones).
//
// b is r, or a backend that passes its steps on to r (to time them, say).
func Generate(ctx context.Context, b generate.Backend, prompt []int, o generate.Options, onRewind func(kept int)) (generate.Result, error) {
	var out generate.Result
	var kept []int
	for attempt := 0; ; attempt++ {
		p := append(slices.Clone(prompt), kept...)
		oo := o
		oo.MaxTokens = o.MaxTokens - len(kept)
		if attempt > 0 {
			oo.OnPromptLogits = nil
		}
		sb := &shifted{b: b, u: generate.Uniforms(o.Seed)}
		for range kept {
			sb.u()
		}
		res, err := generate.Run(ctx, sb, p, oo)
		if attempt == 0 {
			out.Prefill = res.Prefill
		}
		out.Decode += res.Decode
		out.Traversals += res.Traversals
		var rw *RewindError
		if errors.As(err, &rw) && attempt < 64 {
			keep := min(max(rw.Pos-len(prompt), 0), len(kept)+len(res.IDs))
			kept = append(kept, res.IDs...)[:keep]
			if onRewind != nil {
				onRewind(keep)
			}
			continue
		}
		out.IDs = append(kept, res.IDs...)
		out.Stopped = res.Stopped
		return out, err
	}
}

// shifted replaces the random number of each step's last row with the
// next of its own stream: after a rewind, generate.Run starts its stream
// again, but the regenerated tokens must draw what they drew first.
type shifted struct {
	b generate.Backend
	u func() float64
}

func (s *shifted) Step(ctx context.Context, st generate.Step) (generate.StepResult, error) {
	if n := len(st.Uniform); n > 0 {
		st.Uniform = slices.Clone(st.Uniform)
		st.Uniform[n-1] = s.u()
	}
	return s.b.Step(ctx, st)
}
