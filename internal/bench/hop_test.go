package bench_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// BenchmarkHopOverheadSameWeights measures what one remote stage adds per
// token. Three backends decode the same tokens in turn (the order rotates
// every token): a node on loopback serving the stored one-stage f32 shard,
// the same shard loaded in process, and the checkpoint as LoadLlama2C
// reads it. b.N counts tokens; all run with 1 thread. The node's own
// timing of each step (queue wait, forward) splits the remote time.
//
// "stories15M" is the real model: while one backend computes for ~3 ms the
// other core idles, so each remote step also pays for waking an idle core
// on both sides (node and client), which on a virtual machine whose idle
// vCPUs halt at once is most of the hop (compare node's
// BenchmarkStreamRoundTrip busy/non-busy). "tiny" is a synthetic model
// whose forward takes ~0.1 ms: cores barely idle, and what remains is the
// hop itself: framing, streams, goroutine hand-offs and loopback TCP.
//
//	go test ./internal/bench -run '^$' -bench HopOverheadSameWeights -benchtime 2000x -count 5
func BenchmarkHopOverheadSameWeights(b *testing.B) {
	b.Run("stories15M", func(b *testing.B) {
		path, tok := testmodel.Stories15M(b)
		w, err := checkpoint.LoadLlama2C(path, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		tb, err := os.ReadFile(tok)
		if err != nil {
			b.Fatal(err)
		}
		benchHop(b, shards.Source{Name: "stories15M", Weights: w, Tokenizer: tb, TokFormat: "llama2c"})
	})
	// A model so small that its forward costs a few microseconds: what
	// remains of the remote time is the hop itself.
	b.Run("tiny", func(b *testing.B) {
		cfg, err := shards.SynthConfig("tiny", 2)
		if err != nil {
			b.Fatal(err)
		}
		w, err := shards.Synth(cfg, ovrt.F32, 1)
		if err != nil {
			b.Fatal(err)
		}
		benchHop(b, shards.Source{Name: "tiny", Weights: w})
	})
}

func benchHop(b *testing.B, src shards.Source) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := src.Weights
	st, err := shards.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m, mc, err := st.Import(ctx, src, nil)
	if err != nil {
		b.Fatal(err)
	}
	ref := m.Layouts[0].Shards[0]

	// The node, with its own store holding the shard, manifest and tokenizer.
	home := filepath.Join(b.TempDir(), "node")
	ns, err := shards.Open(home)
	if err != nil {
		b.Fatal(err)
	}
	cids := []string{ref.CID, mc.String()}
	if m.Tokenizer.CID != "" {
		cids = append(cids, m.Tokenizer.CID)
	}
	for _, s := range cids {
		var buf bytes.Buffer
		if err := st.Blocks.Export(ctx, cid.MustParse(s), &buf); err != nil {
			b.Fatal(err)
		}
		if _, err := ns.Blocks.AddFile(ctx, &buf, nil); err != nil {
			b.Fatal(err)
		}
	}
	ns.Close()
	n, err := node.New(ctx, node.Config{Home: home, Shard: ref.CID, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	go n.Run(ctx)

	c, err := swarm.New(ctx, swarm.Config{Home: b.TempDir(), Bootstrap: n.Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	stg := ref.Stage()
	route := []swarm.Hop{{Peer: n.Host.Peerstore().PeerInfo(n.ID()), Shard: ref.CID, Start: stg.Start, End: stg.End, HeadLo: stg.HeadLo, HeadHi: stg.HeadHi}}
	s, err := c.Open(ctx, route, swarm.SessionOptions{ModelID: m.ModelID, Vocab: m.Config.Vocab})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()

	local := func(w *ovrt.Weights) generate.Backend {
		mm, err := ovrt.Compile(w, ovrt.WithThreads(1))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(mm.Close)
		l, err := generate.NewLocal(sample.Params{}, mm)
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
	sw, _, err := st.LoadShard(ctx, cid.MustParse(ref.CID))
	if err != nil {
		b.Fatal(err)
	}
	backends := []generate.Backend{s, local(sw), local(w)} // remote, same shard, mapped checkpoint
	spent := make([]time.Duration, len(backends))
	var queue, compute int64 // the node's own account of each step, µs
	pos, turn := 0, 0
	for b.Loop() {
		if pos == 255 {
			pos = 0
		}
		step := generate.Step{Pos: pos, IDs: []int32{int32(1 + pos)}}
		for k := range backends {
			i := (k + turn) % len(backends)
			t0 := time.Now()
			if _, err := backends[i].Step(ctx, step); err != nil {
				b.Fatal(err)
			}
			spent[i] += time.Since(t0)
			if i == 0 && len(s.Trace) == 1 {
				queue += int64(s.Trace[0].Queue)
				compute += int64(s.Trace[0].Compute)
			}
		}
		pos++
		turn++
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N) }
	b.ReportMetric(us(spent[0]), "remote-µs/token")
	b.ReportMetric(us(spent[1]), "shard-local-µs/token")
	b.ReportMetric(us(spent[2]), "mmap-local-µs/token")
	b.ReportMetric(us(spent[0]-spent[1]), "hop-overhead-µs/token")
	b.ReportMetric(us(spent[0]-spent[2]), "vs-mmap-µs/token")
	// Where the remote time goes: the node's queue wait and forward, and
	// the rest (transport, framing, goroutine hand-offs on both sides).
	b.ReportMetric(float64(queue)/float64(b.N), "node-queue-µs/token")
	b.ReportMetric(float64(compute)/float64(b.N), "node-compute-µs/token")
	b.ReportMetric(us(spent[0])-float64(queue+compute)/float64(b.N), "transport-µs/token")
}
