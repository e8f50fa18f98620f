package soak

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// The swarm: stories15M (6 layers) cut twice, at layer 2 and at layer 4,
// so that the ranges overlap; every range has two providers.
var ranges = [][]shards.Stage{
	{{Start: 0, End: 2}, {Start: 2, End: 6}},
	{{Start: 0, End: 4}, {Start: 4, End: 6}},
}

const (
	providers   = 2  // per range
	workers     = 3  // concurrent generations
	maxTokens   = 40 // the longest generation
	maxDown     = 2  // nodes down at once, at most
	stepTimeout = 5 * time.Second
)

// Leak tolerances: a node that was never killed may end with this many
// more goroutines and bytes of RSS than it had after the warm-up. A leak
// of one goroutine, or of one session's KV cache (about 3.5 MB at
// stories15M's 256 positions), per request exceeds them within the CI
// run's hundreds of requests.
func goroutineSlack(base int) int { return max(40, base/4) }
func rssSlack(base int64) int64   { return max(64<<20, base/2) }

var flagDuration = flag.Duration("soak.duration", 0, "length of the chaos phase (default PIPESHARD_SOAK, or 40s)")

// soakDuration is the chaos phase's length: the -soak.duration flag,
// PIPESHARD_SOAK, or 40 s (the CI run, about 100 s with the set-up
// under -race).
func soakDuration(t *testing.T) time.Duration {
	if *flagDuration > 0 {
		return *flagDuration
	}
	s := os.Getenv("PIPESHARD_SOAK")
	if s == "" {
		return 40 * time.Second
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("PIPESHARD_SOAK=%q: want a positive Go duration such as 10m", s)
	}
	return d
}

func soakSeed(t *testing.T) uint64 {
	s := os.Getenv("PIPESHARD_SOAK_SEED")
	if s == "" {
		return 1
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("PIPESHARD_SOAK_SEED=%q: %v", s, err)
	}
	return v
}

func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("the soak test runs a minute; not with -short")
	}
	chaos := soakDuration(t)
	seed := soakSeed(t)
	warm := min(20*time.Second, max(10*time.Second, chaos/10))
	model, tok := testmodel.Stories15M(t)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The store every node's home copies its shard from, and the local
	// reference: the unsplit model.
	var cuts []teststore.Cut
	for _, r := range ranges {
		cuts = append(cuts, teststore.Cut{Ranges: r})
	}
	st, err := teststore.Build(ctx, t.TempDir(), model, tok, cuts...)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	whole, err := ovrt.Compile(st.Weights)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := tokenizer.Load(tok)
	if err != nil {
		t.Fatal(err)
	}
	var prompts [][]int
	for _, s := range []string{"Once upon a time", "One day, a little girl named Lily", "The big brown dog", "Tom and his mom went to the park", "There was a tiny bird"} {
		prompts = append(prompts, tk.Encode(s, true))
	}
	want := make([][]int, len(prompts))
	for i, p := range prompts {
		l, err := generate.NewLocal(sample.Params{}, whole)
		if err != nil {
			t.Fatal(err)
		}
		r, err := generate.Run(ctx, l, p, generate.Options{MaxTokens: maxTokens, IgnoreEOS: true, Context: st.Manifest.Config.Context})
		if err != nil {
			t.Fatal(err)
		}
		want[i] = r.IDs
	}

	bin := buildBinary(t)

	// Eight nodes: two per range, the first the others' bootstrap.
	sw := &swarmProcs{t: t, bin: bin}
	t.Cleanup(sw.killAll)
	base := t.TempDir()
	var shardsOf []shards.ShardRef
	for _, l := range st.Cuts {
		shardsOf = append(shardsOf, l.Shards...)
	}
	for i, sh := range shardsOf {
		stage := sh.Stage()
		for j := range providers {
			home := filepath.Join(base, fmt.Sprintf("n%d%c", i, 'a'+j))
			copyTo(t, st.Store, home, sh.CID, st.MC.String(), st.Manifest.Tokenizer.CID)
			n := &nodeProc{name: filepath.Base(home), home: home, shard: sh.CID, stage: stage.String(), rangeIdx: i, port: "0"}
			sw.nodes = append(sw.nodes, n)
			var boot []string
			if len(sw.nodes) > 1 {
				boot = sw.nodes[0].addrs
			}
			if err := sw.start(n, boot); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Logf("%d nodes up; chaos %v after a %v warm-up, seed %d", len(sw.nodes), chaos, warm, seed)

	var boot []string
	for _, n := range sw.nodes {
		boot = append(boot, n.addrs...)
	}
	log := slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := swarm.New(ctx, swarm.Config{Home: filepath.Join(base, "client"), Bootstrap: boot, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.Resolve(ctx, st.MC)
	if err != nil {
		t.Fatal(err)
	}
	waitProviders(ctx, t, c, m, len(sw.nodes))

	// The load: workers generating until told to stop.
	ld := &load{c: c, m: m, prompts: prompts, want: want, failures: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { ld.run(ctx, t, rand.New(rand.NewPCG(seed, uint64(w)+100)), stop) })
	}
	stopLoad := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer stopLoad()

	sleepCtx(ctx, warm)
	before := sw.sample(t)

	rng := rand.New(rand.NewPCG(seed, 1))
	witnesses := sw.pickWitnesses(rng)
	cs := sw.chaos(ctx, t, rng, chaos, witnesses)

	stopLoad()
	// Let closed sessions and connections wind down before the last sample.
	sleepCtx(ctx, 5*time.Second)
	after := sw.sample(t)

	// The figures.
	ld.mu.Lock()
	defer ld.mu.Unlock()
	t.Logf("requests %d: %d correct, %d failed %v; %d tokens; %d failovers", ld.requests, ld.correct, ld.failed, ld.failures, ld.tokens, len(ld.recovery))
	t.Logf("kills %d, restarts %d; restart to serving: %s", cs.kills, len(cs.restart), summarize(cs.restart))
	t.Logf("failover detect: %s", summarize(ld.detect))
	t.Logf("failover recovery: %s", summarize(ld.recovery))
	t.Logf("%-5s %-8s %-9s %-21s %-21s %-17s", "node", "range", "killed", "goroutines warm→end", "RSS MiB warm→end", "threads warm→end")
	for _, n := range sw.nodes {
		b, a := before[n.name], after[n.name]
		g := fmt.Sprintf("%d → %d", b.goroutines, a.goroutines)
		t.Logf("%-5s %-8s %-9d %-21s %-21s %-17s", n.name, n.stage, n.kills, g,
			fmt.Sprintf("%.1f → %.1f", float64(b.rss)/(1<<20), float64(a.rss)/(1<<20)), fmt.Sprintf("%d → %d", b.threads, a.threads))
	}

	// The assertions.
	if ld.wrong > 0 {
		t.Errorf("%d requests produced tokens that differ from the local run", ld.wrong)
	}
	if ld.untyped > 0 {
		t.Errorf("%d requests failed with an untyped error (see the log)", ld.untyped)
	}
	if ld.correct == 0 {
		t.Error("no request completed")
	}
	if ld.failed*10 > ld.requests {
		t.Errorf("%d of %d requests failed: failures must be rare", ld.failed, ld.requests)
	}
	if cs.kills == 0 {
		t.Error("the chaos loop killed no node")
	}
	survivors := 0
	for _, n := range sw.nodes {
		if n.kills > 0 {
			continue
		}
		survivors++
		b, a := before[n.name], after[n.name]
		if a.goroutines > b.goroutines+goroutineSlack(b.goroutines) {
			t.Errorf("%s: goroutines grew from %d to %d", n.name, b.goroutines, a.goroutines)
		}
		if a.rss > b.rss+rssSlack(b.rss) {
			t.Errorf("%s: RSS grew from %d to %d bytes", n.name, b.rss, a.rss)
		}
	}
	if survivors == 0 {
		t.Error("no node survived to be checked for leaks")
	}
}

// load runs generations and counts what they give.
type load struct {
	c       *swarm.Client
	m       *shards.Manifest
	prompts [][]int
	want    [][]int

	mu                                                sync.Mutex
	requests, correct, failed, wrong, untyped, tokens int
	failures                                          map[string]int // by error name
	detect, recovery                                  []time.Duration
}

func (l *load) run(ctx context.Context, t *testing.T, rng *rand.Rand, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		i := rng.IntN(len(l.prompts))
		n := 8 + rng.IntN(maxTokens-8+1)
		got, fos, err := l.one(ctx, l.prompts[i], n)
		l.mu.Lock()
		l.requests++
		for _, fo := range fos {
			l.detect = append(l.detect, fo.Detect)
			l.recovery = append(l.recovery, fo.Recovery)
		}
		switch {
		case err != nil:
			l.failed++
			name := errorName(err)
			l.failures[name]++
			if name == "untyped" {
				l.untyped++
			}
			t.Logf("request failed (%s): %v", name, err)
		case !slices.Equal(got, l.want[i][:n]):
			l.wrong++
			t.Logf("prompt %d, %d tokens:\n got %v\nwant %v\nfailovers %+v", i, n, got, l.want[i][:n], fos)
		default:
			l.correct++
			l.tokens += n
		}
		l.mu.Unlock()
	}
}

// one generates n tokens after prompt through a route that fails over.
func (l *load) one(ctx context.Context, prompt []int, n int) ([]int, []swarm.Failover, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	hops, _, provs, err := l.c.FindRoute(ctx, l.m, nil)
	if err != nil {
		return nil, nil, err
	}
	opts := swarm.SessionOptions{ModelID: l.m.ModelID, Vocab: l.m.Config.Vocab, MaxLen: l.m.Config.Context, Timeout: stepTimeout}
	r, err := l.c.OpenResilient(ctx, l.m, provs, hops, opts, swarm.FailoverOptions{Probe: time.Second})
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	res, err := generate.Run(ctx, r, prompt, generate.Options{MaxTokens: n, IgnoreEOS: true, Context: l.m.Config.Context})
	return res.IDs, r.Failovers(), err
}

// errorName names err by the first typed error it wraps, or "untyped".
func errorName(err error) string {
	for _, e := range []struct {
		name string
		err  error
	}{
		{"swarm.ErrFailover", swarm.ErrFailover},
		{"swarm.ErrNoRoute", swarm.ErrNoRoute},
		{"swarm.ErrNotFound", swarm.ErrNotFound},
		{"wire.ErrOverloaded", wire.ErrOverloaded},
		{"wire.ErrLimit", wire.ErrLimit},
		{"wire.ErrDraining", wire.ErrDraining},
		{"wire.ErrNextHop", wire.ErrNextHop},
		{"swarm.ErrSession", swarm.ErrSession},
		{"context.DeadlineExceeded", context.DeadlineExceeded},
	} {
		if errors.Is(err, e.err) {
			return e.name
		}
	}
	var we *wire.Error
	if errors.As(err, &we) {
		return "wire.Error"
	}
	return "untyped"
}

// nodeProc is one node: its home, and its current process.
type nodeProc struct {
	name     string
	home     string
	shard    string
	stage    string // its layers, for the figures
	rangeIdx int
	port     string // TCP port, kept across restarts

	cmd     *exec.Cmd
	done    chan struct{}
	addrs   []string
	metrics string // host:port of its Prometheus metrics (--metrics)
	up      bool
	kills   int
}

type swarmProcs struct {
	t     *testing.T
	bin   string
	mu    sync.Mutex
	nodes []*nodeProc
}

// start runs n's process and waits until it serves.
func (sw *swarmProcs) start(n *nodeProc, boot []string) error {
	addrFile := filepath.Join(n.home, "addr.json")
	os.Remove(addrFile)
	args := []string{"node", "--home", n.home, "--shard", n.shard, "--listen", "/ip4/127.0.0.1/tcp/" + n.port,
		"--threads", "1", "--addr-file", addrFile, "--drain-timeout", "0s", "--log-level", "warn"}
	if len(boot) > 0 {
		args = append(args, "--bootstrap", strings.Join(boot, ","))
	}
	logf, err := os.OpenFile(filepath.Join(n.home, "node.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	n.metrics = freeAddr(sw.t)
	args = append(args, "--metrics", n.metrics)
	cmd := exec.Command(sw.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	sw.mu.Lock()
	n.cmd, n.done = cmd, done
	sw.mu.Unlock()
	deadline := time.After(60 * time.Second)
	for {
		if b, err := os.ReadFile(addrFile); err == nil && json.Valid(b) {
			var info struct {
				Addrs []string `json:"addrs"`
			}
			if err := json.Unmarshal(b, &info); err != nil {
				return err
			}
			sw.mu.Lock()
			n.addrs, n.up = info.Addrs, true
			sw.mu.Unlock()
			if n.port == "0" {
				n.port = tcpPort(info.Addrs)
			}
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("node %s exited before serving: %v; log:\n%s", n.name, cmd.ProcessState, tail(filepath.Join(n.home, "node.log")))
		case <-deadline:
			return fmt.Errorf("node %s did not start; log:\n%s", n.name, tail(filepath.Join(n.home, "node.log")))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill SIGKILLs n's process group and waits for it.
func (sw *swarmProcs) kill(n *nodeProc) {
	sw.mu.Lock()
	cmd, done := n.cmd, n.done
	n.up = false
	sw.mu.Unlock()
	if cmd == nil {
		return
	}
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// killAll ends every process, whatever the test's outcome.
func (sw *swarmProcs) killAll() {
	for _, n := range sw.nodes {
		sw.kill(n)
	}
}

// pickWitnesses chooses two nodes of different ranges that are never
// killed, so that some nodes live through the whole run.
func (sw *swarmProcs) pickWitnesses(rng *rand.Rand) map[*nodeProc]bool {
	order := rng.Perm(len(sw.nodes))
	w := map[*nodeProc]bool{}
	seen := map[int]bool{}
	for _, i := range order {
		n := sw.nodes[i]
		if !seen[n.rangeIdx] && len(w) < 2 {
			w[n], seen[n.rangeIdx] = true, true
		}
	}
	return w
}

type chaosStats struct {
	kills   int
	restart []time.Duration
}

// chaos kills a random node every 1 to 4 s for d, and restarts each
// after 1 to 5 s down, on its home and port. A node is a candidate when
// it is up, no witness, and the other provider of its range is up; at
// most maxDown nodes are down at once.
func (sw *swarmProcs) chaos(ctx context.Context, t *testing.T, rng *rand.Rand, d time.Duration, witnesses map[*nodeProc]bool) chaosStats {
	var cs chaosStats
	var mu sync.Mutex
	var wg sync.WaitGroup
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		sleepCtx(ctx, time.Duration(1000+rng.IntN(3000))*time.Millisecond)
		if time.Now().After(end) {
			break
		}
		sw.mu.Lock()
		var cands []*nodeProc
		down := 0
		upIn := map[int]int{}
		for _, n := range sw.nodes {
			if n.up {
				upIn[n.rangeIdx]++
			} else {
				down++
			}
		}
		for _, n := range sw.nodes {
			if n.up && !witnesses[n] && upIn[n.rangeIdx] >= 2 {
				cands = append(cands, n)
			}
		}
		sw.mu.Unlock()
		if down >= maxDown || len(cands) == 0 {
			continue
		}
		v := cands[rng.IntN(len(cands))]
		downFor := time.Duration(1000+rng.IntN(4000)) * time.Millisecond
		sw.kill(v)
		v.kills++
		cs.kills++
		t.Logf("%v: killed %s, down for %v", time.Until(end).Round(time.Second), v.name, downFor)
		wg.Go(func() {
			sleepCtx(ctx, downFor)
			if ctx.Err() != nil {
				return
			}
			var boot []string
			sw.mu.Lock()
			for _, n := range sw.nodes {
				if n.up {
					boot = append(boot, n.addrs...)
				}
			}
			sw.mu.Unlock()
			t0 := time.Now()
			err := sw.start(v, boot)
			if err != nil {
				// The port may be taken after all: any port will do.
				t.Logf("restart %s on port %s: %v; trying any port", v.name, v.port, err)
				v.port = "0"
				t0 = time.Now()
				err = sw.start(v, boot)
			}
			if err != nil {
				t.Errorf("restart %s: %v", v.name, err)
				return
			}
			mu.Lock()
			cs.restart = append(cs.restart, time.Since(t0))
			mu.Unlock()
		})
	}
	wg.Wait()
	return cs
}

// figures are one sample of a node's process.
type figures struct {
	goroutines int
	rss        int64
	threads    int
}

// sample reads every live node's figures.
func (sw *swarmProcs) sample(t *testing.T) map[string]figures {
	out := map[string]figures{}
	sw.mu.Lock()
	defer sw.mu.Unlock()
	for _, n := range sw.nodes {
		if !n.up {
			continue
		}
		var f figures
		f.rss, f.threads = procStatus(t, n.cmd.Process.Pid)
		f.goroutines = goroutines(t, n.metrics)
		out[n.name] = f
	}
	return out
}

// procStatus reads VmRSS (bytes) and Threads from /proc/PID/status.
func procStatus(t *testing.T, pid int) (rss int64, threads int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Errorf("read status of %d: %v", pid, err)
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fs := strings.Fields(v)
		if len(fs) == 0 {
			continue
		}
		switch k {
		case "VmRSS":
			kb, _ := strconv.ParseInt(fs[0], 10, 64)
			rss = kb << 10
		case "Threads":
			threads, _ = strconv.Atoi(fs[0])
		}
	}
	return rss, threads
}

// goroutines reads a node's goroutine count from its Prometheus
// metrics: the Go collector's gauge, a line "go_goroutines N".
func goroutines(t *testing.T, addr string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Errorf("goroutines of %s: %v", addr, err)
		return 0
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			if n, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return int(n)
			}
		}
	}
	t.Errorf("goroutines of %s: no go_goroutines in /metrics", addr)
	return 0
}

// waitProviders waits until discovery finds n providers that answer.
func waitProviders(ctx context.Context, t *testing.T, c *swarm.Client, m *shards.Manifest, n int) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, _, provs, err := c.FindRoute(ctx, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		live := 0
		for _, p := range provs {
			if p.RTT > 0 {
				live++
			}
		}
		if live >= n {
			return
		}
		if !sleepCtx(ctx, 500*time.Millisecond) {
			t.Fatalf("discovery found %d of %d providers", live, n)
		}
	}
}

// buildBinary builds the pipeshard command.
func buildBinary(t *testing.T) string {
	bin := filepath.Join(t.TempDir(), "pipeshard")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/pipeshard/pipeshard").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// copyTo puts the given stored files into the store of home.
func copyTo(t *testing.T, from *shards.Store, home string, cids ...string) {
	st, err := shards.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range cids {
		var b bytes.Buffer
		if err := from.Blocks.Export(context.Background(), cid.MustParse(s), &b); err != nil {
			t.Fatal(err)
		}
		if got, err := st.Blocks.AddFile(context.Background(), &b, nil); err != nil || got.String() != s {
			t.Fatalf("copy %s: got %s, %v", s, got, err)
		}
	}
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// tcpPort returns the port of the first /tcp/ address.
func tcpPort(addrs []string) string {
	for _, a := range addrs {
		if _, p, ok := strings.Cut(a, "/tcp/"); ok {
			p, _, _ = strings.Cut(p, "/")
			return p
		}
	}
	return "0"
}

// tail returns the end of a log file.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// testWriter sends the client's log lines to the test log, until the
// test ends.
type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func newTestWriter(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// sleepCtx sleeps for d, or until ctx ends (then false).
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-ctx.Done():
		return false
	}
}

// summarize gives count, median and max of ds.
func summarize(ds []time.Duration) string {
	if len(ds) == 0 {
		return "none"
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("n=%d median %v p90 %v max %v", len(s), s[len(s)/2].Round(time.Millisecond), s[len(s)*9/10].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}
