package swarm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/swarm"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// pipeshardBinary builds the pipeshard command once per test run.
func pipeshardBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pipeshard-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "pipeshard")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/pipeshard/pipeshard").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// nodeProc is a `pipeshard node` process.
type nodeProc struct {
	cmd   *exec.Cmd
	ID    string
	Addrs []string
}

// startNodeProc runs `pipeshard node` on loopback with home prepared to
// hold shard, and waits for its start line.
func startNodeProc(t *testing.T, bin, home, shard string, boot []string, extra ...string) *nodeProc {
	t.Helper()
	addrFile := filepath.Join(home, "addr.json")
	args := []string{"node", "--home", home, "--shard", shard, "--listen", "/ip4/127.0.0.1/tcp/0", "--threads", "1", "--addr-file", addrFile}
	args = append(args, extra...)
	for _, b := range boot {
		args = append(args, "--bootstrap", b)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stderr = &testWriter{t: t, prefix: filepath.Base(home) + ": "}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &nodeProc{cmd: cmd}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		b, err := os.ReadFile(addrFile)
		if err == nil && json.Valid(b) {
			var start struct {
				PeerID string   `json:"peer_id"`
				Addrs  []string `json:"addrs"`
			}
			if err := json.Unmarshal(b, &start); err != nil {
				t.Fatal(err)
			}
			p.ID, p.Addrs = start.PeerID, start.Addrs
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s did not start", home)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testWriter sends a process's log lines to the test log.
type testWriter struct {
	t      *testing.T
	prefix string
	mu     sync.Mutex
	done   bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(w.prefix + string(p))
	}
	return len(p), nil
}

// TestFailoverKilledNode runs a 2-stage route whose second stage has two
// providers, each a `pipeshard node` process. Mid-generation the process
// serving the route's second hop is killed (SIGKILL) or stopped
// (SIGSTOP: a stalled node that keeps its connections), or told to drain
// (SIGTERM: it hands its sessions over and exits). The client routes
// around it, replays the sequence to the other provider and goes on; its
// greedy output equals an uninterrupted local run's.
func TestFailoverKilledNode(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
	}{
		{"killed", syscall.SIGKILL},
		{"stalled", syscall.SIGSTOP},
		{"drained", syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) { testFailover(t, tc.sig) })
	}
}

func testFailover(t *testing.T, sig syscall.Signal) {
	f := getFixture(t)
	bin := pipeshardBinary(t)
	l := f.layouts[2]
	base := t.TempDir()
	prep := func(name, shard string) string {
		home := filepath.Join(base, name)
		f.copyTo(t, home, shard, f.mc.String(), f.manifest.Tokenizer.CID)
		return home
	}
	first := startNodeProc(t, bin, prep("n0", l.Shards[0].CID), l.Shards[0].CID, nil)
	procs := map[string]*nodeProc{first.ID: first}
	for _, name := range []string{"n1a", "n1b"} {
		p := startNodeProc(t, bin, prep(name, l.Shards[1].CID), l.Shards[1].CID, first.Addrs, "--drain-timeout", "0s")
		procs[p.ID] = p
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := swarm.New(ctx, swarm.Config{Home: filepath.Join(base, "client"), Bootstrap: first.Addrs, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.Resolve(ctx, f.mc)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until both providers of the second shard are known, so the
	// failover has somewhere to go without a new search.
	var hops []swarm.Hop
	var provs []swarm.Provider
	for {
		hops, _, provs, err = c.FindRoute(ctx, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range provs {
			if p.Shard.CID == l.Shards[1].CID && p.RTT > 0 {
				n++
			}
		}
		if n == 2 && len(hops) == 2 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A stalled node is noticed by the step timeout.
	opts := swarm.SessionOptions{ModelID: m.ModelID, Vocab: m.Config.Vocab, MaxLen: m.Config.Context, Timeout: 5 * time.Second}
	r, err := c.OpenResilient(ctx, m, provs, hops, opts, swarm.FailoverOptions{Probe: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	victim := procs[hops[1].Peer.ID.String()]
	prompt := []int{1, 450, 8338, 265}
	const n, killAt = 40, 12
	tokens := 0
	got, err := generate.Run(ctx, r, prompt, generate.Options{MaxTokens: n, IgnoreEOS: true, Context: m.Config.Context,
		OnToken: func(int) {
			if tokens++; tokens == killAt {
				t.Logf("signal %v to %s", sig, victim.ID)
				victim.cmd.Process.Signal(sig)
			}
		}})
	if sig == syscall.SIGSTOP {
		victim.cmd.Process.Signal(syscall.SIGCONT) // let cleanup kill it
	}
	if err != nil {
		t.Fatal(err)
	}
	if sig == syscall.SIGTERM {
		// A drained node exits by itself, and tells its client why.
		exited := make(chan error, 1)
		go func() { exited <- victim.cmd.Wait() }()
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			t.Fatal("the drained node did not exit")
		}
		// The client hears ErrDraining, or, when a forward was already
		// on its way to the node as it handed over and exited, that the
		// hop is gone: either way it moves without an error.
		if fos := r.Failovers(); len(fos) != 1 || !strings.Contains(fos[0].Cause, "draining") && !strings.Contains(fos[0].Cause, "next hop unreachable") {
			t.Fatalf("failovers %+v: want one, caused by the drain", fos)
		}
	}
	want := localIDs(t, f, prompt, n, sample.Params{})
	if !slices.Equal(got.IDs, want) {
		t.Fatalf("after failover:\n got %v\nwant %v", got.IDs, want)
	}
	fos := r.Failovers()
	if len(fos) != 1 {
		t.Fatalf("%d failovers, want 1: %+v", len(fos), fos)
	}
	fo := fos[0]
	if !slices.Contains(fo.Dropped, victim.ID) || fo.Route[1].Peer.ID.String() == victim.ID {
		t.Fatalf("failover kept the victim %s: %+v", victim.ID, fo)
	}
	// The failed step is the first after the signal (or, as the signal
	// lands asynchronously, a later one); everything before it is
	// replayed.
	if fo.Pos < len(prompt)+killAt-1 || fo.Replayed != fo.Pos {
		t.Errorf("failed at %d and replayed %d tokens; want a failure at %d or later, replaying all before it", fo.Pos, fo.Replayed, len(prompt)+killAt-1)
	}
	t.Logf("failure noticed after %v; recovered at position %d in %v (replayed %d tokens); cause: %s", fo.Detect, fo.Pos, fo.Recovery, fo.Replayed, fo.Cause)
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: %w", swarm.ErrSession, wire.NewError(wire.SessionID{}, 1, 0, wire.ErrNextHop)), true},
		{fmt.Errorf("%w: %w", swarm.ErrSession, wire.NewError(wire.SessionID{}, 1, 1, wire.ErrDraining)), true},
		{fmt.Errorf("%w: %w", swarm.ErrSession, wire.NewError(wire.SessionID{}, 1, 1, wire.ErrEvicted)), true},
		{fmt.Errorf("%w: no result for step 3 within 5s", swarm.ErrSession), true},
		{fmt.Errorf("%w: %w", swarm.ErrSession, wire.NewError(wire.SessionID{}, 1, 0, wire.ErrPosition)), false},
		{fmt.Errorf("%w: %w", swarm.ErrSession, wire.NewError(wire.SessionID{}, 1, 0, wire.ErrTokenRange)), false},
		{fmt.Errorf("%w: %w", swarm.ErrSession, wire.NewError(wire.SessionID{}, 1, 0, wire.ErrContextFull)), false},
		{context.Canceled, false},
		{errors.New("something else"), false},
	} {
		if got := swarm.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
