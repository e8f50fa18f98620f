package route

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap one of them.
var (
	// ErrNoRoute means no chain of live servers covers the model. Plan
	// returns it inside a *NoRouteError that names where chains stop.
	ErrNoRoute = errors.New("route: no route covers the model")
	// ErrBadModel means a Model with no layers or no head rows.
	ErrBadModel = errors.New("route: invalid model")
	// ErrBadOptions means Options that fail Validate.
	ErrBadOptions = errors.New("route: invalid options")
	// ErrBadRange means a range that is not part of the model (see
	// Model.Normalize).
	ErrBadRange = errors.New("route: invalid range")
	// ErrBadChain means hops that do not chain through the model (see
	// Check).
	ErrBadChain = errors.New("route: hops do not chain")
)

// NoRouteError is the ErrNoRoute that Plan returns: every chain of live
// servers that starts at layer 0 stops at or before the position it names,
// the furthest any of them reaches, and no live usable server starts
// there. A gap in coverage (no live server holds layer 7) is reported as
// that layer or an earlier one; misaligned ranges that cover every layer
// but do not chain are reported where the chains stop.
type NoRouteError struct {
	// InHead says whether the position is in the output head. If it is
	// not, Layer is the first layer no chain computes; if it is, every
	// layer is reachable and HeadRow is the first head row no chain
	// computes.
	InHead  bool
	Layer   int
	HeadRow int
}

func (e *NoRouteError) Error() string {
	if e.InHead {
		return fmt.Sprintf("%v: no live server continues from head row %d", ErrNoRoute, e.HeadRow)
	}
	return fmt.Sprintf("%v: no live server continues from layer %d", ErrNoRoute, e.Layer)
}

// Unwrap makes a *NoRouteError errors.Is ErrNoRoute.
func (e *NoRouteError) Unwrap() error { return ErrNoRoute }

// Model is the shape every route must cover: layers [0, Layers), then
// head rows [0, Vocab).
type Model struct {
	Layers int // transformer blocks
	Vocab  int // rows of the output head
}

func (m Model) validate() error {
	if m.Layers < 1 || m.Vocab < 1 {
		return fmt.Errorf("%w: %d layers, %d head rows", ErrBadModel, m.Layers, m.Vocab)
	}
	return nil
}

// Range is a part of the model, with the meaning of shards.Stage (whose
// fields it repeats, so route.Range(stage) converts one): layers
// [Start, End) and head rows [HeadLo, HeadHi), where HeadLo, HeadHi = 0, 0
// means the whole head if End is the last layer and no head otherwise. A
// head-only range has Start == End == Layers.
type Range struct {
	Start, End     int
	HeadLo, HeadHi int
}

func (r Range) String() string {
	if r.HeadHi > 0 {
		return fmt.Sprintf("%d:%d/%d:%d", r.Start, r.End, r.HeadLo, r.HeadHi)
	}
	return fmt.Sprintf("%d:%d", r.Start, r.End)
}

// Normalize returns r with its head rows spelled out: [0, Vocab) for 0, 0
// on a range that ends at the last layer, and 0, 0 (none) on a range that
// ends before it, whatever it said (as shards.Stage reads them). It
// returns ErrBadRange for a range outside the model or with nothing in it.
func (m Model) Normalize(r Range) (Range, error) {
	bad := func(why string) (Range, error) {
		return Range{}, fmt.Errorf("%w: %v of a %d-layer, %d-row model: %s", ErrBadRange, r, m.Layers, m.Vocab, why)
	}
	switch {
	case r.Start < 0 || r.End > m.Layers || r.Start > r.End:
		return bad("layers out of order or out of the model")
	case r.End < m.Layers:
		if r.Start == r.End {
			return bad("no layers")
		}
		r.HeadLo, r.HeadHi = 0, 0
		return r, nil
	case r.HeadLo == 0 && r.HeadHi == 0:
		r.HeadHi = m.Vocab
	}
	if r.HeadLo < 0 || r.HeadHi > m.Vocab || r.HeadLo >= r.HeadHi {
		return bad("head rows out of order or out of the model")
	}
	return r, nil
}

// Server is one live shard as a client sees it: a peer, the range it
// computes, and what it last reported about its speed and load. A peer
// that serves several ranges appears once per range, with the same ID.
type Server struct {
	ID             string // peer ID; a server without one is ignored
	Start, End     int    // layers [Start, End)
	HeadLo, HeadHi int    // head rows [HeadLo, HeadHi); 0, 0 as in Range

	ComputeMicros float64 // one forward of one token at batch 1, measured
	QueuedTokens  int     // tokens waiting in its queue
	Sessions      int     // sessions open on it
	TokensPerSec  float64 // measured throughput capacity, all sessions together

	Draining bool // finishing its sessions, taking no new ones
	Banned   bool // failed verification or misbehaved
}

// Range returns the server's range as given (not normalized).
func (s Server) Range() Range { return Range{s.Start, s.End, s.HeadLo, s.HeadHi} }

// RTT reports the measured round-trip time in microseconds between two
// peers; "" is the client, so RTT("", x) is the client's link to x, RTT(x,
// "") the link from x back to it, and RTT(x, y) the link between servers.
// ok = false means unknown, and so does a negative or NaN value:
// Options.DefaultRTTMicros is used instead. (+Inf is as bad as a link can
// be: the cap on every term, 10^15 µs.) Plan never asks about a peer
// and itself: that costs nothing. RTT must answer the same question the
// same way during one call. A nil RTT knows nothing.
type RTT func(a, b string) (micros float64, ok bool)

// Matrix is an RTT backed by a table; a missing entry is unknown.
type Matrix map[[2]string]float64

// RTT looks a, b up in the matrix.
func (x Matrix) RTT(a, b string) (float64, bool) {
	v, ok := x[[2]string{a, b}]
	return v, ok
}

// Policy is what Plan optimizes.
type Policy int

const (
	// MinLatency minimizes the expected per-token latency.
	MinLatency Policy = iota
	// ThroughputAware minimizes the expected latency plus a load penalty
	// per server (see doc.go, "Throughput-aware routing"), so that many
	// clients planning on the same view spread out instead of piling onto
	// the one fastest chain.
	ThroughputAware
	// Random picks a random valid route with Options.Rand: a walk from
	// layer 0 that chooses uniformly among the usable servers starting at
	// each position. It is the baseline a simulator compares against.
	Random
)

func (p Policy) String() string {
	switch p {
	case MinLatency:
		return "min-latency"
	case ThroughputAware:
		return "throughput-aware"
	case Random:
		return "random"
	}
	return fmt.Sprintf("Policy(%d)", int(p))
}

// Defaults used for zero-valued Options fields.
const (
	DefaultRTTMicros  = 50_000.0 // a WAN link we have not measured
	DefaultBatch      = 8.0      // tokens a server decodes per forward pass when busy
	DefaultLoadWeight = 1.0
)

// Options tune Plan. The zero value is MinLatency with the defaults above.
type Options struct {
	Policy Policy
	// Rand drives the Random policy; required for it, unused otherwise.
	Rand *rand.Rand

	// DefaultRTTMicros replaces an unknown RTT; 0 means DefaultRTTMicros.
	DefaultRTTMicros float64
	// Exclude names peers not to use (all their ranges).
	Exclude map[string]bool
	// Batch is how many queued tokens a server decodes in one forward
	// pass of about ComputeMicros (decoding is memory-bound); 0 means
	// DefaultBatch. See doc.go, "The latency model".
	Batch float64
	// LoadWeight scales ThroughputAware's load penalty; 0 means
	// DefaultLoadWeight.
	LoadWeight float64
}

// Validate reports options Plan cannot use, wrapping ErrBadOptions.
func (o Options) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadOptions}, a...)...)
	}
	switch {
	case o.Policy < MinLatency || o.Policy > Random:
		return bad("unknown policy %v", o.Policy)
	case o.Policy == Random && o.Rand == nil:
		return bad("the random policy needs a Rand")
	case !finite(o.DefaultRTTMicros) || o.DefaultRTTMicros < 0:
		return bad("default RTT %v", o.DefaultRTTMicros)
	case !finite(o.Batch) || o.Batch < 0 || (o.Batch > 0 && o.Batch < 1):
		return bad("batch %v (want >= 1, or 0 for the default)", o.Batch)
	case !finite(o.LoadWeight) || o.LoadWeight < 0:
		return bad("load weight %v", o.LoadWeight)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.DefaultRTTMicros == 0 {
		o.DefaultRTTMicros = DefaultRTTMicros
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	if o.LoadWeight == 0 {
		o.LoadWeight = DefaultLoadWeight
	}
	return o
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// nonneg returns x, or 0 for a negative, NaN or infinite x.
func nonneg(x float64) float64 {
	if !finite(x) || x < 0 {
		return 0
	}
	return x
}

// maxMicros caps every term of a route's cost (about 31 years), so that
// sums of a few dozen terms stay finite and comparable.
const maxMicros = 1e15

// micros is x as a term of a cost: x capped to [0, maxMicros], 0 if not a
// number.
func micros(x float64) float64 {
	if math.IsNaN(x) || x < 0 {
		return 0
	}
	return min(x, maxMicros)
}

// link is the RTT from a to b as Plan uses it.
func (o *Options) link(rtt RTT, a, b string) float64 {
	if a == b {
		return 0
	}
	if rtt != nil {
		if v, ok := rtt(a, b); ok && v >= 0 {
			return min(v, maxMicros)
		}
	}
	return min(o.DefaultRTTMicros, maxMicros)
}

// maxCapacity caps Capacity: a billion tokens a second.
const maxCapacity = 1e9

// Capacity is the throughput Coverage and the load penalty count for s:
// TokensPerSec, or 1e6/ComputeMicros (batch 1) if it reported none, or 0;
// at most 10^9.
func Capacity(s Server) float64 {
	if tps := nonneg(s.TokensPerSec); tps > 0 {
		return min(tps, maxCapacity)
	}
	if c := nonneg(s.ComputeMicros); c > 0 {
		return min(1e6/c, maxCapacity)
	}
	return 0
}

// Leg is one hop's share of a route's cost, in microseconds.
type Leg struct {
	RTTMicros     float64 // the link into this hop (from the client for the first)
	ComputeMicros float64
	QueueMicros   float64 // QueuedTokens × ComputeMicros / Batch
	LoadMicros    float64 // ThroughputAware's penalty; 0 under other policies
}

// Route is a chain of servers and what it is expected to cost per token.
type Route struct {
	Hops []Server
	Legs []Leg // Legs[i] belongs to Hops[i]
	// ReturnMicros is the link from the last hop back to the client.
	ReturnMicros float64
	// ExpectedMicros is the expected per-token latency: every leg's
	// RTT, compute and queue, plus ReturnMicros.
	ExpectedMicros float64
	// Cost is what the policy minimized: ExpectedMicros plus every
	// LoadMicros. It equals ExpectedMicros except under ThroughputAware.
	Cost float64
}

// IDs returns the hops' peer IDs in order.
func (r Route) IDs() []string {
	ids := make([]string, len(r.Hops))
	for i, h := range r.Hops {
		ids[i] = h.ID
	}
	return ids
}

func (r Route) String() string {
	var b strings.Builder
	for i, h := range r.Hops {
		if i > 0 {
			b.WriteString(" → ")
		}
		fmt.Fprintf(&b, "%s[%v]", h.ID, h.Range())
	}
	fmt.Fprintf(&b, " (%.0fµs)", r.ExpectedMicros)
	return b.String()
}

// weights returns what a hop on s adds to a route's latency (compute and
// queue) and to the objective (that plus the load penalty). Every
// function that totals a route adds them in the same order, so equal
// routes cost bit-for-bit the same however they were found.
func (o *Options) weights(s *Server) (lat, obj float64, leg Leg) {
	leg.ComputeMicros = micros(s.ComputeMicros)
	leg.QueueMicros = micros(float64(max(s.QueuedTokens, 0)) * leg.ComputeMicros / o.Batch)
	if o.Policy == ThroughputAware && s.Sessions > 0 {
		if c := Capacity(*s); c > 0 {
			leg.LoadMicros = micros(o.LoadWeight * 1e6 * float64(s.Sessions) / c)
		}
	}
	lat = leg.ComputeMicros + leg.QueueMicros
	return lat, lat + leg.LoadMicros, leg
}

// Evaluate totals the route through hops under opts, without checking
// that they chain (see Check). Plan and BruteForce return what Evaluate
// says of the hops they chose.
func Evaluate(hops []Server, rtt RTT, opts Options) Route {
	o := opts.withDefaults()
	r := Route{Hops: hops, Legs: make([]Leg, len(hops))}
	prev := ""
	for i := range hops {
		lat, obj, leg := o.weights(&hops[i])
		leg.RTTMicros = o.link(rtt, prev, hops[i].ID)
		r.ExpectedMicros = r.ExpectedMicros + leg.RTTMicros + lat
		r.Cost = r.Cost + leg.RTTMicros + obj
		r.Legs[i] = leg
		prev = hops[i].ID
	}
	if len(hops) > 0 {
		r.ReturnMicros = o.link(rtt, prev, "")
		r.ExpectedMicros += r.ReturnMicros
		r.Cost += r.ReturnMicros
	}
	return r
}

// Check reports whether hops chain through the whole model: the first
// starts at layer 0, each starts where the one before ended (layers, then
// head rows), and the last ends at the last head row. It does not look at
// liveness. The error wraps ErrBadChain or ErrBadRange.
func Check(m Model, hops []Server) error {
	if err := m.validate(); err != nil {
		return err
	}
	at := 0
	for i, h := range hops {
		r, err := m.Normalize(h.Range())
		if err != nil {
			return fmt.Errorf("hop %d (%s): %w", i, h.ID, err)
		}
		sp, ep, ok := m.positions(r)
		if !ok || sp != at {
			return fmt.Errorf("%w: hop %d (%s, %v) does not continue from %s", ErrBadChain, i, h.ID, h.Range(), m.describe(at))
		}
		at = ep
	}
	if at != m.Layers+m.Vocab {
		return fmt.Errorf("%w: the hops end at %s", ErrBadChain, m.describe(at))
	}
	return nil
}

// The positions of a route lie on one axis: position p < Layers is "about
// to compute layer p" and position Layers+r is "every layer done, head
// rows [0, r) done". A route runs from 0 to Layers+Vocab, every hop from
// its start position to its end position.

// positions returns the start and end positions of a normalized range,
// and whether a route can use it at all: a range that ends at the last
// layer and then starts its head part past row 0 leaves rows [0, HeadLo)
// before it, which nothing may fill.
func (m Model) positions(r Range) (start, end int, ok bool) {
	if r.Start < m.Layers {
		if r.End == m.Layers && r.HeadLo != 0 {
			return 0, 0, false
		}
		start = r.Start
	} else {
		start = m.Layers + r.HeadLo
	}
	if r.End < m.Layers {
		end = r.End
	} else {
		end = m.Layers + r.HeadHi
	}
	return start, end, true
}

func (m Model) describe(p int) string {
	if p < m.Layers {
		return fmt.Sprintf("layer %d", p)
	}
	return fmt.Sprintf("head row %d", p-m.Layers)
}

func (m Model) noRoute(p int) error {
	if p < m.Layers {
		return &NoRouteError{Layer: p}
	}
	return &NoRouteError{InHead: true, Layer: m.Layers, HeadRow: p - m.Layers}
}

// hop is a server a route may use, with its positions and weights.
type hop struct {
	idx    int32 // in the caller's slice
	sp, ep int32 // start and end positions on the model's axis
	si, ei int32 // their numbers in a graph
	lat    float64
	obj    float64
}

// usable appends to hs the servers a route may use under opts (not
// draining, banned, excluded, nameless or malformed, and not
// unchainable), in input order.
func usable(hs []hop, m Model, servers []Server, o *Options) []hop {
	for i := range servers {
		s := &servers[i]
		if s.Draining || s.Banned || s.ID == "" || o.Exclude[s.ID] {
			continue
		}
		sp, ep, ok := m.span(s)
		if !ok {
			continue
		}
		lat, obj, _ := o.weights(s)
		hs = append(hs, hop{idx: int32(i), sp: int32(sp), ep: int32(ep), lat: lat, obj: obj})
	}
	return hs
}

// span is Normalize then positions, without the error.
func (m Model) span(s *Server) (start, end int, ok bool) {
	r := Range{s.Start, s.End, s.HeadLo, s.HeadHi}
	switch {
	case r.Start < 0 || r.End > m.Layers || r.Start > r.End:
		return 0, 0, false
	case r.End < m.Layers:
		if r.Start == r.End {
			return 0, 0, false
		}
		return r.Start, r.End, true
	case r.HeadLo == 0 && r.HeadHi == 0:
		r.HeadHi = m.Vocab
	}
	if r.HeadLo < 0 || r.HeadHi > m.Vocab || r.HeadLo >= r.HeadHi {
		return 0, 0, false
	}
	return m.positions(r)
}

// lessServer is the tie-break order of single hops: ID, then range, then
// place in the caller's slice.
func lessServer(servers []Server, a, b int32) int {
	x, y := &servers[a], &servers[b]
	if c := strings.Compare(x.ID, y.ID); c != 0 {
		return c
	}
	for _, d := range [...]int{x.Start - y.Start, x.End - y.End, x.HeadLo - y.HeadLo, x.HeadHi - y.HeadHi, int(a) - int(b)} {
		if d != 0 {
			return d
		}
	}
	return 0
}

// compareChains orders two equally long chains of server indices
// lexicographically by lessServer.
func compareChains(servers []Server, a, b []int32) int {
	for i := range min(len(a), len(b)) {
		if c := lessServer(servers, a[i], b[i]); c != 0 {
			return c
		}
	}
	return len(a) - len(b)
}
