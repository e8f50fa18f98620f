package shards_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
)

// BenchmarkShardParity measures what running a model from a stored
// one-stage shard costs against running the same model unsplit: stories15M
// is imported into a temporary store, the whole-model shard is loaded with
// LoadShard and the checkpoint with LoadLlama2C, both are compiled with the
// same threads, and the two decode greedily from BOS alternately, token by
// token, in one run (the order flips every token), so both see the same
// machine. b.N counts tokens of each. q8_0 compares the shard that
// `shards split --stages 1 --even --quant q8` stores against the
// checkpoint quantized in memory. Target: shard/unsplit >= 0.98.
//
//	go test ./shards -run '^$' -bench ShardParity -benchtime 2048x -count 5
func BenchmarkShardParity(b *testing.B) {
	s, m, mc, w := importStories(b)
	ctx := context.Background()
	// EvenSplit, not BalancedSplit: BalancedSplit(cs, p, 1) returns two
	// stages for stories15M (layers 0:6 with head rows 0:31680, then the
	// last 320 rows alone), so `shards split --stages 1` without --even is
	// not one stage.
	stages, err := shards.EvenSplit(m.Config.Layers, 1)
	if err != nil {
		b.Fatal(err)
	}
	m8, _, err := s.Split(ctx, mc, stages, ovrt.Q8_0, "even", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []ovrt.DType{ovrt.F32, ovrt.Q8_0} {
		l, ok := m8.Layout(q.String(), "", 1)
		if !ok {
			b.Fatalf("no one-stage %v layout in %+v", q, m8.Layouts)
		}
		sw, _, err := s.LoadShard(ctx, cid.MustParse(l.Shards[0].CID))
		if err != nil {
			b.Fatal(err)
		}
		uw := w
		if q != ovrt.F32 {
			if uw, err = w.Quantize(q); err != nil {
				b.Fatal(err)
			}
		}
		if sw.Bytes() != uw.Bytes() {
			b.Fatalf("%v: the shard holds %d weight bytes, the unsplit model %d", q, sw.Bytes(), uw.Bytes())
		}
		for _, threads := range []int{1, 2} {
			b.Run(fmt.Sprintf("%v/threads=%d", q, threads), func(b *testing.B) {
				shard, err := ovrt.Compile(sw, ovrt.WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer shard.Close()
				whole, err := ovrt.Compile(uw, ovrt.WithThreads(threads))
				if err != nil {
					b.Fatal(err)
				}
				defer whole.Close()
				parityDecode(b, shard, whole)
			})
		}
	}
}

// parityDecode decodes greedily from BOS on a and b alternately and
// reports both rates and their ratio a/b.
func parityDecode(tb *testing.B, a, b *ovrt.Model) {
	ra, rb := a.NewRequest(), b.NewRequest()
	ctxLen := a.Config().Context
	var ta, tbd time.Duration
	next := int32(1)
	pos := 0
	step := func(r *ovrt.Request, d *time.Duration) int32 {
		t0 := time.Now()
		res, err := r.Infer(ovrt.Step{Pos: pos, Tokens: []int32{next}})
		*d += time.Since(t0)
		if err != nil {
			tb.Fatal(err)
		}
		return int32(sample.Argmax(res.Logits))
	}
	i := 0
	for tb.Loop() {
		if pos == ctxLen {
			pos, next = 0, 1
		}
		var na, nb int32
		if i%2 == 0 {
			na = step(ra, &ta)
			nb = step(rb, &tbd)
		} else {
			nb = step(rb, &tbd)
			na = step(ra, &ta)
		}
		if na != nb {
			tb.Fatalf("position %d: the shard chose %d, the unsplit model %d", pos, na, nb)
		}
		next = na
		pos++
		i++
	}
	n := float64(tb.N)
	tb.ReportMetric(n/ta.Seconds(), "shard-tok/s")
	tb.ReportMetric(n/tbd.Seconds(), "unsplit-tok/s")
	tb.ReportMetric(tbd.Seconds()/ta.Seconds(), "shard/unsplit")
}

// BenchmarkLoadShard measures loading the one-stage f32 and q8_0 shards of
// stories15M from the store: time, and bytes allocated per load against
// the shard's size (alloc/shard; 1.0 would be one buffer and nothing
// else). Allocation beyond the shard itself is garbage at the moment the
// model starts, and raises the process's peak RSS until a GC returns it.
//
//	go test ./shards -run '^$' -bench LoadShard -benchtime 10x -memprofile /tmp/load.mem
func BenchmarkLoadShard(b *testing.B) {
	s, m, mc, _ := importStories(b)
	ctx := context.Background()
	stages, err := shards.EvenSplit(m.Config.Layers, 1)
	if err != nil {
		b.Fatal(err)
	}
	m8, _, err := s.Split(ctx, mc, stages, ovrt.Q8_0, "even", nil)
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []ovrt.DType{ovrt.F32, ovrt.Q8_0} {
		l, ok := m8.Layout(q.String(), "", 1)
		if !ok {
			b.Fatalf("no one-stage %v layout", q)
		}
		c := cid.MustParse(l.Shards[0].CID)
		b.Run(q.String(), func(b *testing.B) {
			b.ReportAllocs()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			for b.Loop() {
				if _, _, err := s.LoadShard(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
			runtime.ReadMemStats(&ms1)
			b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/float64(l.Shards[0].Bytes), "alloc/shard")
			b.ReportMetric(float64(l.Shards[0].Bytes)/(1<<20), "shard-MiB")
		})
	}
}
