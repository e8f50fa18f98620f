package metrics_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/metrics"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/swarm"
)

var (
	_ node.StageObserver = (*metrics.Node)(nil)
	_ swarm.Observer     = (*metrics.Client)(nil)
)

// scrape fetches url and parses it with the Prometheus text parser.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !bytes.HasPrefix([]byte(ct), []byte("text/plain")) {
		t.Fatalf("GET %s: %s, %s", url, resp.Status, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// value is the value of the family's metric with the given label pairs
// (name, value, ...): a counter's or gauge's value, a histogram's count.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil && len(labels) > 0 {
		return 0 // a vector with no series yet
	}
	if f == nil {
		t.Fatalf("no metric %s", name)
	}
next:
	for _, m := range f.Metric {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	if len(labels) > 0 {
		return 0 // a labelled series not yet seen
	}
	t.Fatalf("no value for %s%v", name, labels)
	return 0
}

type served struct {
	n   *node.Node
	url string
}

// startNode runs a node with metrics hosting shard, bootstrapped from
// boot, and serves its /metrics.
func startNode(t *testing.T, ctx context.Context, st *teststore.Store, shard string, boot []string) served {
	t.Helper()
	home := filepath.Join(t.TempDir(), "node")
	st.CopyTo(t, home, shard, st.MC.String(), st.Manifest.Tokenizer.CID)
	var n *node.Node
	m := metrics.NewNode(metrics.NodeGauges{
		QueuedTokens: func() float64 { return float64(n.Stage.Snapshot().QueuedTokens) },
		Sessions:     func() float64 { return float64(n.Stage.Sessions()) },
		KVBytes:      func() float64 { return float64(n.Stage.KVBytes()) },
	})
	n, err := node.New(ctx, node.Config{Home: home, Shard: shard, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, Bootstrap: boot,
		Stage: node.StageOptions{Observer: m}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	go n.Run(ctx)
	srv := httptest.NewServer(m.Handler())
	t.Cleanup(srv.Close)
	return served{n, srv.URL}
}

// TestCountersMoveDuringGeneration scrapes real nodes and a real client
// before and after a generation through a two-stage route whose first
// range has a second provider, verified at every step.
func TestCountersMoveDuringGeneration(t *testing.T) {
	modelPath, tok := testmodel.Stories15M(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st, err := teststore.Build(ctx, t.TempDir(), modelPath, tok, teststore.Cut{Balanced: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	l := st.Cuts[0]
	a := startNode(t, ctx, st, l.Shards[0].CID, nil)
	b := startNode(t, ctx, st, l.Shards[1].CID, a.n.Addrs())
	a2 := startNode(t, ctx, st, l.Shards[0].CID, a.n.Addrs()) // the second provider verification needs
	nodes := []served{a, b, a2}

	cm := metrics.NewClient()
	c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: a.n.Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Observer: cm})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	csrv := httptest.NewServer(cm.Handler())
	defer csrv.Close()

	m := st.Manifest
	var hops []swarm.Hop
	var provs []swarm.Provider
	for {
		if hops, _, provs, err = c.FindRoute(ctx, m, nil); err != nil {
			t.Fatal(err)
		}
		if len(provs) == 3 || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond) // the third node's announcement is on its way
	}
	if len(hops) != 2 || len(provs) != 3 {
		t.Fatalf("route of %d hops from %d providers; want 2 of 3", len(hops), len(provs))
	}

	before := make([]map[string]*dto.MetricFamily, len(nodes))
	for i, n := range nodes {
		before[i] = scrape(t, n.url+"/metrics")
		for _, name := range []string{"go_goroutines", "process_cpu_seconds_total"} {
			if before[i][name] == nil {
				t.Errorf("node metrics lack %s", name)
			}
		}
	}
	cb := scrape(t, csrv.URL+"/metrics")

	const maxTokens = 12
	prompt := []int{1, 450, 8338, 265, 931}
	r, err := c.OpenResilient(ctx, m, provs, hops, swarm.SessionOptions{ModelID: m.ModelID, Vocab: m.Config.Vocab, MaxLen: m.Config.Context},
		swarm.FailoverOptions{Verify: &swarm.VerifyOptions{Rate: 1}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := swarm.Generate(ctx, r, prompt, generate.Options{MaxTokens: maxTokens, IgnoreEOS: true, Context: m.Config.Context}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.IDs) != maxTokens {
		t.Fatalf("generated %d tokens, want %d", len(res.IDs), maxTokens)
	}
	during := scrape(t, csrv.URL+"/metrics")
	if got := value(t, during, "pipeshard_client_sessions"); got != 2 {
		t.Errorf("client sessions during the sequence = %v, want 2 (main and shadow route)", got)
	}
	main := r.Session().Route
	vs := r.Verification()
	r.Close()

	// The main route's nodes computed the prompt, then one token per
	// step; a step's forward is one forward however the stage batched it.
	// The shadow route shares the second range's node (there is one
	// provider of it): every forward of a first-range node goes on to it.
	steps := float64(maxTokens) // one prefill, then maxTokens-1 decode steps
	delta := make([]func(name string, labels ...string) float64, len(nodes))
	for i, n := range nodes {
		after := scrape(t, n.url+"/metrics")
		delta[i] = func(name string, labels ...string) float64 {
			return value(t, after, name, labels...) - value(t, before[i], name, labels...)
		}
	}
	first, shadow := 0, 2 // a and a2, whichever the main route took
	if main[0].Peer.ID == a2.n.ID() {
		first, shadow = 2, 0
	}
	if main[1].Peer.ID != b.n.ID() {
		t.Fatalf("main route's second hop is %s, not the only provider %s", main[1].Peer.ID, b.n.ID())
	}
	if got, want := delta[first]("pipeshard_node_forwards_total"), steps; got != want {
		t.Errorf("main route's first node: forwards rose by %v, want %v", got, want)
	}
	if got, want := delta[first]("pipeshard_node_tokens_total"), float64(len(prompt)+maxTokens-1); got != want {
		t.Errorf("main route's first node: tokens rose by %v, want %v", got, want)
	}
	if delta[shadow]("pipeshard_node_tokens_total") <= 0 {
		t.Errorf("shadow route's first node: no tokens counted")
	}
	for _, name := range []string{"pipeshard_node_forwards_total", "pipeshard_node_tokens_total"} {
		if got, want := delta[1](name), delta[first](name)+delta[shadow](name); got != want {
			t.Errorf("second-range node: %s rose by %v, want %v (both first-range nodes' sum)", name, got, want)
		}
	}
	for i := range nodes {
		forwards, batches := delta[i]("pipeshard_node_forwards_total"), delta[i]("pipeshard_node_batches_total")
		if batches < 1 || batches > forwards {
			t.Errorf("node %d: batches rose by %v for %v forwards", i, batches, forwards)
		}
		if got := delta[i]("pipeshard_node_batch_size"); got != batches {
			t.Errorf("node %d: batch size observations %v, want one per batch (%v)", i, got, batches)
		}
		if got := delta[i]("pipeshard_node_forward_seconds"); got != batches {
			t.Errorf("node %d: forward latency observations %v, want one per batch (%v)", i, got, batches)
		}
	}
	// Closing ends the sessions everywhere: the gauges return to 0 and
	// each main-route node counts one session closed.
	deadline := time.Now().Add(10 * time.Second)
	for i, n := range nodes {
		for {
			after := scrape(t, n.url+"/metrics")
			closed := value(t, after, "pipeshard_node_sessions_ended_total", "reason", "closed") - value(t, before[i], "pipeshard_node_sessions_ended_total", "reason", "closed")
			if value(t, after, "pipeshard_node_sessions") == 0 && value(t, after, "pipeshard_node_kv_bytes") == 0 && closed >= 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: sessions %v, kv bytes %v, closed +%v after the client closed", i,
					value(t, after, "pipeshard_node_sessions"), value(t, after, "pipeshard_node_kv_bytes"), closed)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	ca := scrape(t, csrv.URL+"/metrics")
	d := func(name string, labels ...string) float64 {
		return value(t, ca, name, labels...) - value(t, cb, name, labels...)
	}
	if got := d("pipeshard_client_tokens_total"); got != maxTokens {
		t.Errorf("client tokens rose by %v, want %v", got, maxTokens)
	}
	if got := d("pipeshard_client_step_seconds"); got < steps {
		t.Errorf("client step observations %v, want at least %v (main route; shadow steps add more)", got, steps)
	}
	for hop := range 2 {
		if got := d("pipeshard_client_hop_seconds", "hop", fmt.Sprint(hop)); got < steps {
			t.Errorf("client hop %d observations %v, want at least %v", hop, got, steps)
		}
	}
	if got, want := d("pipeshard_client_verify_checks_total"), float64(vs.Checked); got != want || want < 1 {
		t.Errorf("client verification checks rose by %v; the sequence checked %d", got, vs.Checked)
	}
	if got := d("pipeshard_client_verify_failures_total"); got != float64(vs.Mismatches) {
		t.Errorf("client verification failures rose by %v; the sequence had %d mismatches", got, vs.Mismatches)
	}
	if got := d("pipeshard_client_route_changes_total"); got != 0 {
		t.Errorf("route changes rose by %v without a failure", got)
	}
	if got := value(t, ca, "pipeshard_client_sessions"); got != 0 {
		t.Errorf("client sessions after close = %v", got)
	}
}

// TestNodeObserverEvents checks the label values the observer methods
// produce, without a swarm.
func TestNodeObserverEvents(t *testing.T) {
	m := metrics.NewNode(metrics.NodeGauges{Sessions: func() float64 { return 3 }})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	m.SessionEnded("idle")
	m.SessionEnded("evicted")
	m.SessionEnded("evicted")
	m.ErrorSent(wire.CodeOf(wire.ErrPosition))
	m.Batch(3, 7, 2*time.Millisecond)
	f := scrape(t, srv.URL)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pipeshard_node_sessions_ended_total", []string{"reason", "idle"}, 1},
		{"pipeshard_node_sessions_ended_total", []string{"reason", "evicted"}, 2},
		{"pipeshard_node_sessions_ended_total", []string{"reason", "closed"}, 0},
		{"pipeshard_node_errors_total", []string{"code", "wrong position"}, 1},
		{"pipeshard_node_forwards_total", nil, 3},
		{"pipeshard_node_tokens_total", nil, 7},
		{"pipeshard_node_batch_size", nil, 1},
		{"pipeshard_node_sessions", nil, 3},
		{"pipeshard_node_kv_bytes", nil, 0},
	} {
		if got := value(t, f, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}
