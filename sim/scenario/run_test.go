package scenario

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/pipeshard/pipeshard/internal/testwatch"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/testmodel"
)

// loopback is a Network without impairment: every host is 127.0.0.1 and
// runs its processes here. It tests the runner, not the emulator.
type loopback struct {
	mu     sync.Mutex
	cmds   []string // "host: name args..." of every command
	closed bool
}

func (l *loopback) Backend() string       { return "loopback" }
func (l *loopback) Addr(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, 1}) }
func (l *loopback) Close() error          { l.mu.Lock(); l.closed = true; l.mu.Unlock(); return nil }
func (l *loopback) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	l.mu.Lock()
	l.cmds = append(l.cmds, strings.Join(append([]string{string(rune('0' + i)), name}, args...), " "))
	l.mu.Unlock()
	return exec.CommandContext(ctx, name, args...)
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
	cacheDir  string
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "scenario-test-")
	if err != nil {
		panic(err)
	}
	cacheDir = dir
	code := testwatch.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// pipeshard builds the binary once, with the model required: the tests
// that need it skip without the model, and fail under CI.
func pipeshard(t *testing.T) string {
	t.Helper()
	testmodel.Stories15M(t)
	buildOnce.Do(func() {
		binary = filepath.Join(cacheDir, "pipeshard")
		out, err := exec.Command("go", "build", "-o", binary, "github.com/pipeshard/pipeshard").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v", buildErr)
	}
	return binary
}

func testEnv(t *testing.T, net Network) Env {
	return Env{
		Net: net, Binary: pipeshard(t), WorkDir: t.TempDir(), CacheDir: filepath.Join(cacheDir, "models"),
		ModelHome: testmodel.Home(), Log: slog.New(slog.NewTextHandler(testWriter{t}, nil)),
		StartTimeout: time.Minute,
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestRun runs three nodes, one stage each (the last fetching its shard
// from the others), and a client with 1 then 2 requests in flight: every
// request gets the same greedy tokens through a route over all three
// nodes, and the results add up.
func TestRun(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "trace.jsonl")
	s, err := Parse([]byte(`
name: three
nodes:
  - {name: n, count: 2, layers: "0:2,2:4"}
  - {name: f, layers: "4:6", fetch: true}
network: {delay: 0s}
clients:
  - {name: c, in_flight: [1, 2], requests: 2, prompt_ids: [1, 450, 8338, 265], tokens: 12, ignore_eos: true, args: [["--trace", "` + trace + `"]]}
bounds: {max_duration: 4m}
`))
	if err != nil {
		t.Fatal(err)
	}
	net := &loopback{}
	env := testEnv(t, net)
	start := time.Now()
	res, err := Run(t.Context(), s, env)
	if err != nil {
		t.Fatalf("%v\nerrors: %v", err, res)
	}
	t.Logf("run took %v (start-up %.1fs, load %.1fs)", time.Since(start), res.StartupSeconds, res.Seconds)
	if !net.closed {
		t.Error("Run did not close the network")
	}
	if len(res.Errors) > 0 {
		t.Errorf("errors: %v", res.Errors)
	}
	if res.Model == "" || !slices.Contains(res.Layouts, "0:2,2:4,4:6") {
		t.Errorf("model %q layouts %v", res.Model, res.Layouts)
	}
	if len(res.Phases) != 2 || res.Phases[0].Label != "1 in flight" || res.Phases[1].Label != "2 in flight" {
		t.Fatalf("phases %+v", res.Phases)
	}
	if len(res.Requests) != 4 {
		t.Fatalf("%d requests, want 4", len(res.Requests))
	}
	var ids []int
	for _, q := range res.Requests {
		if q.Error != "" || q.Tokens != 12 || len(q.IDs) != 12 || len(q.TokenTimes) != 12 || q.Stopped != "length" {
			t.Fatalf("request %+v", q)
		}
		if ids == nil {
			ids = q.IDs
		} else if !reflect.DeepEqual(ids, q.IDs) {
			t.Errorf("greedy requests differ: %v vs %v", ids, q.IDs)
		}
		if q.Start < 0 || q.End < q.Start || q.TTFTms <= 0 || q.TokensPerSec <= 0 || q.Latency.N != 11 {
			t.Errorf("request timing %+v", q)
		}
		var nodes []string
		for _, h := range q.Route {
			nodes = append(nodes, h.Node)
		}
		if !reflect.DeepEqual(nodes, []string{"n0", "n1", "f"}) {
			t.Errorf("route over %v", nodes)
		}
	}
	// The second phase runs two requests at once.
	var p1 []RequestResult
	for _, q := range res.Requests {
		if q.Phase == 1 {
			p1 = append(p1, q)
		}
	}
	if len(p1) != 2 || p1[0].Slot == p1[1].Slot {
		t.Errorf("phase 1 requests %+v", p1)
	}
	for _, p := range res.Phases {
		if p.Requests != 2 || p.Failed != 0 || p.Tokens != 24 || p.TokensPerSec <= 0 || p.Latency.N != 22 || p.TTFT.N != 2 {
			t.Errorf("phase %+v", p)
		}
	}
	if res.Tokens != 48 || res.Failed != 0 || res.TokensPerSec <= 0 {
		t.Errorf("totals: %d tokens, %d failed, %.1f tokens/s", res.Tokens, res.Failed, res.TokensPerSec)
	}
	if len(res.Hops) != 3 {
		t.Fatalf("hops %+v", res.Hops)
	}
	for i, h := range res.Hops {
		if h.Node != []string{"f", "n0", "n1"}[i] || h.Requests != 4 || h.Tokens != 44 || h.ComputeMs <= 0 {
			t.Errorf("hop %+v", h)
		}
	}
	for _, n := range res.Nodes {
		if n.PeerID == "" || len(n.Starts) != 1 || n.Starts[0] > 0 || !strings.HasPrefix(n.Exit, "stop") || n.Shard == "" {
			t.Errorf("node %+v", n)
		}
	}
	// Every process ran in its own host: nodes in 0-2, the client's in 3.
	for _, c := range net.cmds {
		if strings.Contains(c, " node ") != (c[0] < '3') || strings.Contains(c, " sim client ") != (c[0] == '3') {
			t.Errorf("command in the wrong host: %s", c)
		}
	}
	out := t.TempDir()
	if err := res.WriteDir(out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"results.json", "throughput.svg", "inflight.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// --trace: a line per traversal of each request, both phases
	// appending; 12 tokens take 12 traversals.
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	perRequest := map[int]int{}
	for l := range strings.Lines(string(b)) {
		var st struct {
			Request int
			Hops    []struct{ Peer string }
		}
		if err := json.Unmarshal([]byte(l), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Hops) != 3 || st.Hops[2].Peer == "" {
			t.Errorf("trace line %s", l)
		}
		perRequest[st.Request]++
	}
	if !reflect.DeepEqual(perRequest, map[int]int{0: 24, 1: 24}) {
		t.Errorf("trace lines per request index %v, want 24 of each of 0 and 1 (two phases of two requests, 12 traversals each)", perRequest)
	}
	var sum strings.Builder
	res.Summary(&sum)
	if !strings.Contains(sum.String(), "2 in flight") || !strings.Contains(sum.String(), "n1") {
		t.Errorf("summary:\n%s", sum.String())
	}
}

// TestRunSynth serves a synthetic model (made by `shards synth`, not
// imported) with a memory bound on each node smaller than the model: the
// route's tokens equal the same shards chained in one process.
func TestRunSynth(t *testing.T) {
	s, err := Parse([]byte(`
name: synth
model: {name: "synth:tiny", quant: q8}
nodes:
  - {name: n, count: 2, layers: "0:2,2:4", memory: 150KiB}
network: {delay: 0s}
clients:
  - {name: c, in_flight: [1, 2], requests: 2, prompt_ids: [1, 50, 60], tokens: 10, ignore_eos: true}
bounds: {max_duration: 3m}
`))
	if err != nil {
		t.Fatal(err)
	}
	env := testEnv(t, &loopback{})
	var preparedModel, preparedStore string
	env.Prepared = func(model, store string) { preparedModel, preparedStore = model, store }
	res, err := Run(t.Context(), s, env)
	if err != nil {
		t.Fatalf("%v\nerrors: %v", err, res)
	}
	if preparedModel != res.Model || preparedStore != res.Store || res.Store == "" {
		t.Errorf("Prepared told %s in %s; results say %s in %s", preparedModel, preparedStore, res.Model, res.Store)
	}
	if len(res.Errors) > 0 || res.Failed > 0 || len(res.Requests) != 4 {
		t.Fatalf("errors %v, %d failed, %d requests", res.Errors, res.Failed, len(res.Requests))
	}
	// The whole model does not fit one node's bound.
	run := func(args ...string) []byte {
		cmd := exec.Command(pipeshard(t), args...)
		cmd.Env = append(os.Environ(), "PIPESHARD_HOME="+res.Store)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pipeshard %v: %v", args, err)
		}
		return out
	}
	var manifest struct {
		Layouts []struct {
			Split  string
			Shards []struct{ Bytes int64 }
		}
	}
	if err := json.Unmarshal(run("shards", "show", res.Model), &manifest); err != nil {
		t.Fatal(err)
	}
	var whole int64
	for _, l := range manifest.Layouts {
		if l.Split == "whole" {
			whole = l.Shards[0].Bytes
		}
	}
	if whole <= 150<<10 {
		t.Errorf("the whole model holds %d bytes, not more than a node's bound", whole)
	}
	var chain []string
	for _, n := range res.Nodes {
		chain = append(chain, n.Shard)
	}
	var local struct{ IDs []int }
	if err := json.Unmarshal(run("run", "--model", res.Model, "--shards", strings.Join(chain, ","), "--quant", "q8",
		"--prompt-ids", "1,50,60", "-n", "10", "--ignore-eos", "--json"), &local); err != nil || len(local.IDs) != 10 {
		t.Fatalf("run --shards: %v, %v", err, local.IDs)
	}
	for _, q := range res.Requests {
		if !reflect.DeepEqual(q.IDs, local.IDs) {
			t.Errorf("request %d: %v, shards chained in one process: %v", q.Slot, q.IDs, local.IDs)
		}
	}
}

// TestRunChurn starts a standby node, and kills and restarts another,
// while a client keeps requests going; the churn is applied on time and
// accounted for.
func TestRunChurn(t *testing.T) {
	s, err := Parse([]byte(`
name: churn
nodes:
  - {name: a, layers: "0:6"}
  - {name: b, layers: "0:6", standby: true}
clients:
  - {name: c, in_flight: 1, duration: 5s, prompt: Once upon a time, tokens: 8}
churn:
  - {at: 0s, start: b}
  - {at: 2s, kill: a}
  - {at: 3s, start: a}
bounds: {max_duration: 4m}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(t.Context(), s, testEnv(t, &loopback{}))
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(res.Churn) != 3 {
		t.Fatalf("churn %+v", res.Churn)
	}
	for _, c := range res.Churn {
		if c.Error != "" || c.T < c.At || c.T > c.At+1 {
			t.Errorf("churn %+v: not applied on time", c)
		}
	}
	for _, e := range res.Errors {
		if strings.Contains(e, "unasked") || strings.Contains(e, "churn") {
			t.Errorf("error: %s", e)
		}
	}
	a, b := res.Nodes[0], res.Nodes[1]
	if len(a.Starts) != 2 || len(a.Stops) != 2 || a.Stops[0] < 2 || a.Starts[1] < a.Stops[0] || !strings.HasPrefix(a.Exit, "stop") {
		t.Errorf("node a %+v", a)
	}
	if len(b.Starts) != 1 || b.Starts[0] < 0 || b.PeerID == "" {
		t.Errorf("node b %+v", b)
	}
	if len(res.Requests) == 0 || res.Requests[0].Tokens == 0 {
		t.Fatalf("requests %+v", res.Requests)
	}
	t.Logf("%d requests, %d failed, %d tokens", len(res.Requests), res.Failed, res.Tokens)
}

func TestRunErrors(t *testing.T) {
	s, err := Parse([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Run(t.Context(), s, Env{}); !errors.Is(err, ErrRun) || !strings.Contains(err.Error(), "no network") {
		t.Errorf("no network: %v", err)
	}
	// The default binary of a test is the test itself: refused, or
	// every command would run the tests again.
	if _, err := Run(t.Context(), s, Env{Net: &loopback{}}); !errors.Is(err, ErrRun) || !strings.Contains(err.Error(), "Go test binary") {
		t.Errorf("test binary: %v", err)
	}
	bad := *s
	bad.Name = ""
	if _, err := Run(t.Context(), &bad, Env{Net: &loopback{}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("invalid scenario: %v", err)
	}
	// A binary that fails: the import says so, and the network is closed.
	net := &loopback{}
	res, err := Run(t.Context(), s, Env{Net: net, Binary: "/bin/false", CacheDir: t.TempDir(), WorkDir: t.TempDir()})
	if !errors.Is(err, ErrRun) || !strings.Contains(err.Error(), "shards import") || !net.closed || res == nil || len(res.Errors) != 1 {
		t.Errorf("failing binary: %v, %+v", err, res)
	}
}

func TestChildEnv(t *testing.T) {
	t.Setenv("PIPESHARD_THREADS", "7")
	t.Setenv("PIPESHARD_HOME", "/elsewhere")
	env := childEnv(map[string]string{"PIPESHARD_HOME": "/node", "GOMAXPROCS": "2"})
	if slices.Contains(env, "PIPESHARD_THREADS=7") || slices.Contains(env, "PIPESHARD_HOME=/elsewhere") ||
		!slices.Contains(env, "PIPESHARD_HOME=/node") || !slices.Contains(env, "GOMAXPROCS=2") {
		t.Fatalf("env %v", env)
	}
}

func TestQuantiles(t *testing.T) {
	q := quantiles([]float64{5, 1, 4, 2, 3})
	if q != (Quantiles{N: 5, Mean: 3, P50: 3, P99: 5, Max: 5}) {
		t.Fatalf("%+v", q)
	}
	if quantiles(nil) != (Quantiles{}) {
		t.Fatal("empty sample")
	}
	rec := ClientRecord{UnixNano: time.Unix(10, 0).UnixNano(), RouteMicros: 1000, TokenMicros: []int64{2000, 4000, 8000}, EndMicros: 9000}
	r := request("c", 0, rec, time.Unix(9, 0))
	if r.Start != 1 || r.End != 1.009 || r.TTFTms != 2 || r.TokensPerSec != 2/0.006 || r.Latency.P50 != 2 || r.Latency.Max != 4 {
		t.Fatalf("%+v", r)
	}
}

func TestThroughputSeries(t *testing.T) {
	s, _ := Parse([]byte(base))
	s.Clients[0].InFlight = Ints{1, 2}
	r := &Results{Scenario: s, Phases: []PhaseResult{{Phase: 0, InFlight: map[string]int{"c": 1}}, {Phase: 1, InFlight: map[string]int{"c": 2}}},
		Requests: []RequestResult{
			{Client: "c", Phase: 0, Start: 0.2, End: 1.9, TokenTimes: []float64{0.5, 0.7, 1.5}},
			{Client: "c", Phase: 1, Start: 2.1, End: 3.5, TokenTimes: []float64{2.5, 3.1, 3.2, 3.4}},
		}}
	ss := r.ThroughputSeries(1)
	if len(ss) != 2 || ss[0].Name != "c, 1 in flight" || ss[1].Name != "c, 2 in flight" {
		t.Fatalf("%+v", ss)
	}
	if !reflect.DeepEqual(ss[0].X, []float64{0.5, 1.5}) || !reflect.DeepEqual(ss[0].Y, []float64{2, 1}) ||
		!reflect.DeepEqual(ss[1].X, []float64{2.5, 3.5}) || !reflect.DeepEqual(ss[1].Y, []float64{1, 3}) {
		t.Fatalf("%+v", ss)
	}
}

// TestRunBound stops a run at bounds.max_duration: the results so far
// come back with an error that says why, and the nodes are stopped.
func TestRunBound(t *testing.T) {
	s, err := Parse([]byte(`
name: bounded
nodes: [{name: a, layers: "0:6"}]
clients: [{name: c, requests: 100000, prompt_ids: [1], tokens: 200, ignore_eos: true}]
bounds: {max_duration: 12s}
`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, err := Run(t.Context(), s, testEnv(t, &loopback{}))
	if !errors.Is(err, ErrRun) || !strings.Contains(err.Error(), "bounds.max_duration 12s reached") {
		t.Fatalf("error %v", err)
	}
	if wall := time.Since(start); wall > 40*time.Second {
		t.Errorf("the run took %v past a 12 s bound", wall)
	}
	if res == nil || len(res.Requests) == 0 || res.Tokens == 0 || !slices.ContainsFunc(res.Errors, func(e string) bool { return strings.Contains(e, "max_duration") }) {
		t.Fatalf("results %+v", res)
	}
	if n := res.Nodes[0]; !strings.HasPrefix(n.Exit, "stop") {
		t.Errorf("node %+v", n)
	}
}
