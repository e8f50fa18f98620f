package swarm_test

import (
	"context"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/swarm"
)

// BenchmarkHopOverhead measures what one remote stage adds per token: the
// whole model served by a node on loopback against the same model in
// process, decoding the same tokens in one run. b.N counts tokens; the
// ratio and the difference are reported.
func BenchmarkHopOverhead(b *testing.B) {
	f := getFixture(b)
	nodes := startNodes(b, f, f.layouts[1])
	c, err := swarm.New(context.Background(), swarm.Config{Home: b.TempDir(), Bootstrap: nodes[0].Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, err := c.Open(context.Background(), routeOf(f.layouts[1], nodes), swarm.SessionOptions{ModelID: f.manifest.ModelID, Vocab: 32000})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	// The same weights and thread count as the node's.
	one, err := ovrt.Compile(f.whole.Weights(), ovrt.WithThreads(1))
	if err != nil {
		b.Fatal(err)
	}
	defer one.Close()
	local, err := generate.NewLocal(sample.Params{}, one)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// Alternate remote and local tokens so both see the same machine.
	var remote, inproc time.Duration
	pos := 0
	for b.Loop() {
		if pos == 255 {
			pos = 0
		}
		step := generate.Step{Pos: pos, IDs: []int32{int32(1 + pos)}}
		t0 := time.Now()
		if _, err := s.Step(ctx, step); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := local.Step(ctx, step); err != nil {
			b.Fatal(err)
		}
		remote += t1.Sub(t0)
		inproc += time.Since(t1)
		pos++
	}
	n := float64(b.N)
	b.ReportMetric(float64(remote.Microseconds())/n, "remote-µs/token")
	b.ReportMetric(float64(inproc.Microseconds())/n, "local-µs/token")
	b.ReportMetric(float64((remote-inproc).Microseconds())/n, "hop-overhead-µs/token")
}
