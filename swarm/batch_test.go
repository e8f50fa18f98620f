package swarm_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/swarm"
)

// newClient starts a client of the swarm of nodes.
func newClient(t testing.TB, nodes []*node.Node) *swarm.Client {
	t.Helper()
	c, err := swarm.New(context.Background(), swarm.Config{Home: t.TempDir(), Bootstrap: nodes[0].Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// stageTotals sums the stage counters of nodes.
func stageTotals(nodes []*node.Node) (forwards, batches int64) {
	for _, n := range nodes {
		s := n.Stage.Snapshot()
		forwards += s.Forwards
		batches += s.Batches
	}
	return forwards, batches
}

// TestConcurrentSessionsLikeLocal: N sessions of one client decode at
// once on a 2-stage route, their forwards batched by the stages, and each
// gets exactly the tokens it gets alone in one process.
func TestConcurrentSessionsLikeLocal(t *testing.T) {
	f := getFixture(t)
	nodes := startNodes(t, f, f.layouts[2])
	c := newClient(t, nodes)
	route := routeOf(f.layouts[2], nodes)
	const tokens = 24
	for _, n := range []int{1, 3, 8} {
		t.Run(fmt.Sprint("sessions=", n), func(t *testing.T) {
			prompts := make([][]int, n)
			want := make([][]int, n)
			for i := range n {
				// Different prompts of different lengths: positions differ
				// within a batch.
				prompts[i] = append([]int{1, 450 + i}, slices.Repeat([]int{8338, 265}, 1+i%3)...)
				want[i] = localIDs(t, f, prompts[i], tokens, sample.Params{})
			}
			fw0, b0 := stageTotals(nodes)
			got := make([][]int, n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Go(func() {
					s, err := c.Open(context.Background(), route, swarm.SessionOptions{ModelID: f.manifest.ModelID, Vocab: 32000, Timeout: 30 * time.Second})
					if err != nil {
						errs[i] = err
						return
					}
					defer s.Close()
					r, err := generate.Run(context.Background(), s, prompts[i], generate.Options{MaxTokens: tokens, IgnoreEOS: true, Context: 256})
					got[i], errs[i] = r.IDs, err
				})
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil {
					t.Fatalf("session %d: %v", i, errs[i])
				}
				if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
					t.Fatalf("session %d generated\n%v\nalone, in process\n%v", i, got[i], want[i])
				}
			}
			fw1, b1 := stageTotals(nodes)
			t.Logf("%d sessions: %d forwards in %d batches on the route's stages", n, fw1-fw0, b1-b0)
			// Eight sessions stepping at once share batches: with every
			// step's forwards arriving within the others' compute, some do.
			if n == 8 && b1-b0 >= fw1-fw0 {
				t.Fatalf("8 sessions: %d forwards in %d batches: nothing was batched", fw1-fw0, b1-b0)
			}
		})
	}
}

// TestClientsShareRoute: two clients on one route, one decoding four
// sequences at once and one a single sequence, over the same interval.
// The stages serve every session each time its forward is ready, so the
// single sequence is not slowed below the others (a per-session check:
// a decoding sequence never has more than one forward in flight, so
// per-client rates of 4 sequences vs 1 differ by the sequences, and
// per-client equality under load is the job of the stage test
// TestFairClients and of internal/sched's TestFairShare).
func TestClientsShareRoute(t *testing.T) {
	f := getFixture(t)
	nodes := startNodes(t, f, f.layouts[2])
	route := routeOf(f.layouts[2], nodes)
	a, b := newClient(t, nodes), newClient(t, nodes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var counts [5]atomic.Int64 // a's four sequences, then b's
	errs := make([]error, 5)
	var wg sync.WaitGroup
	run := func(i int, c *swarm.Client, max int) chan struct{} {
		done := make(chan struct{})
		wg.Go(func() {
			defer close(done)
			s, err := c.Open(ctx, route, swarm.SessionOptions{ModelID: f.manifest.ModelID, Vocab: 32000, Timeout: 30 * time.Second})
			if err != nil {
				errs[i] = err
				return
			}
			defer s.Close()
			_, err = generate.Run(ctx, s, []int{1, 450 + i, 8338}, generate.Options{MaxTokens: max, IgnoreEOS: true, Context: 256,
				OnToken: func(int) { counts[i].Add(1) }})
			if ctx.Err() == nil {
				errs[i] = err
			}
		})
		return done
	}
	for i := range 4 {
		run(i, a, 250)
	}
	// Start counting once every sequence is decoding.
	for {
		ready := true
		for i := range 4 {
			ready = ready && counts[i].Load() > 0
		}
		if ready {
			break
		}
		time.Sleep(time.Millisecond)
	}
	var start [4]int64
	for i := range 4 {
		start[i] = counts[i].Load()
	}
	const n = 60
	done := run(4, b, n)
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		t.Fatal("b's sequence did not finish in 3 minutes")
	}
	var perA []int64
	sumA := int64(0)
	for i := range 4 {
		d := counts[i].Load() - start[i]
		perA = append(perA, d)
		sumA += d
	}
	cancel()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("sequence %d: %v", i, err)
		}
	}
	meanA := float64(sumA) / 4
	t.Logf("while b decoded %d tokens: a's sequences %v (client a %d in all)", n, perA, sumA)
	if float64(n) < 0.5*meanA {
		t.Fatalf("b's one sequence got %d tokens while each of a's got %.1f on average", n, meanA)
	}
}

// BenchmarkConcurrentStreams measures aggregate decode tokens/s through a
// 2-stage loopback route for 1, 2, 4 and 8 streams (sessions decoding at
// once), interleaved round by round on the same nodes so that all see the
// same machine. Each round runs every stream count once, in a rotating
// order, for 32 tokens per stream. Reported: the median tokens/s of each
// count, its ratio to one stream, and the mean forwards per batch on the
// stages.
//
//	go test ./swarm -run '^$' -bench ConcurrentStreams -benchtime 20x
func BenchmarkConcurrentStreams(b *testing.B) {
	f := getFixture(b)
	nodes := startNodes(b, f, f.layouts[2])
	c := newClient(b, nodes)
	route := routeOf(f.layouts[2], nodes)
	counts := []int{1, 2, 4, 8}
	sessions := make([]*swarm.Session, 8)
	for i := range sessions {
		s, err := c.Open(context.Background(), route, swarm.SessionOptions{ModelID: f.manifest.ModelID, Vocab: 32000})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		sessions[i] = s
	}
	const perStream = 32
	rates := map[int][]float64{}
	var fwd, bat = map[int]int64{}, map[int]int64{}
	pos := make([]int, 8)
	round := 0
	for b.Loop() {
		for k := range counts {
			n := counts[(k+round)%len(counts)]
			f0, b0 := stageTotals(nodes)
			var wg sync.WaitGroup
			var failed atomic.Value
			t0 := time.Now()
			for i := range n {
				wg.Go(func() {
					for range perStream {
						if pos[i] >= 255 {
							pos[i] = 0
						}
						if _, err := sessions[i].Step(context.Background(), generate.Step{Pos: pos[i], IDs: []int32{int32(1 + pos[i])}}); err != nil {
							failed.Store(err)
							return
						}
						pos[i]++
					}
				})
			}
			wg.Wait()
			d := time.Since(t0)
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
			f1, b1 := stageTotals(nodes)
			rates[n] = append(rates[n], float64(n*perStream)/d.Seconds())
			fwd[n] += f1 - f0
			bat[n] += b1 - b0
		}
		round++
	}
	base := median(rates[1])
	for _, n := range counts {
		m := median(rates[n])
		b.ReportMetric(m, fmt.Sprintf("tok/s-%d", n))
		if n > 1 {
			b.ReportMetric(m/base, fmt.Sprintf("x%d", n))
		}
		b.ReportMetric(float64(fwd[n])/float64(max(bat[n], 1)), fmt.Sprintf("fwd/batch-%d", n))
	}
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
