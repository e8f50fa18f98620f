package scenario

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/shards"
)

// Env is what Run runs with.
type Env struct {
	// Net is the emulated network; Run starts every process in it and
	// closes it when done. Required.
	Net Network
	// Binary is the pipeshard executable (default: os.Executable()).
	Binary string
	// WorkDir holds the nodes' and clients' homes and their logs
	// (logs/NAME.log). Default: a temporary directory, removed after.
	WorkDir string
	// CacheDir keeps the imported and split model between runs
	// (default: ModelHome/sim).
	CacheDir string
	// ModelHome is the PIPESHARD_HOME the model is imported from, where
	// `pipeshard model pull` puts known models (default: models.Home()).
	ModelHome string
	// Log gets progress (default: discarded).
	Log *slog.Logger
	// Now is the clock of the results (default: time.Now).
	Now func() time.Time
	// StartTimeout bounds a node's start, up to its start line
	// (default 2m).
	StartTimeout time.Duration
	// StopTimeout is how long a node may take to leave on SIGTERM before
	// it is killed (default 10s).
	StopTimeout time.Duration
	// NodeLogLevel is the nodes' and clients' --log-level (default warn).
	NodeLogLevel string
	// BeforePhase, if set, is called before each phase's clients start
	// (with the phase's number); an error ends the run. A benchmark uses
	// it to interleave a measurement outside the swarm with the phases.
	BeforePhase func(ctx context.Context, phase int) error
	// Prepared, if set, is told the model's CID and the store holding it
	// and its shards (Results.Model and Results.Store) once the model is
	// ready, before any node starts.
	Prepared func(model, store string)
}

func (e *Env) defaults() error {
	if e.Net == nil {
		return fmt.Errorf("%w: no network", ErrRun)
	}
	if e.Binary == "" {
		b, err := os.Executable()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrRun, err)
		}
		e.Binary = b
	}
	if strings.HasSuffix(filepath.Base(e.Binary), ".test") {
		// A Go test binary would run its tests again for every
		// "pipeshard" command, and those tests this run again.
		return fmt.Errorf("%w: %s is a Go test binary, not pipeshard: set Env.Binary", ErrRun, e.Binary)
	}
	if e.ModelHome == "" {
		e.ModelHome = models.Home()
	}
	if e.CacheDir == "" {
		e.CacheDir = filepath.Join(e.ModelHome, "sim")
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
	if e.Now == nil {
		e.Now = time.Now
	}
	if e.StartTimeout == 0 {
		e.StartTimeout = 2 * time.Minute
	}
	if e.StopTimeout == 0 {
		e.StopTimeout = 10 * time.Second
	}
	if e.NodeLogLevel == "" {
		e.NodeLogLevel = "warn"
	}
	return nil
}

// Run plays the scenario on the real swarm: it prepares the model's
// shards, starts a `pipeshard node` process per node inside its host of
// env.Net, applies the churn, runs the clients' phases with a `pipeshard
// sim client` process per client host, stops everything and returns what
// it measured. It closes env.Net.
//
// A run stopped by sc.Bounds.MaxDuration or ctx returns the results so
// far with an error; so does a run in which a node failed to start.
func Run(ctx context.Context, sc *Scenario, env Env) (*Results, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if err := env.defaults(); err != nil {
		return nil, err
	}
	defer env.Net.Close()
	if env.WorkDir == "" {
		dir, err := os.MkdirTemp("", "pipeshard-sim-")
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrRun, err)
		}
		defer os.RemoveAll(dir)
		env.WorkDir = dir
	}
	if err := os.MkdirAll(filepath.Join(env.WorkDir, "logs"), 0o755); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRun, err)
	}
	ctx, cancel := context.WithTimeoutCause(ctx, sc.Bounds.MaxDuration.D(),
		fmt.Errorf("%w: bounds.max_duration %v reached", ErrRun, sc.Bounds.MaxDuration))
	defer cancel()
	r := &runner{sc: sc, env: env, hosts: sc.Hosts(), procs: map[string]*nodeProc{}, startedAt: map[string][]time.Time{}}
	r.res = &Results{Scenario: sc, Backend: env.Net.Backend(), Started: env.Now()}
	err := r.run(ctx)
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		r.res.Errors = append(r.res.Errors, err.Error())
	}
	r.res.finish()
	return r.res, err
}

type runner struct {
	sc    *Scenario
	env   Env
	hosts []Host
	res   *Results
	t0    time.Time // the swarm is up

	shape     Shape
	shards    map[shards.Stage]string // stage → shard CID
	startedAt map[string][]time.Time  // node → its process starts

	cache string // the prepared model's store directory

	mu       sync.Mutex
	procs    map[string]*nodeProc // live or last process of each node, by name
	all      []*nodeProc          // every process started
	stopping bool                 // the run is ending: exits are expected
}

// since returns seconds from t0.
func (r *runner) since(t time.Time) float64 { return t.Sub(r.t0).Seconds() }

func (r *runner) run(ctx context.Context) error {
	start := r.env.Now()
	log := r.env.Log
	log.Info("preparing the model", "model", r.sc.Model.Name, "cache", r.env.CacheDir)
	if err := r.prepare(ctx); err != nil {
		return err
	}
	if r.env.Prepared != nil {
		r.env.Prepared(r.res.Model, r.res.Store)
	}
	for i, h := range r.hosts {
		nr := NodeResult{Name: h.Name, Host: i, Addr: r.env.Net.Addr(i).String(), Layers: h.Layers}
		if h.Client {
			continue
		}
		if h.Stage != nil {
			st, _ := checkStage(*h.Stage, r.shape)
			nr.Shard = r.shards[st]
		}
		r.res.Nodes = append(r.res.Nodes, nr)
	}
	defer r.stopAll()
	// The first node that holds the model starts alone; the others join
	// through it.
	var initial []Host
	for _, h := range r.hosts {
		if !h.Client && !r.sc.Nodes[h.GroupIndex].Standby {
			initial = append(initial, h)
		}
	}
	first := slices.IndexFunc(initial, func(h Host) bool { return !r.sc.Nodes[h.GroupIndex].Fetch })
	boot := initial[first]
	log.Info("starting the bootstrap node", "node", boot.Name)
	if err := r.startNode(ctx, boot); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(initial))
	for i, h := range initial {
		if i == first {
			continue
		}
		wg.Go(func() { errs[i] = r.startNode(ctx, h) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	r.t0 = r.env.Now()
	r.res.StartupSeconds = r.t0.Sub(start).Seconds()
	r.mu.Lock()
	for i := range r.res.Nodes {
		for j := range r.res.Nodes[i].Starts {
			r.res.Nodes[i].Starts[j] = r.since(r.startedAt[r.res.Nodes[i].Name][j])
		}
	}
	r.mu.Unlock()
	log.Info("swarm up", "nodes", len(initial), "startup", time.Duration(r.res.StartupSeconds*1e9).Round(time.Millisecond))

	churnCtx, stopChurn := context.WithCancel(ctx)
	churnDone := make(chan struct{})
	go func() { defer close(churnDone); r.churn(churnCtx) }()
	err := r.phases(ctx)
	stopChurn()
	<-churnDone
	r.res.Seconds = r.since(r.env.Now())
	return err
}

// --- the model ------------------------------------------------------

type prepared struct {
	Model   string            `json:"model"`
	Layouts []string          `json:"layouts"`
	Shards  map[string]string `json:"shards"` // stage → CID
}

// prepare imports the model into the cache and cuts the layouts every
// node needs, once per set of layouts.
func (r *runner) prepare(ctx context.Context) error {
	m := r.sc.Model
	src := m.Name
	synth, isSynth := strings.CutPrefix(src, SynthPrefix)
	if _, known := models.Known[src]; !known && !isSynth {
		abs, err := filepath.Abs(src)
		if err != nil {
			return fmt.Errorf("%w: model %s: %w", ErrRun, src, err)
		}
		st, err := os.Stat(abs)
		if err != nil {
			return fmt.Errorf("%w: model %s: %w", ErrRun, src, err)
		}
		src = abs
		m.Name = fmt.Sprintf("%s@%d@%d", abs, st.Size(), st.ModTime().UnixNano())
	}
	key := sha256.Sum256([]byte(m.Name + "|" + m.Quant))
	dir := filepath.Join(r.env.CacheDir, hex.EncodeToString(key[:8]))
	r.cache = dir
	r.res.Store = dir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %w", ErrRun, err)
	}
	r.res.Model, r.shards = "", map[shards.Stage]string{}
	// The import.
	var imp struct {
		Model string `json:"model"`
	}
	impFile := filepath.Join(dir, "import.json")
	if b, err := os.ReadFile(impFile); err != nil || json.Unmarshal(b, &imp) != nil || imp.Model == "" {
		args := []string{"shards", "import", "--home", dir, "--json", src}
		if isSynth {
			// Made, not imported: the same bytes on every machine.
			args = []string{"shards", "synth", "--home", dir, "--json", "--shape", synth, "--quant", m.Quant, "--seed", "1"}
		}
		r.env.Log.Info("importing", "model", src)
		out, err := r.tool(ctx, args...)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(out, &imp); err != nil || imp.Model == "" {
			return fmt.Errorf("%w: shards import printed %q", ErrRun, out)
		}
		if err := writeAtomic(impFile, out); err != nil {
			return err
		}
	}
	shape, err := r.readShape(ctx, dir, imp.Model)
	if err != nil {
		return err
	}
	if err := r.sc.checkShape(shape); err != nil {
		return err
	}
	r.shape = shape
	// The balanced cuts come first (the nodes' ranges may be among
	// them), then the explicit and derived ones.
	stagesKey := fmt.Sprint(m.Stages, m.Layouts)
	for _, g := range r.sc.Nodes {
		stagesKey += "|" + g.Layers
	}
	sum := sha256.Sum256([]byte(stagesKey))
	stateFile := filepath.Join(dir, "layouts-"+hex.EncodeToString(sum[:8])+".json")
	var st prepared
	if b, err := os.ReadFile(stateFile); err == nil && json.Unmarshal(b, &st) == nil && st.Model != "" {
		r.res.Model, r.res.Layouts = st.Model, st.Layouts
		for k, c := range st.Shards {
			s, err := parseStage(k)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", ErrRun, stateFile, err)
			}
			r.shards[s] = c
		}
		return nil
	}
	st = prepared{Model: imp.Model, Shards: map[string]string{}}
	var have [][]shards.Stage
	split := func(args ...string) ([]shards.Stage, error) {
		out, err := r.tool(ctx, append([]string{"shards", "split", "--home", dir, "--json", "--quant", r.sc.Model.Quant, st.Model}, args...)...)
		if err != nil {
			return nil, err
		}
		var res struct {
			Model  string `json:"model"`
			Shards []struct {
				CID    string `json:"cid"`
				Layers [2]int `json:"layers"`
				Head   []int  `json:"head"`
			} `json:"shards"`
		}
		if err := json.Unmarshal(out, &res); err != nil || res.Model == "" {
			return nil, fmt.Errorf("%w: shards split printed %q", ErrRun, out)
		}
		st.Model = res.Model
		var l []shards.Stage
		for _, s := range res.Shards {
			stage := shards.Stage{Start: s.Layers[0], End: s.Layers[1]}
			if len(s.Head) == 2 {
				stage.HeadLo, stage.HeadHi = s.Head[0], s.Head[1]
			}
			l = append(l, stage)
			st.Shards[stage.String()] = s.CID
		}
		st.Layouts = append(st.Layouts, FormatLayout(l))
		return l, nil
	}
	for _, n := range r.sc.Model.Stages {
		r.env.Log.Info("cutting the model", "stages", n)
		l, err := split("--stages", strconv.Itoa(n))
		if err != nil {
			return err
		}
		have = append(have, l)
	}
	layouts, err := r.sc.Layouts(shape, have)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	for _, l := range layouts {
		r.env.Log.Info("cutting the model", "ranges", FormatLayout(l))
		if _, err := split("--ranges", FormatLayout(l)); err != nil {
			return err
		}
	}
	b, _ := json.Marshal(st)
	if err := writeAtomic(stateFile, b); err != nil {
		return err
	}
	r.res.Model, r.res.Layouts = st.Model, st.Layouts
	for k, c := range st.Shards {
		s, _ := parseStage(k)
		r.shards[s] = c
	}
	return nil
}

func (r *runner) cacheDir() string { return r.cache }

// shape reads the model's shape from its manifest in the cache.
func (r *runner) readShape(ctx context.Context, dir, model string) (Shape, error) {
	c, err := cid.Decode(model)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: model CID %q: %w", ErrRun, model, err)
	}
	store, err := shards.Open(dir)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: %w", ErrRun, err)
	}
	defer store.Close()
	m, err := store.Manifest(ctx, c)
	if err != nil {
		return Shape{}, fmt.Errorf("%w: %w", ErrRun, err)
	}
	return Shape{Layers: m.Config.Layers, Vocab: m.Config.Vocab, Context: m.Config.Context}, nil
}

// checkShape checks ranges and prompts against the model's real shape.
func (s *Scenario) checkShape(sh Shape) error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if _, err := s.Layouts(sh, nil); err != nil {
		return bad("%v", err)
	}
	for _, c := range s.Clients {
		for _, id := range c.PromptIDs {
			if id >= sh.Vocab {
				return bad("clients %s: prompt id %d outside the vocabulary of %d", c.Name, id, sh.Vocab)
			}
		}
		if len(c.PromptIDs)+c.Tokens > sh.Context {
			return bad("clients %s: %d prompt ids and %d tokens exceed the context of %d", c.Name, len(c.PromptIDs), c.Tokens, sh.Context)
		}
	}
	return nil
}

// tool runs the binary outside the emulated network and returns its
// stdout.
func (r *runner) tool(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, r.env.Binary, args...)
	cmd.Env = childEnv(map[string]string{"PIPESHARD_HOME": r.env.ModelHome})
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: pipeshard %s: %w: %s", ErrRun, strings.Join(args, " "), err, tail(errb.String()))
	}
	return out.Bytes(), nil
}

// childEnv is the environment without PIPESHARD_ variables (which would
// set flags of the children), plus set.
func childEnv(set map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PIPESHARD_") || set[k] != "" {
			continue
		}
		out = append(out, kv)
	}
	for k, v := range set {
		if v != "" {
			out = append(out, k+"="+v)
		}
	}
	slices.Sort(out)
	return out
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("%w: %w", ErrRun, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: %w", ErrRun, err)
	}
	return nil
}

// tail returns the last lines of a log.
func tail(s string) string {
	s = strings.TrimSpace(s)
	lines := strings.Split(s, "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

// linkTree hard-links (or copies) every file of src into dst.
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if _, err := os.Lstat(to); err == nil {
			return nil
		}
		if os.Link(p, to) == nil {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

// listenAddr is the multiaddr host i's processes listen on.
func (r *runner) listenAddr(i int) string {
	a := r.env.Net.Addr(i)
	proto := "ip4"
	if a.Is6() && !a.Is4In6() {
		proto = "ip6"
	}
	a = a.Unmap()
	if r.sc.Network.Transport == "quic" {
		return fmt.Sprintf("/%s/%s/udp/0/quic-v1", proto, a)
	}
	return fmt.Sprintf("/%s/%s/tcp/0", proto, a)
}
