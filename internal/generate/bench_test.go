package generate

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// delayed adds a round trip to every step of a backend: a stand-in for a
// route's network in process.
type delayed struct {
	Backend
	rtt time.Duration
}

func (d delayed) Step(ctx context.Context, s Step) (StepResult, error) {
	time.Sleep(d.rtt)
	return d.Backend.Step(ctx, s)
}

// cpuTime returns the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSpeculative compares plain greedy decoding of stories15M in
// this process (one thread) with speculative decoding by the n-gram
// drafter and by a q4 copy of the model as the draft, on the story
// prompt, reporting decode tokens/s, the acceptance rate and tokens per
// traversal. In process there is no round trip to amortize: speculation
// wins only what a traversal of K+1 tokens saves by reading the weights
// once. The rtt=5ms cases add a 5 ms sleep to every step, a stand-in for
// a route's round trips, which is what speculation is for.
func BenchmarkSpeculative(b *testing.B) {
	s := loadStories(b)
	const n = 128
	o := Options{MaxTokens: n, EOS: -1, IgnoreEOS: true, Context: s.w.Config.Context}
	cases := []struct {
		name string
		d    func() spec.Drafter
		k    int
	}{
		{"plain", nil, 0},
		{"ngram/K=auto", func() spec.Drafter { return spec.NGram{} }, 0},
		{"ngram/K=4", func() spec.Drafter { return spec.NGram{} }, 4},
		{"draft-q4/K=auto", func() spec.Drafter { return s.drafter(b, sample.Params{}, 1) }, 0},
		{"draft-q4/K=4", func() spec.Drafter { return s.drafter(b, sample.Params{}, 1) }, 4},
	}
	for _, rtt := range []time.Duration{0, 5 * time.Millisecond} {
		for _, c := range cases {
			b.Run(fmt.Sprintf("rtt=%v/%s", rtt, c.name), func(b *testing.B) {
				var toks, drafted, accepted, trav int
				var decode float64
				cpu0 := cpuTime()
				for b.Loop() {
					var be Backend = s.local(b, sample.Params{})
					if rtt > 0 {
						be = delayed{be, rtt}
					}
					var r Result
					var err error
					if c.d == nil {
						r, err = Run(context.Background(), be, s.prompt, o)
					} else {
						r, err = RunSpeculative(context.Background(), be, c.d(), s.prompt, o, SpecOptions{K: c.k})
					}
					if err != nil {
						b.Fatal(err)
					}
					toks += len(r.IDs) - 1
					decode += r.Decode.Seconds()
					drafted += r.Drafted
					accepted += r.Accepted
					trav += r.Traversals - 1
				}
				b.ReportMetric(float64(toks)/decode, "tok/s")
				// CPU time per token (prompt included) holds better than
				// wall time on a shared machine.
				b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/1e3/float64(toks), "cpu-ms/tok")
				if drafted > 0 {
					b.ReportMetric(float64(accepted)/float64(drafted), "accept")
				}
				b.ReportMetric(float64(toks)/float64(trav), "tok/traversal")
			})
		}
	}
}
