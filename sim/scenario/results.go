package scenario

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pipeshard/pipeshard/sim/plot"
)

// ClientRecord is one line of `pipeshard sim client --json` (the load
// generator Run starts in each client host): "ready" once the client has
// joined the swarm, then one "request" per request that ended.
type ClientRecord struct {
	Event    string `json:"event"`     // "ready" or "request"
	UnixNano int64  `json:"unix_nano"` // ready: when; request: when it began
	Index    int    `json:"index"`     // the request's number in this process
	Slot     int    `json:"slot"`      // which of the in-flight slots ran it
	// RouteMicros is the time spent finding a route and opening the
	// session, from UnixNano.
	RouteMicros  int64 `json:"route_us"`
	PromptTokens int   `json:"prompt_tokens"`
	// TokenMicros are the arrival times of the generated tokens, from
	// UnixNano; EndMicros is when the request ended.
	TokenMicros []int64    `json:"token_us"`
	IDs         []int      `json:"ids"` // the generated token ids
	EndMicros   int64      `json:"end_us"`
	Stopped     string     `json:"stopped,omitempty"` // "eos", "length" or "context"
	ExpectedMs  float64    `json:"expected_ms_per_token,omitempty"`
	Route       []RouteHop `json:"route,omitempty"`
	Error       string     `json:"error,omitempty"`
	// Speculative decoding's counts: traversals of the route (the
	// prompt's included), drafts verified and drafts accepted.
	Traversals int `json:"traversals,omitempty"`
	Drafted    int `json:"drafted,omitempty"`
	Accepted   int `json:"accepted,omitempty"`
}

// RouteHop is one hop of a request's route with its mean per-token
// compute and queue time over the request's decode steps.
type RouteHop struct {
	Peer      string  `json:"peer"`
	Node      string  `json:"node,omitempty"` // the scenario's name of the peer (Run fills it)
	Layers    string  `json:"layers"`
	RTTms     float64 `json:"rtt_ms"`
	ComputeMs float64 `json:"compute_ms"`
	QueueMs   float64 `json:"queue_ms"`
}

// Quantiles summarize a sample, in milliseconds.
type Quantiles struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
}

// quantiles uses the nearest rank, as sim/scale does.
func quantiles(ms []float64) Quantiles {
	if len(ms) == 0 {
		return Quantiles{}
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	rank := func(p float64) float64 { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)] }
	sum := 0.0
	for _, v := range s {
		sum += v
	}
	return Quantiles{N: len(s), Mean: sum / float64(len(s)), P50: rank(0.5), P99: rank(0.99), Max: s[len(s)-1]}
}

// Results are what Run measured. Times are seconds from the moment the
// swarm was up (every initial node had printed its start line); start-up
// comes before 0.
type Results struct {
	Scenario *Scenario `json:"scenario"`
	Backend  string    `json:"backend"`
	Started  time.Time `json:"started"`
	// Model is the model CID the swarm served, Layouts its cuts.
	Model   string   `json:"model"`
	Layouts []string `json:"layouts"`
	// Store is the pipeshard home whose store holds the model and its
	// shards (PIPESHARD_HOME for `pipeshard run --shards`).
	Store string `json:"store,omitempty"`
	// StartupSeconds is how long the initial nodes took to come up;
	// Seconds is the run after that.
	StartupSeconds float64 `json:"startup_seconds"`
	Seconds        float64 `json:"seconds"`

	Nodes    []NodeResult    `json:"nodes"`
	Churn    []ChurnResult   `json:"churn,omitempty"`
	Phases   []PhaseResult   `json:"phases"`
	Requests []RequestResult `json:"requests"`
	// Hops are per-node compute and queue times, weighted by the decode
	// tokens of the requests that went through it.
	Hops []HopResult `json:"hops"`

	// Tokens delivered, requests that failed, and the aggregate
	// throughput over every phase's window.
	Tokens       int     `json:"tokens"`
	Failed       int     `json:"failed"`
	TokensPerSec float64 `json:"tokens_per_sec"`
	// Errors are failures outside requests: client processes that did
	// not run, nodes that died unasked, churn that could not be applied,
	// and the bound that stopped the run.
	Errors []string `json:"errors,omitempty"`
}

// NodeResult is one node: who it was and when it ran.
type NodeResult struct {
	Name   string    `json:"name"`
	Host   int       `json:"host"`
	Addr   string    `json:"addr"`
	PeerID string    `json:"peer_id,omitempty"`
	Layers string    `json:"layers"`          // as served (auto resolves to a range)
	Shard  string    `json:"shard,omitempty"` // CID, unless auto
	Starts []float64 `json:"starts,omitempty"`
	Stops  []float64 `json:"stops,omitempty"`
	Exit   string    `json:"exit,omitempty"` // how its last process ended
}

// ChurnResult is one churn event as applied.
type ChurnResult struct {
	At     float64 `json:"at"` // as planned
	T      float64 `json:"t"`  // as applied
	Node   string  `json:"node"`
	Action string  `json:"action"`
	Error  string  `json:"error,omitempty"`
}

// PhaseResult is one value of the in-flight sweep.
type PhaseResult struct {
	Phase    int            `json:"phase"`
	Label    string         `json:"label"`
	InFlight map[string]int `json:"in_flight"` // by client group
	Start    float64        `json:"start"`
	End      float64        `json:"end"`
	Requests int            `json:"requests"`
	Failed   int            `json:"failed"`
	Tokens   int            `json:"tokens"`
	// TokensPerSec is the phase's tokens over its window (first request
	// start to last request end).
	TokensPerSec float64 `json:"tokens_per_sec"`
	// RequestTokensPerSec summarizes the requests' own decode rates
	// (tokens/s, not ms).
	RequestTokensPerSec Quantiles `json:"request_tokens_per_sec"`
	Latency             Quantiles `json:"latency_ms"` // per token after the first
	TTFT                Quantiles `json:"ttft_ms"`    // request start to first token, route search included
}

// RequestResult is one request.
type RequestResult struct {
	Client       string     `json:"client"`
	Phase        int        `json:"phase"`
	Index        int        `json:"index"`
	Slot         int        `json:"slot"`
	Start        float64    `json:"start"`
	End          float64    `json:"end"`
	RouteMs      float64    `json:"route_ms"`
	TTFTms       float64    `json:"ttft_ms"`
	PromptTokens int        `json:"prompt_tokens"`
	Tokens       int        `json:"tokens"`
	TokensPerSec float64    `json:"tokens_per_sec"` // decode: (tokens-1) over first to last token
	Latency      Quantiles  `json:"latency_ms"`
	Route        []RouteHop `json:"route,omitempty"`
	ExpectedMs   float64    `json:"expected_ms_per_token,omitempty"`
	Stopped      string     `json:"stopped,omitempty"`
	Error        string     `json:"error,omitempty"`
	TokenTimes   []float64  `json:"token_times"` // seconds, as the other times
	IDs          []int      `json:"ids"`
	Traversals   int        `json:"traversals,omitempty"`
	Drafted      int        `json:"drafted,omitempty"`
	Accepted     int        `json:"accepted,omitempty"`
}

// HopResult is one node's share of the routes.
type HopResult struct {
	Node      string  `json:"node"`
	Layers    string  `json:"layers"`
	Requests  int     `json:"requests"`
	Tokens    int     `json:"tokens"` // decode tokens it computed
	ComputeMs float64 `json:"compute_ms"`
	QueueMs   float64 `json:"queue_ms"`
	RTTms     float64 `json:"rtt_ms"` // mean client-measured RTT
}

// request turns a client's record into a result, times relative to t0.
func request(client string, phase int, rec ClientRecord, t0 time.Time) RequestResult {
	start := float64(rec.UnixNano-t0.UnixNano()) / 1e9
	r := RequestResult{
		Client: client, Phase: phase, Index: rec.Index, Slot: rec.Slot, Start: start,
		End: start + float64(rec.EndMicros)/1e6, RouteMs: float64(rec.RouteMicros) / 1e3,
		PromptTokens: rec.PromptTokens, Tokens: len(rec.TokenMicros), Route: rec.Route,
		ExpectedMs: rec.ExpectedMs, Stopped: rec.Stopped, Error: rec.Error, TokenTimes: []float64{}, IDs: rec.IDs,
		Traversals: rec.Traversals, Drafted: rec.Drafted, Accepted: rec.Accepted,
	}
	var gaps []float64
	for i, us := range rec.TokenMicros {
		r.TokenTimes = append(r.TokenTimes, start+float64(us)/1e6)
		if i > 0 {
			gaps = append(gaps, float64(us-rec.TokenMicros[i-1])/1e3)
		}
	}
	if n := len(rec.TokenMicros); n > 0 {
		r.TTFTms = float64(rec.TokenMicros[0]) / 1e3
		if d := rec.TokenMicros[n-1] - rec.TokenMicros[0]; n > 1 && d > 0 {
			r.TokensPerSec = float64(n-1) / (float64(d) / 1e6)
		}
	}
	r.Latency = quantiles(gaps)
	return r
}

// finish computes the phases', hops' and overall figures from the
// requests.
func (r *Results) finish() {
	r.Tokens, r.Failed = 0, 0
	var window float64
	for pi := range r.Phases {
		p := &r.Phases[pi]
		var lat, ttft, rates []float64
		p.Start, p.End = math.Inf(1), math.Inf(-1)
		p.Requests, p.Failed, p.Tokens = 0, 0, 0
		for _, q := range r.Requests {
			if q.Phase != p.Phase {
				continue
			}
			p.Requests++
			p.Tokens += q.Tokens
			if q.Error != "" {
				p.Failed++
			}
			p.Start, p.End = min(p.Start, q.Start), max(p.End, q.End)
			for i := 1; i < len(q.TokenTimes); i++ {
				lat = append(lat, (q.TokenTimes[i]-q.TokenTimes[i-1])*1e3)
			}
			if q.Tokens > 0 {
				ttft = append(ttft, q.TTFTms)
			}
			if q.TokensPerSec > 0 {
				rates = append(rates, q.TokensPerSec)
			}
		}
		if p.Requests == 0 {
			p.Start, p.End = 0, 0
		}
		if d := p.End - p.Start; d > 0 {
			p.TokensPerSec = float64(p.Tokens) / d
			window += d
		}
		p.Latency, p.TTFT = quantiles(lat), quantiles(ttft)
		rq := quantiles(rates)
		p.RequestTokensPerSec = rq
		r.Tokens += p.Tokens
		r.Failed += p.Failed
	}
	if window > 0 {
		r.TokensPerSec = float64(r.Tokens) / window
	}
	type acc struct {
		h               HopResult
		comp, queue, rt float64
		rtn             int // hops with a measured RTT
	}
	by := map[string]*acc{}
	var order []string
	for _, q := range r.Requests {
		n := max(q.Tokens-1, 0)
		for _, h := range q.Route {
			key := h.Node + "|" + h.Layers
			if h.Node == "" {
				key = h.Peer + "|" + h.Layers
			}
			a := by[key]
			if a == nil {
				name := h.Node
				if name == "" {
					name = h.Peer
				}
				a = &acc{h: HopResult{Node: name, Layers: h.Layers}}
				by[key] = a
				order = append(order, key)
			}
			a.h.Requests++
			a.h.Tokens += n
			a.comp += h.ComputeMs * float64(n)
			a.queue += h.QueueMs * float64(n)
			if h.RTTms > 0 { // 0: the client did not measure this hop
				a.rt += h.RTTms
				a.rtn++
			}
		}
	}
	r.Hops = nil
	for _, k := range order {
		a := by[k]
		if a.h.Tokens > 0 {
			a.h.ComputeMs, a.h.QueueMs = a.comp/float64(a.h.Tokens), a.queue/float64(a.h.Tokens)
		}
		if a.rtn > 0 {
			a.h.RTTms = a.rt / float64(a.rtn)
		}
		r.Hops = append(r.Hops, a.h)
	}
	slices.SortStableFunc(r.Hops, func(a, b HopResult) int { return strings.Compare(a.Node, b.Node) })
}

// ThroughputSeries returns tokens/s in windows of width seconds, one
// series per client and phase (per client when there is one phase),
// each over its phase's span.
func (r *Results) ThroughputSeries(width float64) []plot.Series {
	if width <= 0 {
		return nil
	}
	type key struct {
		client string
		phase  int
	}
	var keys []key
	span := map[key][2]float64{}
	for _, q := range r.Requests {
		k := key{q.Client, q.Phase}
		sp, ok := span[k]
		if !ok {
			keys = append(keys, k)
			sp = [2]float64{q.Start, q.End}
		}
		span[k] = [2]float64{min(sp[0], q.Start), max(sp[1], q.End)}
	}
	var out []plot.Series
	for _, k := range keys {
		lo, hi := int(math.Floor(span[k][0]/width)), int(math.Floor(span[k][1]/width))
		counts := make([]float64, max(hi-lo+1, 1))
		for _, q := range r.Requests {
			if q.Client != k.client || q.Phase != k.phase {
				continue
			}
			for _, t := range q.TokenTimes {
				if b := int(math.Floor(t/width)) - lo; b >= 0 && b < len(counts) {
					counts[b]++
				}
			}
		}
		name := k.client
		if len(r.Phases) > 1 && k.phase < len(r.Phases) {
			name = fmt.Sprintf("%s, %d in flight", k.client, r.Phases[k.phase].InFlight[r.clientGroup(k.client)])
		}
		s := plot.Series{Name: name}
		for i, n := range counts {
			s.X = append(s.X, (float64(lo+i)+0.5)*width)
			s.Y = append(s.Y, n/width)
		}
		out = append(out, s)
	}
	return out
}

// clientGroup returns the group of a client host.
func (r *Results) clientGroup(host string) string {
	if r.Scenario != nil {
		for _, h := range r.Scenario.Hosts() {
			if h.Name == host {
				return h.Group
			}
		}
	}
	return host
}

// WriteDir writes results.json and the plots into dir: throughput.svg
// (tokens/s over time per client) and inflight.svg (aggregate tokens/s
// per phase of the in-flight sweep).
func (r *Results) WriteDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	width := 1.0
	if span := r.Seconds; span > 120 {
		width = math.Ceil(span / 120)
	}
	title := r.Scenario.Name
	charts := map[string]interface{ WriteSVG(io.Writer) error }{
		"throughput.svg": plot.Line{Title: title + ": tokens/s per client", XLabel: fmt.Sprintf("time since the swarm was up (s; %gs windows)", width),
			YLabel: "tokens/s", Series: r.ThroughputSeries(width)},
	}
	bar := plot.Bar{Title: title + ": aggregate tokens/s per phase", YLabel: "tokens/s"}
	for _, p := range r.Phases {
		bar.Labels = append(bar.Labels, p.Label)
		bar.Values = append(bar.Values, p.TokensPerSec)
	}
	charts["inflight.svg"] = bar
	for name, c := range charts {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		err = c.WriteSVG(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if errors.Is(err, plot.ErrNoData) {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Summary prints the phases and the hops as tables.
func (r *Results) Summary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s on %s: %d tokens, %d failed, %.1f tokens/s\n", r.Scenario.Name, r.Backend, r.Tokens, r.Failed, r.TokensPerSec)
	fmt.Fprintln(tw, "PHASE\tREQUESTS\tFAILED\tTOKENS\tTOKENS/S\tREQ TOK/S p50\tms/token p50\tp99\tTTFT p50 ms")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\n", p.Label, p.Requests, p.Failed, p.Tokens, p.TokensPerSec,
			p.RequestTokensPerSec.P50, p.Latency.P50, p.Latency.P99, p.TTFT.P50)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "NODE\tLAYERS\tREQUESTS\tCOMPUTE ms/token\tQUEUE ms/token\tRTT ms")
	for _, h := range r.Hops {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.1f\n", h.Node, h.Layers, h.Requests, h.ComputeMs, h.QueueMs, h.RTTms)
	}
	tw.Flush()
	for _, e := range r.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
}
