package metrics

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pipeshard/pipeshard/internal/wire"
)

// latencyBuckets span 100 µs to about 26 s, for forwards, hops and steps.
var latencyBuckets = prometheus.ExponentialBuckets(1e-4, 2, 19)

// newRegistry returns a registry with the Go runtime and process
// collectors.
func newRegistry() *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// handler serves r in the Prometheus text (or negotiated) format.
func handler(r *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(r, promhttp.HandlerOpts{Registry: r})
}

// NodeGauges read a node's state at scrape time. A nil func reads 0.
type NodeGauges struct {
	QueuedTokens func() float64
	Sessions     func() float64
	KVBytes      func() float64
}

// Node is a node's metrics. It implements node.StageObserver.
type Node struct {
	reg      *prometheus.Registry
	tokens   prometheus.Counter
	forwards prometheus.Counter
	batches  prometheus.Counter
	size     prometheus.Histogram
	compute  prometheus.Histogram
	ended    *prometheus.CounterVec
	errors   *prometheus.CounterVec
}

// NewNode returns a node's metrics on a registry of their own, with g's
// gauges.
func NewNode(g NodeGauges) *Node {
	n := &Node{
		reg:      newRegistry(),
		tokens:   prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_node_tokens_total", Help: "Tokens computed: every row of every forward."}),
		forwards: prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_node_forwards_total", Help: "Forwards run."}),
		batches:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_node_batches_total", Help: "Batched runtime calls."}),
		size: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pipeshard_node_batch_size", Help: "Forwards per batch.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128}}),
		compute: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pipeshard_node_forward_seconds", Help: "Compute time of one batched forward.",
			Buckets: latencyBuckets}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pipeshard_node_sessions_ended_total", Help: "Sessions ended, by reason: closed, idle, evicted or error."},
			[]string{"reason"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pipeshard_node_errors_total", Help: "Error frames sent upstream, by code."},
			[]string{"code"}),
	}
	for _, r := range []string{"closed", "idle", "evicted", "error"} {
		n.ended.WithLabelValues(r) // present at 0 from the start
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		if f == nil {
			f = func() float64 { return 0 }
		}
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	n.reg.MustRegister(n.tokens, n.forwards, n.batches, n.size, n.compute, n.ended, n.errors,
		gauge("pipeshard_node_queued_tokens", "Tokens of the forwards queued or running (queue depth).", g.QueuedTokens),
		gauge("pipeshard_node_sessions", "Open sessions.", g.Sessions),
		gauge("pipeshard_node_kv_bytes", "KV cache bytes in use.", g.KVBytes))
	return n
}

// Registry returns the node's registry.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Handler serves the node's metrics.
func (n *Node) Handler() http.Handler { return handler(n.reg) }

// Batch implements node.StageObserver.
func (n *Node) Batch(forwards, tokens int, compute time.Duration) {
	n.tokens.Add(float64(tokens))
	n.forwards.Add(float64(forwards))
	n.batches.Inc()
	n.size.Observe(float64(forwards))
	n.compute.Observe(compute.Seconds())
}

// SessionEnded implements node.StageObserver.
func (n *Node) SessionEnded(reason string) { n.ended.WithLabelValues(reason).Inc() }

// ErrorSent implements node.StageObserver.
func (n *Node) ErrorSent(code wire.ErrorCode) { n.errors.WithLabelValues(codeName(code)).Inc() }

// codeName is a wire error code's label: its sentinel's text after the
// "stage: " prefix, e.g. "wrong position".
func codeName(c wire.ErrorCode) string {
	s := c.Sentinel().Error()
	if len(s) > 7 && s[:7] == "stage: " {
		s = s[7:]
	}
	if c.Sentinel() == wire.ErrInternal && c != wire.CodeOf(wire.ErrInternal) {
		return "code " + strconv.Itoa(int(c))
	}
	return s
}

// Client is a swarm client's metrics. It implements swarm.Observer.
type Client struct {
	reg      *prometheus.Registry
	tokens   prometheus.Counter
	step     prometheus.Histogram
	hop      *prometheus.HistogramVec
	changes  prometheus.Counter
	checks   prometheus.Counter
	failures prometheus.Counter
	sessions prometheus.Gauge
	total    atomic.Uint64 // tokens generated, for TokensGenerated
}

// NewClient returns a client's metrics on a registry of their own.
func NewClient() *Client {
	c := &Client{
		reg:    newRegistry(),
		tokens: prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_client_tokens_total", Help: "Tokens generated by the client's sequences."}),
		step: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pipeshard_client_step_seconds", Help: "Wall time of one step, from send to result.",
			Buckets: latencyBuckets}),
		hop: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "pipeshard_client_hop_seconds", Help: "A hop's queue and compute time of one step, from the step's trace.",
			Buckets: latencyBuckets}, []string{"hop"}),
		changes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_client_route_changes_total", Help: "Failovers of a sequence to a new route."}),
		checks:   prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_client_verify_checks_total", Help: "Steps checked against a shadow route."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "pipeshard_client_verify_failures_total", Help: "Checks where the main and the shadow route disagreed."}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pipeshard_client_sessions", Help: "Open sessions, shadow routes included."}),
	}
	c.reg.MustRegister(c.tokens, c.step, c.hop, c.changes, c.checks, c.failures, c.sessions)
	return c
}

// Registry returns the client's registry.
func (c *Client) Registry() *prometheus.Registry { return c.reg }

// Handler serves the client's metrics.
func (c *Client) Handler() http.Handler { return handler(c.reg) }

// SessionOpened implements swarm.Observer.
func (c *Client) SessionOpened() { c.sessions.Inc() }

// SessionClosed implements swarm.Observer.
func (c *Client) SessionClosed() { c.sessions.Dec() }

// Step implements swarm.Observer.
func (c *Client) Step(rtt time.Duration, trace []wire.Timing) {
	c.step.Observe(rtt.Seconds())
	for _, t := range trace {
		c.hop.WithLabelValues(strconv.Itoa(int(t.Hop))).Observe(float64(uint64(t.Queue)+uint64(t.Compute)) / 1e6)
	}
}

// Tokens implements swarm.Observer.
func (c *Client) Tokens(n int) {
	c.tokens.Add(float64(n))
	c.total.Add(uint64(n))
}

// TokensGenerated returns the tokens generated so far (the dashboard
// samples its rate).
func (c *Client) TokensGenerated() float64 { return float64(c.total.Load()) }

// RouteChanged implements swarm.Observer.
func (c *Client) RouteChanged() { c.changes.Inc() }

// Verified implements swarm.Observer.
func (c *Client) Verified(mismatches int) {
	c.checks.Inc()
	if mismatches > 0 {
		c.failures.Inc()
	}
}
