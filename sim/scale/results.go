package scale

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Results are what a run measured. They are a pure function of the
// Config and the seed: no field depends on the machine or the wall clock.
type Results struct {
	Seed      uint64    `json:"seed"`
	Routing   Routing   `json:"routing"`
	Placement Placement `json:"placement"`
	Nodes     int       `json:"nodes"` // the configured population

	// SimSeconds is the simulated time at which the run ended: after
	// Duration, once every session has ended (or Drain ran out).
	SimSeconds float64 `json:"sim_seconds"`
	Events     uint64  `json:"events"`

	// Sessions started; each ended Completed or Failed, or is
	// Unfinished if it was still open when the drain ran out.
	Sessions   int `json:"sessions"`
	Completed  int `json:"completed"`
	Failed     int `json:"failed"`
	Unfinished int `json:"unfinished"`
	// FailedAtStart of the Failed found no route when they arrived;
	// the others found none when failing over, or timed out.
	FailedAtStart int `json:"failed_at_start"`
	// TimedOut of the Failed were still open after Workload.Timeout.
	TimedOut int `json:"timed_out"`
	// Failovers counts re-plans after a failure that found a route;
	// ReplayedTokens the prefix positions they prefilled again, summed
	// over the hops that computed them.
	Failovers      int   `json:"failovers"`
	ReplayedTokens int64 `json:"replayed_tokens"`

	// Tokens are the generated tokens delivered to clients, each once;
	// FailedTokens those of sessions that then failed, UnfinishedTokens
	// those of unfinished ones. Completed × Workload.Tokens +
	// FailedTokens + UnfinishedTokens = Tokens.
	Tokens           int64 `json:"tokens"`
	FailedTokens     int64 `json:"failed_tokens"`
	UnfinishedTokens int64 `json:"unfinished_tokens"`
	// WindowTokens were delivered in [Warmup, Duration); TokensPerSec
	// is the aggregate throughput over that window.
	WindowTokens int64   `json:"window_tokens"`
	TokensPerSec float64 `json:"tokens_per_sec"`

	// Latency is per generated token after the first, from the client
	// asking for it (sending the previous token) to receiving it,
	// failovers included; TTFT is the first token's, from the session's
	// arrival (the prompt's prefill). Both over the window, in ms.
	Latency Quantiles `json:"latency_ms"`
	TTFT    Quantiles `json:"ttft_ms"`

	// MeanRouteHops is the mean length of the routes planned.
	MeanRouteHops float64 `json:"mean_route_hops"`
	// Coverage is sampled every CoverageEvery until Duration.
	Coverage Coverage `json:"coverage"`

	Joins    int `json:"joins"`    // nodes that joined, the initial ones included
	Deaths   int `json:"deaths"`   // nodes that left
	Moves    int `json:"moves"`    // stage changes under Dynamic placement
	Unplaced int `json:"unplaced"` // joined nodes no stage fitted
	// Utilization is the busy fraction of serving nodes' time.
	Utilization float64 `json:"utilization"`
}

// Quantiles summarize latencies, in milliseconds.
type Quantiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

func quantiles(ds []time.Duration) Quantiles {
	if len(ds) == 0 {
		return Quantiles{}
	}
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	// rank is the nearest-rank quantile.
	rank := func(p float64) float64 { return ms(ds[max(int(math.Ceil(p*float64(len(ds))))-1, 0)]) }
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return Quantiles{N: len(ds), Mean: ms(sum) / float64(len(ds)), P50: rank(0.5), P99: rank(0.99), Max: ms(ds[len(ds)-1])}
}

// Coverage is the throughput (route.Coverage's tokens/s) serving the
// model's least-served layer or head row (Min) and its mean over layers
// (Mean), over the run.
type Coverage struct {
	MinOfMin   float64          `json:"min_of_min"`
	MeanOfMin  float64          `json:"mean_of_min"`
	MeanOfMean float64          `json:"mean_of_mean"`
	Samples    []CoverageSample `json:"samples"`
}

// CoverageSample is coverage at one moment.
type CoverageSample struct {
	Minute  float64 `json:"minute"`
	Min     float64 `json:"min"`
	Mean    float64 `json:"mean"`
	Serving int     `json:"serving"` // serving nodes
}

// finish totals the run.
func (s *sim) finish() Results {
	r := s.res
	r.SimSeconds = s.now.Seconds()
	for _, ss := range s.sess {
		if ss.state == ssActive {
			r.Unfinished++
			r.UnfinishedTokens += int64(ss.generated)
		}
	}
	r.TokensPerSec = float64(r.WindowTokens) / (s.cfg.Duration - s.cfg.Warmup).D().Seconds()
	r.Latency = quantiles(s.lat)
	r.TTFT = quantiles(s.ttft)
	if s.plans > 0 {
		r.MeanRouteHops = float64(s.hops) / float64(s.plans)
	}
	var busy, serving time.Duration
	for _, n := range s.nodes {
		busy += n.busyTime
		serving += n.servingTime
		if n.state == stServing || n.state == stDraining {
			serving += s.now - n.servingSince
		}
	}
	if serving > 0 {
		r.Utilization = min(float64(busy)/float64(serving), 1)
	}
	r.Coverage.Samples = s.cov
	if len(s.cov) > 0 {
		r.Coverage.MinOfMin = math.Inf(1)
		for _, c := range s.cov {
			r.Coverage.MinOfMin = min(r.Coverage.MinOfMin, c.Min)
			r.Coverage.MeanOfMin += c.Min / float64(len(s.cov))
			r.Coverage.MeanOfMean += c.Mean / float64(len(s.cov))
		}
	}
	return r
}

// Table formats results as a Markdown table, one row per run.
func Table(rs []Results) string {
	var b strings.Builder
	b.WriteString("| routing | placement | tokens/s | p50 ms | p99 ms | TTFT p50 ms | sessions | failed | failovers | hops | coverage min/mean | moves | util |\n")
	b.WriteString("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "| %v | %v | %.1f | %.0f | %.0f | %.0f | %d | %d | %d | %.2f | %.2f / %.2f | %d | %.0f%% |\n",
			r.Routing, r.Placement, r.TokensPerSec, r.Latency.P50, r.Latency.P99, r.TTFT.P50,
			r.Sessions, r.Failed, r.Failovers, r.MeanRouteHops, r.Coverage.MeanOfMin, r.Coverage.MeanOfMean, r.Moves, 100*r.Utilization)
	}
	return b.String()
}
