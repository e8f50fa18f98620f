package scale

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

// ErrBadConfig means a Config that fails Validate.
var ErrBadConfig = errors.New("scale: invalid config")

// Duration is a time.Duration that reads and writes JSON as a string
// such as "30m" or "1.5s" (a bare number is read as seconds), so that a
// scenario file says what it means.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string ("90s", "30m") or a number of
// seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrBadConfig, err)
		}
		*d = Duration(v)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || math.Abs(f) > math.MaxInt64/1e9 {
		return fmt.Errorf("%w: duration %s (want a string like \"30s\" or seconds)", ErrBadConfig, b)
	}
	*d = Duration(math.Round(f * 1e9))
	return nil
}

// Routing is the route.Policy sessions plan with. In JSON it is the
// policy's name: "min-latency", "random" or "throughput-aware".
type Routing route.Policy

// The routing policies of internal/route.
const (
	MinLatency      = Routing(route.MinLatency)
	ThroughputAware = Routing(route.ThroughputAware)
	Random          = Routing(route.Random)
)

// Routings lists the routing policies in the order tables show them.
var Routings = []Routing{MinLatency, Random, ThroughputAware}

func (r Routing) String() string { return route.Policy(r).String() }

// MarshalText writes the policy's name.
func (r Routing) MarshalText() ([]byte, error) {
	switch r {
	case MinLatency, ThroughputAware, Random:
		return []byte(r.String()), nil
	}
	return nil, fmt.Errorf("%w: routing %v", ErrBadConfig, r)
}

// UnmarshalText reads a policy's name.
func (r *Routing) UnmarshalText(b []byte) error {
	for _, p := range Routings {
		if string(b) == p.String() {
			*r = p
			return nil
		}
	}
	return fmt.Errorf("%w: routing %q (want min-latency, random or throughput-aware)", ErrBadConfig, b)
}

// Placement is how nodes pick the part of the model they serve.
type Placement int

const (
	// Even: the model's layouts are shards.EvenSplit cuts; a node picks,
	// with route.Choose, among the stages that fit its memory, once, when
	// it joins.
	Even Placement = iota
	// Balanced: as Even, with shards.BalancedSplit cuts (stages of equal
	// roofline time on shards.DefaultProfile, the head split by rows).
	Balanced
	// Dynamic: as Balanced, and serving nodes periodically re-choose
	// with route.Choose when coverage is unbalanced, draining and
	// loading the new stage (see Rebalance).
	Dynamic
)

// Placements lists the placement policies in the order tables show them.
var Placements = []Placement{Even, Balanced, Dynamic}

func (p Placement) String() string {
	switch p {
	case Even:
		return "even"
	case Balanced:
		return "balanced"
	case Dynamic:
		return "dynamic"
	}
	return fmt.Sprintf("Placement(%d)", int(p))
}

// MarshalText writes the placement's name.
func (p Placement) MarshalText() ([]byte, error) {
	if p < Even || p > Dynamic {
		return nil, fmt.Errorf("%w: placement %v", ErrBadConfig, p)
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads a placement's name.
func (p *Placement) UnmarshalText(b []byte) error {
	for _, q := range Placements {
		if string(b) == q.String() {
			*p = q
			return nil
		}
	}
	return fmt.Errorf("%w: placement %q (want even, balanced or dynamic)", ErrBadConfig, b)
}

// Policy is one cell of the matrix Compare runs.
type Policy struct {
	Routing   Routing   `json:"routing"`
	Placement Placement `json:"placement"`
}

func (p Policy) String() string { return p.Routing.String() + "/" + p.Placement.String() }

// Matrix returns every routing × placement combination, routing-major.
func Matrix() []Policy {
	var ps []Policy
	for _, r := range Routings {
		for _, p := range Placements {
			ps = append(ps, Policy{r, p})
		}
	}
	return ps
}

// Config is a scenario. With the seed Run is given, it determines the run
// completely. DefaultConfig fills every field; a scenario file is best
// read over it (json.Unmarshal leaves the fields a file omits as they
// were):
//
//	cfg := scale.DefaultConfig(1000, 30)
//	err := json.Unmarshal(file, &cfg)
type Config struct {
	Model     Model     `json:"model"`
	Swarm     Swarm     `json:"swarm"`
	Network   Network   `json:"network"`
	Workload  Workload  `json:"workload"`
	Routing   Routing   `json:"routing"`
	Placement Placement `json:"placement"`
	Rebalance Rebalance `json:"rebalance"`

	// RouteBatch and LoadWeight are route.Options' Batch and LoadWeight
	// (0: route's defaults, what the real client uses).
	RouteBatch float64 `json:"route_batch"`
	LoadWeight float64 `json:"load_weight"`
	// StatusPeriod is how stale the loads (queued tokens, sessions,
	// tokens/s) that planners see may be: nodes publish their status this
	// often. Joins, deaths and drains are seen at once.
	StatusPeriod Duration `json:"status_period"`

	// Duration is how long sessions keep arriving. Afterwards the run
	// goes on (nodes still churn) until every session has ended, or for
	// at most Drain more; sessions still open then are Unfinished.
	Duration Duration `json:"duration"`
	Drain    Duration `json:"drain"`
	// Warmup is left out of the throughput and latency figures, which
	// cover the tokens delivered in [Warmup, Duration).
	Warmup Duration `json:"warmup"`
	// CoverageEvery is how often coverage is sampled.
	CoverageEvery Duration `json:"coverage_every"`
}

// Model is the served model: a synthetic shape of shards.SynthConfig and
// its storage type, and the layouts nodes may serve.
type Model struct {
	Shape  string `json:"shape"`  // a shards.SynthShapes name, e.g. "llama3-70b"
	Layers int    `json:"layers"` // 0: the shape's own count
	Quant  string `json:"quant"`  // "q4", "q8" or "f32"; q4 keeps the embedding and head at q8
	// Stages lists the layouts: one cut of the model into n stages for
	// each n (EvenSplit or BalancedSplit, by Placement).
	Stages []int `json:"stages"`
	// HiddenBytes is what one token's hidden state costs on a link
	// between hops; 0 means Dim × 4 (float32 hidden states).
	HiddenBytes int `json:"hidden_bytes"`
}

// Swarm is the population of volunteer nodes.
type Swarm struct {
	// Nodes is the population: the swarm starts with this many and,
	// under churn, joins keep it there on average.
	Nodes int `json:"nodes"`
	// MemoryGB bounds a node's memory limit (--max-memory), drawn
	// log-uniformly in [lo, hi] GB (10^9 bytes).
	MemoryGB [2]float64 `json:"memory_gb"`
	Speed    Speed      `json:"speed"`
	// MaxBatchTokens caps the tokens a node computes in one forward
	// pass: its scheduler's batch budget (sched.Config.BatchTokens; a
	// larger request runs alone).
	MaxBatchTokens int `json:"max_batch_tokens"`
	// LoadBytesPerSec is how fast a node gets its shard ready, on joining
	// and on moving: it serves after shard bytes / LoadBytesPerSec.
	LoadBytesPerSec float64 `json:"load_bytes_per_sec"`
	// MeanLifetime is the mean of a node's exponential lifetime; joins
	// arrive as a Poisson process of rate Nodes / MeanLifetime. 0: no
	// churn.
	MeanLifetime Duration `json:"mean_lifetime"`
	// CountLoading makes placement count nodes still loading a shard as
	// if they already served it. The real node announces only once it
	// serves, so many nodes joining within one load time can all pick
	// the same gap; false is what the real node does.
	CountLoading bool `json:"count_loading"`
	// Fixed nodes join first, before the Nodes random ones, as given
	// (for hand-made scenarios and tests).
	Fixed []NodeSpec `json:"fixed,omitempty"`
}

// Speed is the distribution of nodes' roofline profiles. Each node draws
// bytes/s and MACs/s independently as the median times e^(Spread·z), z
// standard normal, clipped to [median/4, median×4]. If Measured is set,
// each node instead draws one of those profiles uniformly (measured
// numbers, e.g. from `pipeshard bench`), unscaled; in JSON a profile is
// {"BytesPerSec": 2e10, "MACsPerSec": 1.6e10}.
type Speed struct {
	BytesPerSec float64          `json:"bytes_per_sec"`
	MACsPerSec  float64          `json:"macs_per_sec"`
	Spread      float64          `json:"spread"`
	Measured    []shards.Profile `json:"measured,omitempty"`
}

// NodeSpec is one node of a scripted swarm. Region and AccessRTT are
// taken as given; a zero Profile field, UplinkMbps or MemoryGB is drawn
// as for a random node; a nil Stage is chosen by placement. The node
// serves from JoinAt (its shard already loaded) and dies at DieAt, or by
// churn if DieAt is 0.
type NodeSpec struct {
	Region     int            `json:"region"`
	AccessRTT  Duration       `json:"access_rtt"` // last-mile RTT (0: none)
	Profile    shards.Profile `json:"profile"`
	UplinkMbps float64        `json:"uplink_mbps"`
	MemoryGB   float64        `json:"memory_gb"`
	Stage      *shards.Stage  `json:"stage,omitempty"` // serve this, whatever placement says
	DieAt      Duration       `json:"die_at"`
	JoinAt     Duration       `json:"join_at"`
}

// Network is where nodes and clients are and how links behave. The
// one-way delay between two endpoints is (RTT[region a][region b] +
// access a + access b) / 2, and a hidden state sent from node a also
// waits for a's uplink: it is sent after whatever a is already sending,
// at a's uplink rate (first come first served).
type Network struct {
	Regions []Region `json:"regions"`
	// RTT is the round-trip time between regions (RTT[i][i] within one).
	RTT [][]Duration `json:"rtt"`
	// AccessRTT bounds the per-endpoint last-mile RTT, drawn uniformly.
	AccessRTT [2]Duration `json:"access_rtt"`
	// UplinkMbps bounds a node's uplink, drawn log-uniformly, in 10^6
	// bit/s.
	UplinkMbps [2]float64 `json:"uplink_mbps"`
	// FailureDetect is how long after a node dies the sessions through
	// it notice (a stream reset or a missed deadline) and fail over.
	FailureDetect Duration `json:"failure_detect"`
}

// Region is a place nodes and clients are in, Weight its share of each.
type Region struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
}

// Workload is the clients.
type Workload struct {
	// SessionsPerSec is the rate of the Poisson arrival of sessions.
	SessionsPerSec float64 `json:"sessions_per_sec"`
	// PromptTokens are prefilled first; the prefill yields the first
	// generated token.
	PromptTokens int `json:"prompt_tokens"`
	// Tokens is how many tokens a session generates.
	Tokens int `json:"tokens"`
	// Timeout is how long a client waits for its session to complete
	// before giving up (the session fails); 0: forever. With Drain at
	// least Timeout, every session ends, completed or failed.
	Timeout Duration `json:"timeout"`
	// Scripted sessions arrive besides the Poisson ones.
	Scripted []SessionSpec `json:"scripted,omitempty"`
}

// SessionSpec is a session of a scripted workload.
type SessionSpec struct {
	At        Duration `json:"at"`
	Region    int      `json:"region"`
	AccessRTT Duration `json:"access_rtt"`
}

// Rebalance tunes Dynamic placement. Each serving node checks every
// Period on average (exponential intervals). If the swarm's coverage is
// unbalanced (its least-served layer or head row has less than Imbalance
// × the mean over layers), the node asks route.Choose, over the swarm
// without itself, for the stage it should serve among those that fit its
// memory; it moves if that stage is served less than Gain × its current
// range would be without it. A
// moving node drains (no new sessions) for at most DrainTimeout, fails
// its remaining sessions over, then loads its new stage.
type Rebalance struct {
	Period       Duration `json:"period"`
	Imbalance    float64  `json:"imbalance"`
	Gain         float64  `json:"gain"`
	DrainTimeout Duration `json:"drain_timeout"`
}

// The defaults, kept as data.
var (
	defaultRegions = []Region{
		{"us-east", 0.30}, {"us-west", 0.15}, {"europe", 0.30}, {"asia", 0.15}, {"south-america", 0.10},
	}
	// defaultRTTms are round trips between the default regions, 10 ms
	// within one and 65 to 150 ms between them.
	defaultRTTms = [][]float64{
		{10, 65, 80, 150, 120},
		{65, 10, 140, 110, 150},
		{80, 140, 10, 150, 150},
		{150, 110, 150, 10, 150},
		{120, 150, 150, 150, 10},
	}
)

// DefaultConfig is a swarm of nodes volunteers serving llama3-70b at q4
// to clients for minutes simulated minutes, with churn:
//
//   - layouts of 2, 4 and 8 stages; memory 8–32 GB, log-uniform;
//   - speeds around shards.DefaultProfile (20 GB/s, 16 GMAC/s) with
//     Spread 0.5, batches of at most 64 tokens;
//   - shards load at 200 MB/s; lifetimes exponential with mean 30 min;
//   - five regions (10 ms within, 65–150 ms between), last-mile RTTs of
//     2–20 ms, uplinks 10–200 Mbit/s, failures noticed after 1 s;
//   - sessions of a 16-token prompt and 32 generated tokens, arriving at
//     0.6 per second per 1,000 nodes (light load: with even routes the
//     nodes would be busy about a tenth of the time), given up after
//     30 min;
//   - min-latency routing, even placement; status every 2 s;
//   - the first sixth of the run (5 min of 30) is warm-up; coverage is
//     sampled every 30 s; sessions get up to 30 min to finish.
func DefaultConfig(nodes int, minutes float64) Config {
	rtt := make([][]Duration, len(defaultRTTms))
	for i, row := range defaultRTTms {
		for _, ms := range row {
			rtt[i] = append(rtt[i], Duration(ms*float64(time.Millisecond)))
		}
	}
	d := Duration(minutes * float64(time.Minute))
	return Config{
		Model: Model{Shape: "llama3-70b", Quant: "q4", Stages: []int{2, 4, 8}},
		Swarm: Swarm{
			Nodes:           nodes,
			MemoryGB:        [2]float64{8, 32},
			Speed:           Speed{BytesPerSec: shards.DefaultProfile.BytesPerSec, MACsPerSec: shards.DefaultProfile.MACsPerSec, Spread: 0.5},
			MaxBatchTokens:  64,
			LoadBytesPerSec: 200e6,
			MeanLifetime:    Duration(30 * time.Minute),
		},
		Network: Network{
			Regions:       append([]Region(nil), defaultRegions...),
			RTT:           rtt,
			AccessRTT:     [2]Duration{Duration(2 * time.Millisecond), Duration(20 * time.Millisecond)},
			UplinkMbps:    [2]float64{10, 200},
			FailureDetect: Duration(time.Second),
		},
		Workload: Workload{
			SessionsPerSec: 0.6 * float64(nodes) / 1000,
			PromptTokens:   16,
			Tokens:         32,
			Timeout:        Duration(30 * time.Minute),
		},
		Routing:   MinLatency,
		Placement: Even,
		Rebalance: Rebalance{
			Period:       Duration(5 * time.Minute),
			Imbalance:    0.5,
			Gain:         0.5,
			DrainTimeout: Duration(2 * time.Minute),
		},
		StatusPeriod:  Duration(2 * time.Second),
		Duration:      d,
		Drain:         Duration(30 * time.Minute),
		Warmup:        d / 6,
		CoverageEvery: Duration(30 * time.Second),
	}
}

// Validate reports a Config Run cannot use, wrapping ErrBadConfig.
func (c Config) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, a...)...)
	}
	pos := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	nonneg := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) }
	mc, err := shards.SynthConfig(c.Model.Shape, c.Model.Layers)
	if err != nil {
		return bad("model: %v", err)
	}
	if _, err := ovrt.ParseDType(c.Model.Quant); err != nil {
		return bad("model: %v", err)
	}
	if len(c.Model.Stages) == 0 {
		return bad("model: no layouts (stages)")
	}
	for _, n := range c.Model.Stages {
		if n < 1 || n > mc.Layers {
			return bad("model: %d stages of %d layers", n, mc.Layers)
		}
	}
	if c.Model.HiddenBytes < 0 {
		return bad("model: hidden bytes %d", c.Model.HiddenBytes)
	}
	s := c.Swarm
	switch {
	case s.Nodes < 0 || s.Nodes > 1_000_000:
		return bad("swarm: %d nodes", s.Nodes)
	case s.Nodes+len(s.Fixed) == 0:
		return bad("swarm: no nodes")
	case !pos(s.MemoryGB[0]) || s.MemoryGB[1] < s.MemoryGB[0] || math.IsInf(s.MemoryGB[1], 0):
		return bad("swarm: memory %v GB", s.MemoryGB)
	case len(s.Speed.Measured) == 0 && (!pos(s.Speed.BytesPerSec) || !pos(s.Speed.MACsPerSec)):
		return bad("swarm: speed %v bytes/s, %v MACs/s", s.Speed.BytesPerSec, s.Speed.MACsPerSec)
	case !nonneg(s.Speed.Spread) || s.Speed.Spread > 5:
		return bad("swarm: speed spread %v", s.Speed.Spread)
	case s.MaxBatchTokens < 1:
		return bad("swarm: max batch %d tokens", s.MaxBatchTokens)
	case !pos(s.LoadBytesPerSec):
		return bad("swarm: load rate %v bytes/s", s.LoadBytesPerSec)
	case s.MeanLifetime < 0:
		return bad("swarm: mean lifetime %v", s.MeanLifetime)
	}
	for i, p := range s.Speed.Measured {
		if !pos(p.BytesPerSec) || !pos(p.MACsPerSec) {
			return bad("swarm: measured profile %d: %+v", i, p)
		}
	}
	n := c.Network
	if len(n.Regions) == 0 || len(n.RTT) != len(n.Regions) {
		return bad("network: %d regions, %d rows of RTTs", len(n.Regions), len(n.RTT))
	}
	total := 0.0
	for i, r := range n.Regions {
		if !nonneg(r.Weight) {
			return bad("network: region %q weight %v", r.Name, r.Weight)
		}
		total += r.Weight
		if len(n.RTT[i]) != len(n.Regions) {
			return bad("network: RTT row %d has %d entries", i, len(n.RTT[i]))
		}
		for _, d := range n.RTT[i] {
			if d < 0 {
				return bad("network: RTT %v", d)
			}
		}
	}
	switch {
	case !pos(total):
		return bad("network: region weights sum to %v", total)
	case n.AccessRTT[0] < 0 || n.AccessRTT[1] < n.AccessRTT[0]:
		return bad("network: access RTT %v", n.AccessRTT)
	case !pos(n.UplinkMbps[0]) || n.UplinkMbps[1] < n.UplinkMbps[0] || math.IsInf(n.UplinkMbps[1], 0):
		return bad("network: uplink %v Mbit/s", n.UplinkMbps)
	case n.FailureDetect < 0:
		return bad("network: failure detection %v", n.FailureDetect)
	}
	for i, f := range s.Fixed {
		switch {
		case f.Region < 0 || f.Region >= len(n.Regions):
			return bad("fixed node %d: region %d", i, f.Region)
		case f.AccessRTT < 0 || f.DieAt < 0 || f.JoinAt < 0 || (f.DieAt > 0 && f.DieAt <= f.JoinAt):
			return bad("fixed node %d: times", i)
		case !nonneg(f.UplinkMbps) || !nonneg(f.MemoryGB) || !nonneg(f.Profile.BytesPerSec) || !nonneg(f.Profile.MACsPerSec):
			return bad("fixed node %d: %+v", i, f)
		}
		if f.Stage != nil {
			m := route.Model{Layers: mc.Layers, Vocab: mc.Vocab}
			if _, err := m.Normalize(route.Range(*f.Stage)); err != nil {
				return bad("fixed node %d: %v", i, err)
			}
		}
	}
	w := c.Workload
	switch {
	case !nonneg(w.SessionsPerSec):
		return bad("workload: %v sessions/s", w.SessionsPerSec)
	case w.Timeout < 0:
		return bad("workload: timeout %v", w.Timeout)
	case w.PromptTokens < 1 || w.Tokens < 1:
		return bad("workload: %d prompt tokens, %d tokens (want at least 1 each)", w.PromptTokens, w.Tokens)
	case w.PromptTokens+w.Tokens > mc.Context:
		return bad("workload: %d prompt and %d generated tokens exceed the model's context of %d", w.PromptTokens, w.Tokens, mc.Context)
	}
	for i, sp := range w.Scripted {
		if sp.Region < 0 || sp.Region >= len(n.Regions) || sp.At < 0 || sp.AccessRTT < 0 {
			return bad("scripted session %d: %+v", i, sp)
		}
	}
	if _, err := c.Routing.MarshalText(); err != nil {
		return err
	}
	if _, err := c.Placement.MarshalText(); err != nil {
		return err
	}
	r := c.Rebalance
	if c.Placement == Dynamic && (r.Period < Duration(time.Second) || !nonneg(r.Imbalance) || !nonneg(r.Gain) || r.DrainTimeout < 0) {
		return bad("rebalance: %+v", r)
	}
	if err := (route.Options{Batch: c.RouteBatch, LoadWeight: c.LoadWeight}).Validate(); err != nil {
		return bad("%v", err)
	}
	switch {
	case c.StatusPeriod < 0:
		return bad("status period %v", c.StatusPeriod)
	case c.Duration <= 0:
		return bad("duration %v", c.Duration)
	case c.Drain < 0 || c.Warmup < 0 || c.Warmup >= c.Duration:
		return bad("drain %v, warmup %v of %v", c.Drain, c.Warmup, c.Duration)
	case c.CoverageEvery < Duration(time.Second):
		return bad("coverage sampling every %v (want at least 1s)", c.CoverageEvery)
	}
	// Bound the work a scenario asks for: the expected sessions and
	// joins, and the simulated time.
	span := (c.Duration + c.Drain).D()
	joins := 0.0
	if s.MeanLifetime > 0 {
		joins = float64(s.Nodes) * span.Seconds() / s.MeanLifetime.D().Seconds()
	}
	switch {
	case span > maxSpan:
		return bad("duration and drain %v exceed %v", span, maxSpan)
	case w.SessionsPerSec*c.Duration.D().Seconds()+float64(len(w.Scripted)) > maxSessions:
		return bad("about %.0f sessions (at most %d)", w.SessionsPerSec*c.Duration.D().Seconds(), int(maxSessions))
	case joins > maxJoins:
		return bad("about %.0f joins (at most %d)", joins, int(maxJoins))
	}
	return nil
}

// Limits on a scenario's size, far above what a run of 10,000 nodes for
// a few hours needs.
const (
	maxSpan     = 1000 * 24 * time.Hour
	maxSessions = 1e8
	maxJoins    = 1e7
)
