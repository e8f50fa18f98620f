package ovrt

import (
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/pipeshard/pipeshard/ovrt/internal/kernels"
)

// Option configures Compile.
type Option func(*options) error

type options struct {
	threads int
}

// WithThreads sets the number of threads used for large matrices. Zero
// means GOMAXPROCS. Results do not depend on it.
func WithThreads(n int) Option {
	return func(o *options) error {
		if n < 0 || n > 1024 {
			return fmt.Errorf("%w: %d threads", ErrBadInput, n)
		}
		o.threads = n
		return nil
	}
}

// Model is a compiled layer range, ready to run. It is safe for
// concurrent use; calls to Forward are serialized internally (the batch,
// not concurrency, is how a caller gets throughput).
type Model struct {
	w       *Weights
	cfg     Config
	threads int
	pool    *pool
	parMACs int // see parallelMACs

	cos, sin []float32 // [Context][HeadSize/2]

	mu sync.Mutex // serializes Forward; guards scratch
	sc scratch
}

// Compile validates w and prepares it to run. The Model keeps w; closing
// w while the model is in use is the caller's error.
func Compile(w *Weights, opts ...Option) (*Model, error) {
	var o options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if err := w.Validate(); err != nil {
		return nil, err
	}
	if o.threads == 0 {
		o.threads = runtime.GOMAXPROCS(0)
	}
	m := &Model{w: w, cfg: w.Config, threads: o.threads, parMACs: parallelMACs}
	m.pool = newPool(o.threads)
	m.cos, m.sin = ropeTables(w.Config)
	return m, nil
}

// Config returns the model's hyperparameters.
func (m *Model) Config() Config { return m.cfg }

// Weights returns the weights the model runs.
func (m *Model) Weights() *Weights { return m.w }

// Range returns the layer range [start, end) the model runs.
func (m *Model) Range() (start, end int) { return m.w.Start, m.w.End }

// Threads returns the number of threads used for large matrices.
func (m *Model) Threads() int { return m.threads }

// Close stops the model's worker threads. It does not close the weights.
func (m *Model) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pool.close()
}

// ropeFreqs returns the inverse frequencies of each rotated pair,
// applying Llama 3's scaling when configured.
func ropeFreqs(c Config) []float64 {
	hd := c.HeadSize()
	f := make([]float64, hd/2)
	for i := range f {
		f[i] = 1 / math.Pow(c.RopeTheta, float64(2*i)/float64(hd))
	}
	s := c.RopeScaling
	if s == nil {
		return f
	}
	lowWavelen := float64(s.OriginalContext) / s.LowFreqFactor
	highWavelen := float64(s.OriginalContext) / s.HighFreqFactor
	for i, inv := range f {
		wavelen := 2 * math.Pi / inv
		switch {
		case wavelen < highWavelen: // high frequency: unchanged
		case wavelen > lowWavelen: // low frequency: scaled down
			f[i] = inv / s.Factor
		default: // smooth interpolation between the two
			smooth := (float64(s.OriginalContext)/wavelen - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
			f[i] = (1-smooth)*inv/s.Factor + smooth*inv
		}
	}
	return f
}

func ropeTables(c Config) (cos, sin []float32) {
	freqs := ropeFreqs(c)
	half := len(freqs)
	cos = make([]float32, c.Context*half)
	sin = make([]float32, c.Context*half)
	for p := 0; p < c.Context; p++ {
		for i, f := range freqs {
			// HF computes the angle in float32; so do we, then take
			// cos and sin of it in float64.
			a := float64(float32(p) * float32(f))
			cos[p*half+i] = float32(math.Cos(a))
			sin[p*half+i] = float32(math.Sin(a))
		}
	}
	return cos, sin
}

// KernelISA names the matrix kernels in use: "avx512", "avx2" or
// "generic".
func KernelISA() string { return kernels.ISA() }
