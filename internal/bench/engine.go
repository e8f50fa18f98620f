package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// EngineConfig is one row of the engine table.
type EngineConfig struct {
	Quant   string `json:"quant"`
	Threads int    `json:"threads"`
}

// EngineResult is what one configuration measured.
type EngineResult struct {
	EngineConfig
	DecodeTokS   float64 `json:"decode_tok_s"`  // median
	PrefillTokS  float64 `json:"prefill_tok_s"` // median
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	ModelBytes   int64   `json:"model_bytes"`
	KVBytes      int64   `json:"kv_bytes"`
	Tokens       int     `json:"tokens"`
	Reps         int     `json:"reps"`
	ISA          string  `json:"isa"`
}

// Opener loads a model for one configuration.
type Opener func(quant ovrt.DType, threads int) (*ovrt.Model, func(), error)

// MeasureEngine runs one configuration in this process: reps times, a
// prefill of prefillLen tokens and a greedy decode of tokens tokens from
// BOS, and returns medians.
func MeasureEngine(ctx context.Context, open Opener, cfg EngineConfig, tokens, prefillLen, reps int) (EngineResult, error) {
	q, err := ovrt.ParseDType(cfg.Quant)
	if err != nil {
		return EngineResult{}, err
	}
	m, done, err := open(q, cfg.Threads)
	if err != nil {
		return EngineResult{}, err
	}
	defer done()
	res := EngineResult{EngineConfig: cfg, Tokens: tokens, Reps: reps, ModelBytes: m.Weights().Bytes(), ISA: ovrt.KernelISA()}
	c := m.Config()
	tokens = min(tokens, c.Context-1)
	prefillLen = min(prefillLen, c.Context)
	var dec, pre []float64
	for range reps {
		l, err := generate.NewLocal(sample.Params{}, m)
		if err != nil {
			return res, err
		}
		r, err := generate.Run(ctx, l, []int{c.BOS}, generate.Options{MaxTokens: tokens, IgnoreEOS: true, EOS: c.EOS, Context: c.Context})
		if err != nil {
			return res, err
		}
		dec = append(dec, r.DecodeRate())

		prompt := make([]int32, prefillLen)
		for i := range prompt {
			prompt[i] = int32((i*7919 + 1) % c.Vocab)
		}
		req := m.NewRequest()
		t0 := time.Now()
		if _, err := req.Infer(ovrt.Step{Tokens: prompt}); err != nil {
			return res, err
		}
		pre = append(pre, float64(prefillLen)/time.Since(t0).Seconds())
		res.KVBytes = max(res.KVBytes, req.KVBytes())
	}
	res.DecodeTokS, res.PrefillTokS = median(dec), median(pre)
	res.PeakRSSBytes = peakRSS()
	return res, nil
}

// peakRSS reads this process's high-water resident set (VmHWM), which,
// unlike getrusage's maxrss, does not inherit the parent's peak across
// fork and exec. Zero where /proc is missing.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb * 1024
		}
	}
	return 0
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// RunEngineTable runs every configuration in a child process (argv +
// the configuration's flags) and prints the table to w. The child prints
// one EngineResult as JSON.
func RunEngineTable(ctx context.Context, w io.Writer, argv []string, cfgs []EngineConfig) ([]EngineResult, error) {
	var out []EngineResult
	for _, cfg := range cfgs {
		args := append(slices.Clone(argv[1:]), "--child", "--quant", cfg.Quant, "--threads", fmt.Sprint(cfg.Threads))
		cmd := exec.CommandContext(ctx, argv[0], args...)
		cmd.Stderr = os.Stderr
		b, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("bench: %s %v: %w", cfg.Quant, cfg.Threads, err)
		}
		var r EngineResult
		if err := json.Unmarshal(b, &r); err != nil {
			return out, fmt.Errorf("bench: child output %q: %w", b, err)
		}
		if u, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && r.PeakRSSBytes == 0 {
			r.PeakRSSBytes = u.Maxrss * 1024 // Linux reports KiB
		}
		out = append(out, r)
	}
	PrintEngineTable(w, out)
	return out, nil
}

// PrintEngineTable prints results as a Markdown table.
func PrintEngineTable(w io.Writer, rs []EngineResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintf(w, "CPU: %s, GOMAXPROCS %d, kernels %s\n\n", cpuName(), runtime.GOMAXPROCS(0), ovrt.KernelISA())
	fmt.Fprintln(tw, "| quant\t threads\t decode tok/s\t prefill tok/s\t prefill/decode\t peak RSS MiB\t model MiB\t KV MiB\t RSS - model - KV MiB\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t---\t---\t---\t")
	for _, r := range rs {
		mib := func(b int64) float64 { return float64(b) / (1 << 20) }
		fmt.Fprintf(tw, "| %s\t %d\t %.1f\t %.1f\t %.1fx\t %.1f\t %.1f\t %.1f\t %.1f\t\n", r.Quant, r.Threads, r.DecodeTokS, r.PrefillTokS,
			r.PrefillTokS/r.DecodeTokS, mib(r.PeakRSSBytes), mib(r.ModelBytes), mib(r.KVBytes), mib(r.PeakRSSBytes-r.ModelBytes-r.KVBytes))
	}
	tw.Flush()
}

func cpuName() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}
