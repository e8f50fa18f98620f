package scale

import (
	"container/heap"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"time"

	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/internal/sched"
	"github.com/pipeshard/pipeshard/shards"
)

// The random streams of a run. Each purpose draws from its own PCG
// stream of the seed, so that runs of one seed under different policies
// see the same swarm, the same churn and the same clients (common random
// numbers): the policies are compared on the same inputs.
const (
	streamSwarm     = iota + 1 // nodes' attributes, lifetimes and joins
	streamWorkload             // session arrivals and clients
	streamRoute                // the Random routing policy
	streamRebalance            // dynamic placement's check intervals
)

type evKind uint8

const (
	evArrive    evKind = iota // a Poisson session arrives
	evScripted                // scripted session a arrives
	evHop                     // job j reaches node a
	evBatch                   // node a (incarnation b) finishes its batch
	evToken                   // session a (epoch b) gets its token
	evFailover                // session a (epoch b) notices a failure and re-plans
	evJoin                    // a churn node joins
	evFixedJoin               // fixed node spec a joins
	evReady                   // node a (incarnation b) has loaded its stage
	evDeath                   // node a dies
	evRebalance               // node a (incarnation b) checks its placement
	evDrained                 // node a (incarnation b) ends its drain
	evCoverage                // sample coverage
	evTimeout                 // session a gives up if still open
	evWake                    // node a (incarnation b)'s gathering window ends
)

// event is one entry of the event queue: what happens at virtual time at.
// seq breaks ties in the order events were scheduled, so the queue's
// order is total and the run deterministic.
type event struct {
	at   time.Duration
	seq  uint64
	kind evKind
	a    int32
	b    uint32
	j    job
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

// job is a session's request travelling its route: tokens positions to
// compute at hop hop (1 to decode; to prefill or replay, the prefix at
// the hops that need it).
type job struct {
	sess    int32
	epoch   uint32
	hop     int32
	tokens  int32
	prefill bool
}

type nodeState uint8

const (
	stLoading  nodeState = iota // fetching or loading its stage
	stServing                   // in routes and coverage
	stDraining                  // finishing its sessions before moving
	stIdle                      // no stage fits its memory
	stDead
)

type node struct {
	id     string
	region int
	access time.Duration // last-mile RTT
	prof   shards.Profile
	uplink float64 // bytes/s
	memory float64 // bytes
	state  nodeState
	stage  int    // in model.stages
	target int    // the stage a draining node moves to
	inc    uint32 // incarnation: bumped when the node moves, to drop its old events
	capMil int64  // route.Capacity in thousandths of a token/s, on stage
	// computeMicros is one token at batch 1: what the node reports.
	computeMicros float64
	viewPos       int32 // index in sim.view, -1 if absent

	// The stage's scheduler: the node's own (internal/sched), driven in
	// virtual time. jobs holds the payload of each job it has queued.
	sched      *sched.Sched
	jobs       map[sched.JobID]job
	queued     int // tokens waiting in the scheduler
	batch      []job
	batchTok   int
	batchDur   time.Duration
	wakeAt     time.Duration      // a pending evWake, 0 if none
	uplinkFree time.Duration      // when its uplink finishes what it is sending
	sessions   map[int32]struct{} // sessions whose route holds it

	busyTime     time.Duration
	servingTime  time.Duration
	servingSince time.Duration
}

type sessState uint8

const (
	ssActive sessState = iota
	ssDone
	ssFailed
)

type session struct {
	region    int
	access    time.Duration
	route     []int32
	epoch     uint32
	state     sessState
	pending   bool   // a failover is scheduled
	failed    string // the node whose failure it is failing over from
	generated int
	// prefix is what the session's last prefill covered: the prompt, or
	// on failover the prompt and the tokens generated so far. fresh[i]
	// says whether hop i must compute it (it is new to the session);
	// the other hops hold the session's cache and compute one token.
	prefix  int
	fresh   []bool
	start   time.Duration
	askedAt time.Duration // when the token in flight was asked for
}

// sim is one run: the whole state of the swarm and its clients, and the
// event queue. It does no I/O and reads no clock.
type sim struct {
	cfg   Config
	m     *model
	now   time.Duration
	end   time.Duration // Duration + Drain: nothing happens after
	seq   uint64
	q     eventQueue
	nodes []*node
	sess  []*session

	rSwarm, rWork, rRoute, rMove *rand.Rand
	opts                         route.Options
	hiddenBytes                  float64
	rtt                          [][]time.Duration
	halfRTT                      []float64 // rtt/2 in µs, row-major
	links                        []linkInfo

	// view is the swarm as planners see it: every serving or draining
	// node, with loads at most StatusPeriod old.
	view     []route.Server
	viewNode []int32
	viewAt   time.Duration

	// Coverage by stage: the summed capacity (thousandths of a token/s)
	// of serving nodes, and of nodes loading or moving to each stage.
	servingMil, pendingMil []int64

	active          int // sessions not yet ended
	pendingArrivals int // session arrival events not yet fired
	progress        func(time.Duration)
	nextProgress    time.Duration

	res       Results
	lat, ttft []time.Duration
	hops      int
	plans     int
	cov       []CoverageSample
}

// The hard limits of a run, so that a scenario cannot exhaust memory.
const maxNodesEver = 1 << 24

func newSim(cfg Config, seed uint64) (*sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newModel(cfg)
	if err != nil {
		return nil, err
	}
	s := &sim{
		cfg:         cfg,
		m:           m,
		end:         cfg.Duration.D() + cfg.Drain.D(),
		rSwarm:      rand.New(rand.NewPCG(seed, streamSwarm)),
		rWork:       rand.New(rand.NewPCG(seed, streamWorkload)),
		rRoute:      rand.New(rand.NewPCG(seed, streamRoute)),
		rMove:       rand.New(rand.NewPCG(seed, streamRebalance)),
		rtt:         make([][]time.Duration, len(cfg.Network.RTT)),
		viewAt:      -1,
		res:         Results{Seed: seed, Routing: cfg.Routing, Placement: cfg.Placement, Nodes: cfg.Swarm.Nodes + len(cfg.Swarm.Fixed)},
		hiddenBytes: m.hidden,
	}
	for i, row := range cfg.Network.RTT {
		for _, d := range row {
			s.rtt[i] = append(s.rtt[i], d.D())
			s.halfRTT = append(s.halfRTT, micros(d.D())/2)
		}
	}
	s.opts = route.Options{Policy: route.Policy(cfg.Routing), Batch: cfg.RouteBatch, LoadWeight: cfg.LoadWeight}
	if cfg.Routing == Random {
		s.opts.Rand = s.rRoute
	}
	// Scripted stages outside the layouts get their own entries now, so
	// that the per-stage tables below have room for them.
	for _, f := range cfg.Swarm.Fixed {
		if f.Stage != nil {
			m.stageOf(*f.Stage)
		}
	}
	s.servingMil = make([]int64, len(m.stages))
	s.pendingMil = make([]int64, len(m.stages))
	return s, nil
}

// schedule queues an event.
func (s *sim) schedule(at time.Duration, kind evKind, a int32, b uint32, j job) {
	s.seq++
	heap.Push(&s.q, event{at: at, seq: s.seq, kind: kind, a: a, b: b, j: j})
}

// seconds converts a time in seconds from the cost model to virtual time,
// rounded to the nanosecond, at most maxDelay.
func seconds(x float64) time.Duration {
	if !(x*1e9 < float64(maxDelay)) {
		return maxDelay
	}
	return time.Duration(math.Round(x * 1e9))
}

// maxDelay bounds every delay (a century), so that times never overflow.
const maxDelay = 100 * 365 * 24 * time.Hour

func (s *sim) exp(r *rand.Rand, mean time.Duration) time.Duration {
	return seconds(r.ExpFloat64() * mean.Seconds())
}

// run plays the scenario out and returns its results.
func (s *sim) run() Results {
	c := s.cfg
	for i, f := range c.Swarm.Fixed {
		if f.JoinAt == 0 {
			s.join(&c.Swarm.Fixed[i], true)
		} else {
			s.schedule(f.JoinAt.D(), evFixedJoin, int32(i), 0, job{})
		}
	}
	for range c.Swarm.Nodes {
		s.join(nil, true)
	}
	if c.Swarm.MeanLifetime > 0 && c.Swarm.Nodes > 0 {
		s.schedule(s.joinGap(), evJoin, 0, 0, job{})
	}
	if c.Workload.SessionsPerSec > 0 {
		s.scheduleArrival()
	}
	for i, sp := range c.Workload.Scripted {
		s.pendingArrivals++
		s.schedule(sp.At.D(), evScripted, int32(i), 0, job{})
	}
	s.schedule(0, evCoverage, 0, 0, job{})

	for len(s.q) > 0 {
		e := heap.Pop(&s.q).(event)
		if e.at > s.end {
			break
		}
		s.now = e.at
		s.res.Events++
		s.handle(e)
		if s.progress != nil && s.now >= s.nextProgress {
			s.progress(s.now)
			s.nextProgress = s.now + time.Minute
		}
		if s.now >= c.Duration.D() && s.active == 0 && s.pendingArrivals == 0 {
			break
		}
	}
	if s.progress != nil {
		s.progress(s.now)
	}
	return s.finish()
}

func (s *sim) handle(e event) {
	switch e.kind {
	case evArrive:
		s.pendingArrivals--
		s.scheduleArrival()
		region, access := s.client()
		s.open(region, access)
	case evScripted:
		s.pendingArrivals--
		sp := s.cfg.Workload.Scripted[e.a]
		s.open(sp.Region, sp.AccessRTT.D())
	case evHop:
		s.arrive(e.a, e.j)
	case evBatch:
		s.batchDone(e.a, e.b)
	case evWake:
		s.wake(e.a, e.b)
	case evToken:
		s.token(e.a, e.b)
	case evFailover:
		s.failover(e.a, e.b)
	case evJoin:
		s.join(nil, false)
		s.schedule(s.now+s.joinGap(), evJoin, 0, 0, job{})
	case evFixedJoin:
		s.join(&s.cfg.Swarm.Fixed[e.a], true)
	case evReady:
		s.ready(e.a, e.b)
	case evDeath:
		s.die(e.a)
	case evRebalance:
		s.rebalance(e.a, e.b)
	case evDrained:
		if n := s.nodes[e.a]; n.state == stDraining && n.inc == e.b {
			s.move(e.a)
		}
	case evTimeout:
		if ss := s.sess[e.a]; ss.state == ssActive {
			s.res.TimedOut++
			s.endSession(e.a, ssFailed)
		}
	case evCoverage:
		s.sampleCoverage()
		if next := s.now + s.cfg.CoverageEvery.D(); next < s.cfg.Duration.D() {
			s.schedule(next, evCoverage, 0, 0, job{})
		}
	}
}

// ---- The network ----

// oneway is the one-way delay between two endpoints.
func (s *sim) oneway(ra int, aa time.Duration, rb int, ab time.Duration) time.Duration {
	return (s.rtt[ra][rb] + aa + ab) / 2
}

func (s *sim) linkNodes(a, b *node) time.Duration {
	return s.oneway(a.region, a.access, b.region, b.access)
}

// send puts tokens hidden states on a's uplink to b and returns when they
// arrive.
func (s *sim) send(a, b *node, tokens int) time.Duration {
	start := max(s.now, a.uplinkFree)
	a.uplinkFree = start + seconds(float64(tokens)*s.hiddenBytes/a.uplink)
	return a.uplinkFree + s.linkNodes(a, b)
}

// rttFor is what a client in region, access knows of the network, as
// route.RTT: one-way delays (what the real client passes: half a ping),
// and, between nodes, the time to put one hidden state on the sender's
// uplink. Plan calls it thousands of times per plan on a large swarm, so
// it reads a flat table of what it needs per node (see linkInfo).
func (s *sim) rttFor(region int, access time.Duration) route.RTT {
	R := len(s.rtt)
	row := s.halfRTT[region*R : (region+1)*R]
	acc := micros(access) / 2
	return func(a, b string) (float64, bool) {
		switch {
		case a == "":
			n := &s.links[idOf(b)]
			return row[n.region] + acc + n.acc, true
		case b == "":
			n := &s.links[idOf(a)]
			return row[n.region] + acc + n.acc, true
		}
		na, nb := &s.links[idOf(a)], &s.links[idOf(b)]
		return s.halfRTT[int(na.region)*R+int(nb.region)] + na.acc + nb.acc + na.xfer, true
	}
}

// linkInfo is what rttFor needs of a node, in µs: half its access RTT,
// and the time one hidden state takes on its uplink.
type linkInfo struct {
	region    int32
	acc, xfer float64
}

// idOf is the index of the node named id ("n" and decimal digits).
func idOf(id string) int {
	v := 0
	for i := 1; i < len(id); i++ {
		v = v*10 + int(id[i]-'0')
	}
	return v
}

func micros(d time.Duration) float64 { return float64(d) / 1e3 }

// ---- Nodes ----

func (s *sim) joinGap() time.Duration {
	return s.exp(s.rSwarm, s.cfg.Swarm.MeanLifetime.D()/time.Duration(s.cfg.Swarm.Nodes))
}

func pickRegion(r *rand.Rand, regions []Region) int {
	total := 0.0
	for _, g := range regions {
		total += g.Weight
	}
	x := r.Float64() * total
	for i, g := range regions {
		if x < g.Weight {
			return i
		}
		x -= g.Weight
	}
	return len(regions) - 1
}

func uniform(r *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.Float64()*float64(hi-lo))
}

func logUniform(r *rand.Rand, lo, hi float64) float64 {
	return lo * math.Exp(r.Float64()*math.Log(hi/lo))
}

// join adds a node, from spec or drawn at random, and places it. A node
// that joins at time 0 or from a spec serves at once; one that joins
// later loads its stage first.
func (s *sim) join(spec *NodeSpec, loaded bool) {
	c := s.cfg
	if len(s.nodes) >= maxNodesEver {
		return
	}
	r := s.rSwarm
	n := &node{
		id:       fmt.Sprintf("n%06d", len(s.nodes)),
		region:   pickRegion(r, c.Network.Regions),
		access:   uniform(r, c.Network.AccessRTT[0].D(), c.Network.AccessRTT[1].D()),
		uplink:   logUniform(r, c.Network.UplinkMbps[0], c.Network.UplinkMbps[1]) * 1e6 / 8,
		memory:   logUniform(r, c.Swarm.MemoryGB[0], c.Swarm.MemoryGB[1]) * 1e9,
		stage:    -1,
		target:   -1,
		viewPos:  -1,
		sessions: map[int32]struct{}{},
	}
	sp := c.Swarm.Speed
	if len(sp.Measured) > 0 {
		n.prof = sp.Measured[r.IntN(len(sp.Measured))]
	} else {
		spread := func(median float64) float64 {
			f := math.Exp(sp.Spread * r.NormFloat64())
			return median * min(max(f, 0.25), 4)
		}
		n.prof = shards.Profile{BytesPerSec: spread(sp.BytesPerSec), MACsPerSec: spread(sp.MACsPerSec)}
	}
	var life time.Duration
	if c.Swarm.MeanLifetime > 0 {
		life = s.exp(r, c.Swarm.MeanLifetime.D())
	}
	var fixed *shards.Stage
	if spec != nil {
		n.region = spec.Region
		n.access = spec.AccessRTT.D()
		if spec.Profile.BytesPerSec > 0 {
			n.prof.BytesPerSec = spec.Profile.BytesPerSec
		}
		if spec.Profile.MACsPerSec > 0 {
			n.prof.MACsPerSec = spec.Profile.MACsPerSec
		}
		if spec.UplinkMbps > 0 {
			n.uplink = spec.UplinkMbps * 1e6 / 8
		}
		if spec.MemoryGB > 0 {
			n.memory = spec.MemoryGB * 1e9
		}
		if spec.DieAt > 0 {
			life = spec.DieAt.D() - s.now
		}
		fixed = spec.Stage
	}
	ni := int32(len(s.nodes))
	s.nodes = append(s.nodes, n)
	s.links = append(s.links, linkInfo{region: int32(n.region), acc: micros(n.access) / 2, xfer: s.hiddenBytes / n.uplink * 1e6})
	s.res.Joins++
	if life > 0 {
		s.schedule(s.now+life, evDeath, ni, 0, job{})
	}
	st := -1
	if fixed != nil {
		st = s.m.stageOf(*fixed)
	} else {
		st = s.place(n)
	}
	if st < 0 {
		n.state = stIdle
		s.res.Unplaced++
		return
	}
	s.setStage(n, st)
	if loaded {
		s.serve(ni)
		return
	}
	n.state = stLoading
	s.pendingMil[st] += n.capMil
	s.schedule(s.now+s.loadTime(st), evReady, ni, n.inc, job{})
}

func (s *sim) loadTime(st int) time.Duration {
	return seconds(s.m.stages[st].memory / s.cfg.Swarm.LoadBytesPerSec)
}

// setStage gives n stage st and what it reports about it.
func (s *sim) setStage(n *node, st int) {
	n.stage = st
	n.computeMicros = s.m.stages[st].service(n.prof, 1, 1) * 1e6
	n.capMil = int64(math.Round(route.Capacity(route.Server{ComputeMicros: n.computeMicros}) * 1000))
}

// serve puts a node with a stage into service.
func (s *sim) serve(ni int32) {
	n := s.nodes[ni]
	n.state = stServing
	n.servingSince = s.now
	s.resetSched(n)
	s.servingMil[n.stage] += n.capMil
	n.viewPos = int32(len(s.view))
	s.view = append(s.view, s.server(n))
	s.viewNode = append(s.viewNode, ni)
	if s.cfg.Placement == Dynamic {
		s.schedule(s.now+s.exp(s.rMove, s.cfg.Rebalance.Period.D()), evRebalance, ni, n.inc, job{})
	}
}

func (s *sim) ready(ni int32, inc uint32) {
	n := s.nodes[ni]
	if n.state != stLoading || n.inc != inc {
		return
	}
	s.pendingMil[n.stage] -= n.capMil
	s.serve(ni)
}

// server is n as its status describes it. It reports no measured
// throughput, so route counts its batch-1 rate (route.Capacity).
func (s *sim) server(n *node) route.Server {
	r := s.m.stages[n.stage].rng
	return route.Server{
		ID: n.id, Start: r.Start, End: r.End, HeadLo: r.HeadLo, HeadHi: r.HeadHi,
		ComputeMicros: n.computeMicros,
		QueuedTokens:  n.queued + n.batchTok,
		Sessions:      len(n.sessions),
		Draining:      n.state == stDraining,
	}
}

// unview takes n out of the planners' view.
func (s *sim) unview(n *node) {
	i := n.viewPos
	if i < 0 {
		return
	}
	last := int32(len(s.view) - 1)
	s.view[i], s.viewNode[i] = s.view[last], s.viewNode[last]
	s.nodes[s.viewNode[i]].viewPos = i
	s.view, s.viewNode = s.view[:last], s.viewNode[:last]
	n.viewPos = -1
}

// stopServing takes a serving or draining node out of service: its
// sessions fail over (after FailureDetect) and its work is dropped.
func (s *sim) stopServing(ni int32) {
	n := s.nodes[ni]
	if n.state == stServing {
		s.servingMil[n.stage] -= n.capMil
	}
	n.servingTime += s.now - n.servingSince
	s.unview(n)
	for _, id := range slices.Sorted(maps.Keys(n.sessions)) {
		s.interrupt(id, n.id)
	}
	clear(n.sessions)
	s.resetSched(n)
}

// resetSched gives n a new, empty scheduler: its queued work is dropped.
func (s *sim) resetSched(n *node) {
	sc, err := sched.New(sched.Config{Credit: simCredit, BatchTokens: s.cfg.Swarm.MaxBatchTokens})
	if err != nil {
		panic(err) // the config was validated
	}
	n.sched, n.jobs, n.queued = sc, map[sched.JobID]job{}, 0
	n.batch, n.batchTok, n.batchDur, n.wakeAt = n.batch[:0], 0, 0, 0
}

// simCredit is each session's credit at a node's scheduler. The
// simulation models no credit messages (a session has one job in flight
// on its route), so credit never holds a job back.
const simCredit = 1 << 16

func (s *sim) die(ni int32) {
	n := s.nodes[ni]
	switch n.state {
	case stDead:
		return
	case stServing, stDraining:
		if n.state == stDraining {
			s.pendingMil[n.target] -= n.capOn(s, n.target)
		}
		s.stopServing(ni)
	case stLoading:
		s.pendingMil[n.stage] -= n.capMil
	}
	n.state = stDead
	n.inc++
	s.res.Deaths++
}

// capOn is n's capacity on stage st, in thousandths of a token/s.
func (n *node) capOn(s *sim, st int) int64 {
	c := s.m.stages[st].service(n.prof, 1, 1) * 1e6
	return int64(math.Round(route.Capacity(route.Server{ComputeMicros: c}) * 1000))
}

// ---- Placement ----

// coverageView is the swarm as placement sees it: one server per stage
// with the summed capacity of the nodes serving it (and, with
// CountLoading, of those loading it), less except's contribution.
// route.Choose and route.Coverage depend only on capacity summed by
// position, so they answer over this view exactly as over every node's
// status (a test checks this), at a cost that does not grow with the
// swarm.
func (s *sim) coverageView(pending bool, except *node) []route.Server {
	out := make([]route.Server, 0, len(s.m.stages))
	for i, st := range s.m.stages {
		mil := s.servingMil[i]
		if pending {
			mil += s.pendingMil[i]
		}
		if except != nil && except.stage == i && except.state == stServing {
			mil -= except.capMil
		}
		if mil <= 0 {
			continue
		}
		r := st.rng
		out = append(out, route.Server{ID: fmt.Sprint("stage", i), Start: r.Start, End: r.End, HeadLo: r.HeadLo, HeadHi: r.HeadHi,
			TokensPerSec: float64(mil) / 1000})
	}
	return out
}

// candidates are the layout stages that fit n's memory, in preference
// order, and their ranges.
func (s *sim) candidates(n *node) ([]int, []route.Range) {
	var idx []int
	var rs []route.Range
	for i, st := range s.m.stages[:s.m.layout] {
		if st.memory <= n.memory {
			idx = append(idx, i)
			rs = append(rs, st.rng)
		}
	}
	return idx, rs
}

// place picks n's stage with route.Choose, as the real node's
// --layers auto does: the fitting stage whose least-served position is
// least served. It returns -1 if nothing fits.
func (s *sim) place(n *node) int {
	idx, rs := s.candidates(n)
	if len(idx) == 0 {
		return -1
	}
	i, _ := route.Choose(s.m.rm, s.coverageView(s.cfg.Swarm.CountLoading, nil), rs)
	if i < 0 {
		return -1
	}
	return idx[i]
}

// rebalance is a serving node's periodic check under Dynamic placement.
func (s *sim) rebalance(ni int32, inc uint32) {
	n := s.nodes[ni]
	if n.state != stServing || n.inc != inc {
		return
	}
	rb := s.cfg.Rebalance
	s.schedule(s.now+s.exp(s.rMove, rb.Period.D()), evRebalance, ni, n.inc, job{})
	lo, mean := coverageStats(s.m.rm, route.Coverage(s.m.rm, s.coverageView(false, nil)))
	if lo >= rb.Imbalance*mean {
		return
	}
	idx, rs := s.candidates(n)
	cur := slices.Index(idx, n.stage)
	if cur < 0 {
		return // a scripted stage outside the layouts: stays
	}
	i, scores := route.Choose(s.m.rm, s.coverageView(s.cfg.Swarm.CountLoading, n), rs)
	if i < 0 || i == cur || !(scores[i] < rb.Gain*scores[cur]) {
		return
	}
	// Drain, then move.
	s.servingMil[n.stage] -= n.capMil
	n.state = stDraining
	n.target = idx[i]
	s.pendingMil[n.target] += n.capOn(s, n.target)
	s.view[n.viewPos].Draining = true
	if len(n.sessions) == 0 {
		s.move(ni)
		return
	}
	s.schedule(s.now+rb.DrainTimeout.D(), evDrained, ni, n.inc, job{})
}

// move ends a drain: the node's remaining sessions fail over and it
// loads its new stage.
func (s *sim) move(ni int32) {
	n := s.nodes[ni]
	target := n.target
	s.pendingMil[target] -= n.capOn(s, target)
	s.stopServing(ni)
	n.inc++
	n.target = -1
	s.setStage(n, target)
	n.state = stLoading
	s.pendingMil[target] += n.capMil
	s.res.Moves++
	s.schedule(s.now+s.loadTime(target), evReady, ni, n.inc, job{})
}

// ---- Sessions ----

func (s *sim) scheduleArrival() {
	at := s.now + seconds(s.rWork.ExpFloat64()/s.cfg.Workload.SessionsPerSec)
	if at < s.cfg.Duration.D() {
		s.pendingArrivals++
		s.schedule(at, evArrive, 0, 0, job{})
	}
}

func (s *sim) client() (int, time.Duration) {
	c := s.cfg.Network
	return pickRegion(s.rWork, c.Regions), uniform(s.rWork, c.AccessRTT[0].D(), c.AccessRTT[1].D())
}

// plan asks route for a session's route over the view, refreshing the
// view's loads if they are a status period old: route.Replan without
// ss.failed if the session is failing over, route.Plan otherwise. Only
// route.ErrNoRoute is expected (the options were validated).
func (s *sim) plan(ss *session) ([]int32, error) {
	if s.now-s.viewAt >= s.cfg.StatusPeriod.D() || s.viewAt < 0 {
		for i, ni := range s.viewNode {
			s.view[i] = s.server(s.nodes[ni])
		}
		s.viewAt = s.now
	}
	rtt := s.rttFor(ss.region, ss.access)
	var r route.Route
	var err error
	if ss.failed != "" {
		r, err = route.Replan(s.m.rm, s.view, rtt, s.opts, ss.failed)
	} else {
		r, err = route.Plan(s.m.rm, s.view, rtt, s.opts)
	}
	if err != nil {
		if !errors.Is(err, route.ErrNoRoute) {
			panic(fmt.Sprintf("scale: route rejected validated inputs: %v", err))
		}
		return nil, err
	}
	hops := make([]int32, len(r.Hops))
	for i, h := range r.Hops {
		hops[i] = int32(idOf(h.ID))
	}
	s.plans++
	s.hops += len(hops)
	return hops, nil
}

// open starts a session: plan, then prefill the prompt.
func (s *sim) open(region int, access time.Duration) {
	id := int32(len(s.sess))
	ss := &session{region: region, access: access, start: s.now, askedAt: s.now}
	s.sess = append(s.sess, ss)
	s.res.Sessions++
	s.active++
	if t := s.cfg.Workload.Timeout.D(); t > 0 {
		s.schedule(s.now+t, evTimeout, id, 0, job{})
	}
	hops, err := s.plan(ss)
	if err != nil {
		s.res.FailedAtStart++
		s.endSession(id, ssFailed)
		return
	}
	s.enter(id, hops)
	ss.prefix = s.cfg.Workload.PromptTokens
	ss.fresh = make([]bool, len(hops))
	for i := range ss.fresh {
		ss.fresh[i] = true
	}
	s.dispatch(id, true)
}

// enter puts a session on a route.
func (s *sim) enter(id int32, hops []int32) {
	ss := s.sess[id]
	ss.route = hops
	for _, ni := range hops {
		n := s.nodes[ni]
		n.sessions[id] = struct{}{}
		// Each session is its own client: the scheduler shares batches
		// round robin between them.
		if n.sched != nil {
			n.sched.Open(sched.SessionID(id), strconv.Itoa(int(id)), false)
		}
	}
}

// leave takes a session off its route; a draining node it leaves empty
// moves.
func (s *sim) leave(id int32) {
	ss := s.sess[id]
	for _, ni := range ss.route {
		n := s.nodes[ni]
		if _, ok := n.sessions[id]; !ok {
			continue
		}
		delete(n.sessions, id)
		if n.sched != nil {
			for _, j := range n.sched.Close(sched.SessionID(id)) {
				n.queued -= j.Tokens
				delete(n.jobs, j.ID)
			}
		}
		if n.state == stDraining && len(n.sessions) == 0 {
			s.move(ni)
		}
	}
	ss.route = nil
}

func (s *sim) endSession(id int32, st sessState) {
	ss := s.sess[id]
	s.leave(id)
	ss.state = st
	ss.epoch++
	s.active--
	if st == ssDone {
		s.res.Completed++
	} else {
		s.res.Failed++
		s.res.FailedTokens += int64(ss.generated)
	}
}

// dispatch sends the session's next job from the client to the first
// hop: a prefill (of ss.prefix) or the decode of one token.
func (s *sim) dispatch(id int32, prefill bool) {
	ss := s.sess[id]
	n := s.nodes[ss.route[0]]
	at := s.now + s.oneway(ss.region, ss.access, n.region, n.access)
	s.schedule(at, evHop, ss.route[0], 0, job{sess: id, epoch: ss.epoch, hop: 0, tokens: tokensAt(ss, 0, prefill), prefill: prefill})
}

// tokensAt is how many positions hop h computes of a job.
func tokensAt(ss *session, h int, prefill bool) int32 {
	if prefill && ss.fresh[h] {
		return int32(ss.prefix)
	}
	return 1
}

func (s *sim) stale(j job) bool {
	ss := s.sess[j.sess]
	return ss.state != ssActive || ss.epoch != j.epoch
}

// arrive queues a job at a node's scheduler and asks it what to run.
func (s *sim) arrive(ni int32, j job) {
	n := s.nodes[ni]
	if s.stale(j) || (n.state != stServing && n.state != stDraining) || n.sched == nil {
		return
	}
	sj, err := n.sched.Arrive(s.now, sched.SessionID(j.sess), int(j.tokens), 0)
	if err != nil {
		panic(fmt.Sprintf("scale: node %d: %v", ni, err)) // the session is open and credit unbounded
	}
	n.jobs[sj.ID] = j
	n.queued += int(j.tokens)
	s.kick(ni)
}

// kick runs the scheduler's decision: a batch starts (its compute is the
// stage's service time for its tokens and size), or a gathering window
// sets a wake-up, or nothing is ready.
func (s *sim) kick(ni int32) {
	n := s.nodes[ni]
	for !n.sched.Busy() {
		rd := n.sched.Next(s.now)
		if len(rd.Batch) == 0 {
			if rd.Wait > 0 && (n.wakeAt == 0 || s.now+rd.Wait < n.wakeAt) {
				n.wakeAt = s.now + rd.Wait
				s.schedule(n.wakeAt, evWake, ni, n.inc, job{})
			}
			return
		}
		n.batch = n.batch[:0]
		tokens := 0
		for _, sj := range rd.Batch {
			j := n.jobs[sj.ID]
			delete(n.jobs, sj.ID)
			n.queued -= sj.Tokens
			if s.stale(j) {
				continue
			}
			n.batch = append(n.batch, j)
			tokens += sj.Tokens
		}
		if len(n.batch) == 0 {
			n.sched.Done(s.now, 0) // only stale work: nothing to compute
			continue
		}
		d := seconds(s.m.stages[n.stage].service(n.prof, tokens, len(n.batch)))
		n.batchTok, n.batchDur = tokens, d
		n.busyTime += d
		s.schedule(s.now+d, evBatch, ni, n.inc, job{})
		return
	}
}

// wake ends a gathering window.
func (s *sim) wake(ni int32, inc uint32) {
	n := s.nodes[ni]
	if n.inc != inc || (n.state != stServing && n.state != stDraining) || n.wakeAt != s.now {
		return
	}
	n.wakeAt = 0
	s.kick(ni)
}

// batchDone passes each job of a finished batch on: to the next hop, or
// from the last hop back to the client.
func (s *sim) batchDone(ni int32, inc uint32) {
	n := s.nodes[ni]
	if n.inc != inc || (n.state != stServing && n.state != stDraining) {
		return
	}
	for _, j := range n.batch {
		if s.stale(j) {
			continue
		}
		ss := s.sess[j.sess]
		if h := int(j.hop) + 1; h < len(ss.route) {
			next := s.nodes[ss.route[h]]
			j.hop++
			j.tokens = tokensAt(ss, h, j.prefill)
			s.schedule(s.send(n, next, int(j.tokens)), evHop, ss.route[h], 0, j)
			continue
		}
		at := s.now + s.oneway(n.region, n.access, ss.region, ss.access)
		s.schedule(at, evToken, j.sess, j.epoch, job{})
	}
	n.batch, n.batchTok = n.batch[:0], 0
	n.sched.Done(s.now, n.batchDur)
	s.kick(ni)
}

// inWindow says whether now is inside the measured window.
func (s *sim) inWindow() bool {
	return s.now >= s.cfg.Warmup.D() && s.now < s.cfg.Duration.D()
}

// token delivers a generated token to its session's client.
func (s *sim) token(id int32, epoch uint32) {
	ss := s.sess[id]
	if ss.state != ssActive || ss.epoch != epoch {
		return
	}
	ss.generated++
	s.res.Tokens++
	if s.inWindow() {
		s.res.WindowTokens++
		if ss.generated == 1 {
			s.ttft = append(s.ttft, s.now-ss.start)
		} else {
			s.lat = append(s.lat, s.now-ss.askedAt)
		}
	}
	if ss.generated >= s.cfg.Workload.Tokens {
		s.endSession(id, ssDone)
		return
	}
	ss.askedAt = s.now
	s.dispatch(id, false)
}

// interrupt tells a session that a node of its route failed: its work in
// flight is void, and it fails over once it notices.
func (s *sim) interrupt(id int32, failed string) {
	ss := s.sess[id]
	if ss.state != ssActive || ss.pending {
		return
	}
	ss.pending = true
	ss.failed = failed
	ss.epoch++
	s.schedule(s.now+s.cfg.Network.FailureDetect.D(), evFailover, id, ss.epoch, job{})
}

// failover re-plans a session around the failed node and replays its
// prefix (the prompt and every token generated so far) on the hops of the
// new route that do not hold the session's cache; the replay yields the
// token that was in flight. A hop that does hold it computes just that
// token, and passes on the hidden states it produced for the prefix if
// the next hop is new (hops keep their outputs for open sessions). With
// no route left, the session fails.
func (s *sim) failover(id int32, epoch uint32) {
	ss := s.sess[id]
	if ss.state != ssActive || ss.epoch != epoch {
		return
	}
	ss.pending = false
	var kept []int32 // old hops that still hold the session
	for _, ni := range ss.route {
		if _, ok := s.nodes[ni].sessions[id]; ok {
			kept = append(kept, ni)
		}
	}
	s.leave(id)
	hops, err := s.plan(ss)
	ss.failed = ""
	if err != nil {
		s.endSession(id, ssFailed)
		return
	}
	s.res.Failovers++
	ss.prefix = s.cfg.Workload.PromptTokens + ss.generated
	ss.fresh = make([]bool, len(hops))
	for i, ni := range hops {
		if !slices.Contains(kept, ni) {
			ss.fresh[i] = true
			s.res.ReplayedTokens += int64(ss.prefix)
		}
	}
	s.enter(id, hops)
	s.dispatch(id, true)
}

// ---- Coverage ----

// coverageStats returns the least throughput over every layer and head
// row, and the mean over layers.
func coverageStats(m route.Model, spans []route.Span) (lo, mean float64) {
	// The spans tile the model, an uncovered run with 0.
	lo = math.Inf(1)
	for _, sp := range spans {
		lo = min(lo, sp.TokensPerSec)
		if !sp.Head {
			mean += sp.TokensPerSec * float64(sp.Hi-sp.Lo)
		}
	}
	if math.IsInf(lo, 1) {
		lo = 0
	}
	return lo, mean / float64(m.Layers)
}

func (s *sim) sampleCoverage() {
	lo, mean := coverageStats(s.m.rm, route.Coverage(s.m.rm, s.coverageView(false, nil)))
	serving := 0
	for _, ni := range s.viewNode {
		if s.nodes[ni].state == stServing {
			serving++
		}
	}
	s.cov = append(s.cov, CoverageSample{Minute: s.now.Minutes(), Min: lo, Mean: mean, Serving: serving})
}

// check verifies the simulator's bookkeeping against the state it
// summarizes; tests call it after runs.
func (s *sim) check() error {
	serving := make([]int64, len(s.m.stages))
	pending := make([]int64, len(s.m.stages))
	inView := 0
	for ni, n := range s.nodes {
		switch n.state {
		case stServing:
			serving[n.stage] += n.capMil
		case stLoading:
			pending[n.stage] += n.capMil
		case stDraining:
			pending[n.target] += n.capOn(s, n.target)
		}
		if on := n.state == stServing || n.state == stDraining; on != (n.viewPos >= 0) {
			return fmt.Errorf("node %s (state %d): view position %d", n.id, n.state, n.viewPos)
		} else if on {
			inView++
			if s.viewNode[n.viewPos] != int32(ni) {
				return fmt.Errorf("node %s: view position %d holds node %d", n.id, n.viewPos, s.viewNode[n.viewPos])
			}
		}
		for id := range n.sessions {
			ss := s.sess[id]
			if ss.state != ssActive || !slices.Contains(ss.route, int32(ni)) {
				return fmt.Errorf("node %s holds session %d (state %d, route %v)", n.id, id, ss.state, ss.route)
			}
		}
	}
	if inView != len(s.view) {
		return fmt.Errorf("%d nodes in a view of %d", inView, len(s.view))
	}
	if !slices.Equal(serving, s.servingMil) || !slices.Equal(pending, s.pendingMil) {
		return fmt.Errorf("coverage tables %v %v, want %v %v", s.servingMil, s.pendingMil, serving, pending)
	}
	active := 0
	for id, ss := range s.sess {
		if ss.state != ssActive {
			continue
		}
		active++
		for _, ni := range ss.route {
			n := s.nodes[ni]
			if _, ok := n.sessions[int32(id)]; !ok && !ss.pending {
				return fmt.Errorf("session %d is not on node %s of its route", id, n.id)
			}
		}
	}
	if active != s.active {
		return fmt.Errorf("%d active sessions, counted %d", active, s.active)
	}
	return nil
}
