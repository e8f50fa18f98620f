package scenario

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startLine is what `pipeshard node --json` prints once it serves.
type startLine struct {
	PeerID string   `json:"peer_id"`
	Addrs  []string `json:"addrs"`
	Layers []int    `json:"layers"`
	Shard  string   `json:"shard"`
}

// nodeProc is one process of a node.
type nodeProc struct {
	host   Host
	cmd    *exec.Cmd
	info   startLine
	done   chan struct{} // closed when the process has exited
	err    error         // Wait's, once done
	asked  string        // "kill" or "stop" when the run ended it
	cancel context.CancelFunc
}

// lineWriter passes the first line written to it to first (once) and
// everything to rest.
type lineWriter struct {
	mu    sync.Mutex
	buf   []byte
	first chan []byte
	rest  io.Writer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.first != nil {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.first <- w.buf[:i]
			w.first = nil
		} else if len(w.buf) > 1<<16 {
			w.first <- w.buf
			w.first = nil
		}
	}
	return w.rest.Write(p)
}

// liveAddrs returns the addresses of every running node.
func (r *runner) liveAddrs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for n, p := range r.procs {
		if p.info.PeerID != "" && !isDone(p.done) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		out = append(out, r.procs[n].info.Addrs...)
	}
	return out
}

func isDone(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// nodeResult returns the node's entry of the results.
func (r *runner) nodeResult(name string) *NodeResult {
	for i := range r.res.Nodes {
		if r.res.Nodes[i].Name == name {
			return &r.res.Nodes[i]
		}
	}
	return nil
}

// startNode starts host h's node process and waits for its start line.
func (r *runner) startNode(ctx context.Context, h Host) error {
	g := r.sc.Nodes[h.GroupIndex]
	home := filepath.Join(r.env.WorkDir, "nodes", h.Name)
	if err := os.MkdirAll(home, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrRun, err)
	}
	if !g.Fetch {
		// Every start: a home left by an earlier run may lack this
		// run's shards. Files already there are kept.
		if err := linkTree(filepath.Join(r.cacheDir(), "store"), filepath.Join(home, "store")); err != nil {
			return fmt.Errorf("%w: node %s: preloading its store: %w", ErrRun, h.Name, err)
		}
	}
	args := []string{"node", "--home", home, "--listen", r.listenAddr(h.Index), "--threads", strconv.Itoa(g.Cores),
		"--json", "--log-level", r.env.NodeLogLevel}
	if h.Stage != nil {
		st, _ := checkStage(*h.Stage, r.shape)
		c, ok := r.shards[st]
		if !ok {
			return fmt.Errorf("%w: node %s: no shard for range %v", ErrRun, h.Name, st)
		}
		args = append(args, "--shard", c)
	} else {
		args = append(args, "--model", r.res.Model, "--layers", "auto")
	}
	if boot := r.liveAddrs(); len(boot) > 0 {
		args = append(args, "--bootstrap", strings.Join(boot, ","))
	}
	if g.Memory > 0 {
		args = append(args, "--max-memory", strconv.FormatInt(int64(g.Memory), 10))
	}
	logf, err := os.OpenFile(filepath.Join(r.env.WorkDir, "logs", h.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrRun, err)
	}
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	cmd := r.env.Net.Command(pctx, h.Index, r.env.Binary, args...)
	if g.CPUs != "" {
		cmd = r.env.Net.Command(pctx, h.Index, "taskset", append([]string{"-c", g.CPUs, r.env.Binary}, args...)...)
	}
	cmd.Env = childEnv(map[string]string{"PIPESHARD_HOME": home, "GOMAXPROCS": strconv.Itoa(g.Cores)})
	first := make(chan []byte, 1)
	fmt.Fprintf(logf, "--- %s: pipeshard %s\n", r.env.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	cmd.Stdout = &lineWriter{first: first, rest: logf}
	cmd.Stderr = logf
	cmd.WaitDelay = 5 * time.Second
	dieWithParent(cmd)
	p := &nodeProc{host: h, cmd: cmd, done: make(chan struct{}), cancel: cancel}
	started := r.env.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		logf.Close()
		return fmt.Errorf("%w: node %s: %w", ErrRun, h.Name, err)
	}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		cancel()
		r.exited(p)
		close(p.done)
	}()
	r.mu.Lock()
	r.procs[h.Name] = p
	r.all = append(r.all, p)
	r.startedAt[h.Name] = append(r.startedAt[h.Name], started)
	r.mu.Unlock()
	abandon := func() {
		r.mu.Lock()
		p.asked = "start abandoned"
		r.mu.Unlock()
		cancel()
	}
	timer := time.NewTimer(r.env.StartTimeout)
	defer timer.Stop()
	var line []byte
	select {
	case line = <-first:
	case <-p.done:
		return fmt.Errorf("%w: node %s exited before it served (%v): %s", ErrRun, h.Name, p.err, r.logTail(h.Name))
	case <-timer.C:
		abandon()
		return fmt.Errorf("%w: node %s printed no start line within %v: %s", ErrRun, h.Name, r.env.StartTimeout, r.logTail(h.Name))
	case <-ctx.Done():
		abandon()
		return context.Cause(ctx)
	}
	var info startLine
	if err := json.Unmarshal(line, &info); err != nil || info.PeerID == "" || len(info.Addrs) == 0 {
		abandon()
		return fmt.Errorf("%w: node %s: start line %q", ErrRun, h.Name, line)
	}
	r.mu.Lock()
	p.info = info
	if nr := r.nodeResult(h.Name); nr != nil {
		nr.PeerID = info.PeerID
		if len(info.Layers) == 2 {
			nr.Layers = fmt.Sprintf("%d:%d", info.Layers[0], info.Layers[1])
			if h.Stage != nil {
				nr.Layers = h.Stage.String()
			}
		}
		if info.Shard != "" {
			nr.Shard = info.Shard
		}
		if !r.t0.IsZero() {
			nr.Starts = append(nr.Starts, r.since(started))
		} else {
			nr.Starts = append(nr.Starts, 0) // set once t0 is known
		}
	}
	r.mu.Unlock()
	r.env.Log.Info("node up", "node", h.Name, "peer", info.PeerID, "layers", info.Layers)
	return nil
}

// exited records how a node's process ended.
func (r *runner) exited(p *nodeProc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	nr := r.nodeResult(p.host.Name)
	if nr == nil {
		return
	}
	exit := "exited"
	if p.err != nil {
		exit = p.err.Error()
	}
	if p.asked != "" {
		exit = p.asked + ": " + exit
	} else if !r.t0.IsZero() && !r.stopping {
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("node %s died unasked at %.1fs: %s", p.host.Name, r.since(r.env.Now()), exit))
	}
	nr.Exit = exit
	if !r.t0.IsZero() {
		nr.Stops = append(nr.Stops, r.since(r.env.Now()))
	}
}

func (r *runner) logTail(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.env.WorkDir, "logs", name+".log"))
	return tail(string(b))
}

// signal ends node name's process: SIGKILL for "kill", SIGTERM (then
// SIGKILL after StopTimeout) for "stop". It waits for the exit.
func (r *runner) signal(name, action string) error {
	r.mu.Lock()
	p := r.procs[name]
	if p != nil {
		p.asked = action
	}
	r.mu.Unlock()
	if p == nil || isDone(p.done) {
		return fmt.Errorf("%w: %s %s: not running", ErrRun, action, name)
	}
	sig := syscall.SIGTERM
	if action == "kill" {
		sig = syscall.SIGKILL
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%w: %s %s: %w", ErrRun, action, name, err)
	}
	select {
	case <-p.done:
	case <-time.After(r.env.StopTimeout):
		p.cancel()
		<-p.done
	}
	return nil
}

// stopAll ends every node still running, gracefully, in parallel, and
// waits for every process the run started to be gone.
func (r *runner) stopAll() {
	r.mu.Lock()
	r.stopping = true
	var names []string
	for n, p := range r.procs {
		if !isDone(p.done) {
			names = append(names, n)
		}
	}
	all := append([]*nodeProc(nil), r.all...)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, n := range names {
		wg.Go(func() { r.signal(n, "stop") })
	}
	wg.Wait()
	for _, p := range all {
		select {
		case <-p.done:
		case <-time.After(r.env.StopTimeout):
			p.cancel()
			<-p.done
		}
	}
}

// churn applies the scenario's events at their times after t0. Each
// node's events are applied in order, one after another (a start waits
// for the start line); different nodes' events do not wait for each
// other.
func (r *runner) churn(ctx context.Context) {
	evs := append([]Event(nil), r.sc.Churn...)
	sort.SliceStable(evs, func(a, b int) bool { return evs[a].At < evs[b].At })
	hosts := map[string]Host{}
	for _, h := range r.hosts {
		hosts[h.Name] = h
	}
	byNode := map[string][]Event{}
	var order []string
	for _, e := range evs {
		name, _ := e.Node()
		if byNode[name] == nil {
			order = append(order, name)
		}
		byNode[name] = append(byNode[name], e)
	}
	var wg sync.WaitGroup
	for _, name := range order {
		wg.Go(func() { r.churnNode(ctx, hosts[name], byNode[name]) })
	}
	wg.Wait()
	r.mu.Lock()
	sort.SliceStable(r.res.Churn, func(a, b int) bool { return r.res.Churn[a].At < r.res.Churn[b].At })
	r.mu.Unlock()
}

func (r *runner) churnNode(ctx context.Context, h Host, evs []Event) {
	for i, e := range evs {
		_, action := e.Node()
		t := time.NewTimer(max(time.Until(r.t0.Add(e.At.D())), 0))
		select {
		case <-ctx.Done():
			t.Stop()
			r.mu.Lock()
			for _, e := range evs[i:] {
				name, action := e.Node()
				r.res.Churn = append(r.res.Churn, ChurnResult{At: e.At.D().Seconds(), Node: name, Action: action, Error: "not reached: the load ended first"})
			}
			r.mu.Unlock()
			return
		case <-t.C:
		}
		cr := ChurnResult{At: e.At.D().Seconds(), T: r.since(r.env.Now()), Node: h.Name, Action: action}
		r.env.Log.Info("churn", "t", e.At, "action", action, "node", h.Name)
		var err error
		if action == "start" {
			err = r.startNode(ctx, h)
		} else {
			err = r.signal(h.Name, action)
		}
		if err != nil {
			cr.Error = err.Error()
			r.env.Log.Warn("churn failed", "node", h.Name, "action", action, "err", err)
		}
		r.mu.Lock()
		r.res.Churn = append(r.res.Churn, cr)
		if err != nil {
			r.res.Errors = append(r.res.Errors, fmt.Sprintf("churn: %s %s at %v: %v", action, h.Name, e.At, err))
		}
		r.mu.Unlock()
	}
}

// phases runs the in-flight sweep: one phase per value, every client
// host running one client process per phase.
func (r *runner) phases(ctx context.Context) error {
	n := 1
	for _, c := range r.sc.Clients {
		n = max(n, len(c.InFlight), len(c.Args))
	}
	for p := range n {
		pr := PhaseResult{Phase: p, InFlight: map[string]int{}}
		var labels []string
		for _, c := range r.sc.Clients {
			k := c.InFlight[min(p, len(c.InFlight)-1)]
			pr.InFlight[c.Name] = k
			labels = append(labels, fmt.Sprintf("%s:%d", c.Name, k))
		}
		pr.Label = strings.Join(labels, " ") + " in flight"
		if len(r.sc.Clients) == 1 {
			pr.Label = fmt.Sprintf("%d in flight", pr.InFlight[r.sc.Clients[0].Name])
			// Args that sweep name the phase; the same for all do not.
			if a := r.sc.Clients[0].Args; len(a) > 1 {
				pr.Label += " " + strings.Join(a[min(p, len(a)-1)], " ")
			}
		}
		r.mu.Lock()
		r.res.Phases = append(r.res.Phases, pr)
		r.mu.Unlock()
		r.env.Log.Info("phase", "n", p, "of", n, "load", pr.Label)
		if r.env.BeforePhase != nil {
			if err := r.env.BeforePhase(ctx, p); err != nil {
				return err
			}
		}
		var wg sync.WaitGroup
		for _, h := range r.hosts {
			if h.Client {
				wg.Go(func() { r.client(ctx, h, p) })
			}
		}
		wg.Wait()
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
	}
	return nil
}

// client runs one client process for phase p and collects its records.
func (r *runner) client(ctx context.Context, h Host, p int) {
	c := r.sc.Clients[h.GroupIndex]
	k := c.InFlight[min(p, len(c.InFlight)-1)]
	home := filepath.Join(r.env.WorkDir, "clients", h.Name)
	fail := func(err error) {
		r.mu.Lock()
		r.res.Errors = append(r.res.Errors, fmt.Sprintf("client %s, phase %d: %v", h.Name, p, err))
		r.mu.Unlock()
		r.env.Log.Warn("client failed", "client", h.Name, "phase", p, "err", err)
	}
	if err := os.MkdirAll(home, 0o755); err != nil {
		fail(err)
		return
	}
	args := []string{"sim", "client", "--json", "--home", home, "--listen", r.listenAddr(h.Index),
		"--model", r.res.Model, "--bootstrap", strings.Join(r.liveAddrs(), ","),
		"--in-flight", strconv.Itoa(k), "--requests", strconv.Itoa(c.Requests), "--duration", c.Duration.D().String(),
		"-n", strconv.Itoa(c.Tokens), "--timeout", c.Timeout.D().String(), "--log-level", r.env.NodeLogLevel,
		"--temp", strconv.FormatFloat(c.Sampling.Temp, 'g', -1, 64), "--top-p", strconv.FormatFloat(c.Sampling.TopP, 'g', -1, 64),
		"--top-k", strconv.Itoa(c.Sampling.TopK), "--seed", strconv.FormatUint(c.Sampling.Seed, 10)}
	if c.IgnoreEOS {
		args = append(args, "--ignore-eos")
	}
	if len(c.Args) > 0 {
		args = append(args, c.Args[min(p, len(c.Args)-1)]...)
	}
	if len(c.PromptIDs) > 0 {
		ids := make([]string, len(c.PromptIDs))
		for i, id := range c.PromptIDs {
			ids[i] = strconv.Itoa(id)
		}
		args = append(args, "--prompt-ids", strings.Join(ids, ","))
	} else {
		args = append(args, "--prompt", c.Prompt)
	}
	logName := fmt.Sprintf("%s.phase%d", h.Name, p)
	logf, err := os.Create(filepath.Join(r.env.WorkDir, "logs", logName+".log"))
	if err != nil {
		fail(err)
		return
	}
	defer logf.Close()
	fmt.Fprintf(logf, "--- %s: pipeshard %s\n", r.env.Now().Format(time.RFC3339Nano), strings.Join(args, " "))
	pr, pw := io.Pipe()
	cmd := r.env.Net.Command(ctx, h.Index, r.env.Binary, args...)
	cmd.Env = childEnv(map[string]string{"PIPESHARD_HOME": home})
	cmd.Stdout, cmd.Stderr = pw, logf
	cmd.WaitDelay = 5 * time.Second
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		fail(err)
		return
	}
	got := 0
	read := make(chan struct{})
	go func() {
		defer close(read)
		dec := json.NewDecoder(pr)
		for {
			var rec ClientRecord
			if err := dec.Decode(&rec); err != nil {
				io.Copy(io.Discard, pr)
				return
			}
			if rec.Event != "request" {
				continue
			}
			rr := request(h.Name, p, rec, r.t0)
			r.mu.Lock()
			for i := range rr.Route {
				rr.Route[i].Node = r.peerName(rr.Route[i].Peer)
			}
			r.res.Requests = append(r.res.Requests, rr)
			r.mu.Unlock()
			got++
		}
	}()
	err = cmd.Wait()
	pw.Close()
	<-read
	if err != nil {
		fail(fmt.Errorf("%w after %d requests: %s", err, got, r.logTail(logName)))
	}
}

// peerName maps a peer ID to its node's name. The caller holds r.mu.
func (r *runner) peerName(id string) string {
	for _, n := range r.res.Nodes {
		if n.PeerID == id {
			return n.Name
		}
	}
	return ""
}
