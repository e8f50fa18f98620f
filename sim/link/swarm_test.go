package link_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/sim/link"
	"github.com/pipeshard/pipeshard/swarm"
)

// model is stories15M imported and cut in 3 stages, with the greedy
// continuation of prompt by the whole model in one process.
type model struct {
	store    *shards.Store
	manifest *shards.Manifest
	mc       cid.Cid
	layout   shards.Layout
	want     []int
}

const nTokens = 20

var prompt = []int{1, 450, 8338, 265}

var (
	modelOnce sync.Once
	theModel  *model
	modelErr  error
)

func getModel(t *testing.T) *model {
	t.Helper()
	bin, tok := testmodel.Stories15M(t)
	modelOnce.Do(func() { theModel, modelErr = buildModel(bin, tok) })
	if modelErr != nil {
		t.Fatal(modelErr)
	}
	return theModel
}

func buildModel(bin, tok string) (*model, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "link-model-")
	if err != nil {
		return nil, err
	}
	st, err := teststore.Build(ctx, dir, bin, tok, teststore.Cut{Balanced: 3})
	if err != nil {
		return nil, err
	}
	w := st.Weights
	whole, err := ovrt.Compile(w, ovrt.WithThreads(1))
	if err != nil {
		return nil, err
	}
	defer whole.Close()
	l, err := generate.NewLocal(sample.Params{}, whole)
	if err != nil {
		return nil, err
	}
	r, err := generate.Run(ctx, l, prompt, generate.Options{MaxTokens: nTokens, IgnoreEOS: true, Context: 256})
	if err != nil {
		return nil, err
	}
	return &model{store: st.Store, manifest: st.Manifest, mc: st.MC, layout: st.Cuts[0], want: r.IDs}, nil
}

// logger sends warnings and errors to the test's output.
func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// copyTo puts the given stored files into the store of home.
func (m *model) copyTo(t *testing.T, home string, cids ...string) {
	t.Helper()
	st, err := shards.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range cids {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(m.store.Blocks.Export(context.Background(), cid.MustParse(s), pw)) }()
		got, err := st.Blocks.AddFile(context.Background(), pr, nil)
		pr.Close()
		if err != nil || got.String() != s {
			t.Fatalf("copy %s: got %s, %v", s, got, err)
		}
	}
}

// TestSwarmOverLinks runs 3 stages and a client 20 ms apart, on a route
// given by hand: the tokens are those of one process, and a token takes
// exactly the time of its 4 crossings.
func TestSwarmOverLinks(t *testing.T) {
	const hop = 20 * time.Millisecond
	m := getModel(t)
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		nw := link.New(1, link.Uniform(link.Link{Latency: hop}))
		defer nw.Close()
		var nodes []*node.Node
		for i, s := range m.layout.Shards {
			home := filepath.Join(t.TempDir(), fmt.Sprint("node", i))
			m.copyTo(t, home, s.CID, m.mc.String(), m.manifest.Tokenizer.CID)
			h, err := nw.Host(i, nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg := node.Config{Home: home, Shard: s.CID, Threads: 1, Host: h, Log: logger(t)}
			if i > 0 {
				cfg.Bootstrap = nodes[0].Addrs()
			}
			n, err := node.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			go n.Run(ctx)
			nodes = append(nodes, n)
		}
		h, err := nw.Host(len(nodes), nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: nodes[0].Addrs(), Host: h, Log: logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		var route []swarm.Hop
		for i, s := range m.layout.Shards {
			st := s.Stage()
			route = append(route, swarm.Hop{Peer: nodes[i].Host.Peerstore().PeerInfo(nodes[i].ID()), Shard: s.CID,
				Start: st.Start, End: st.End, HeadLo: st.HeadLo, HeadHi: st.HeadHi})
		}
		s, err := c.Open(ctx, route, swarm.SessionOptions{ModelID: m.manifest.ModelID, Vocab: 32000})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		t0 := time.Now()
		r, err := generate.Run(ctx, s, prompt, generate.Options{MaxTokens: nTokens, IgnoreEOS: true, Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		el := time.Since(t0)
		t.Logf("%d tokens in %v of simulated time (%v a token); step RTT %v", len(r.IDs), el, el/time.Duration(len(r.IDs)), s.StepRTT)
		if fmt.Sprint(r.IDs) != fmt.Sprint(m.want) {
			t.Fatalf("swarm generated\n%v\nlocal\n%v", r.IDs, m.want)
		}
		// Computing takes no time in the bubble: a step is the 4
		// crossings client → 0 → 1 → 2 → client, and nothing else.
		if want := 4 * hop; s.StepRTT < want || s.StepRTT > want+time.Millisecond {
			t.Errorf("a step took %v, want %v", s.StepRTT, want)
		}
		if want := time.Duration(len(r.IDs)) * 4 * hop; el < want || el > want+time.Duration(len(r.IDs))*time.Millisecond {
			t.Errorf("%d tokens took %v, want %v", len(r.IDs), el, want)
		}
	})
}

// TestSwarmDiscoversOverLossyLinks is the client's whole path (DHT,
// bitswap, status over GossipSub, pings, planning, the stage protocol)
// over jittery, lossy links: it knows one bootstrap address and the model
// CID. Stage 0 is served twice; the copy near the client must win.
func TestSwarmDiscoversOverLossyLinks(t *testing.T) {
	m := getModel(t)
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		// Hosts 0-2 serve stages 0-2, host 3 serves stage 0 again, host 4
		// is the client: 60 ms from host 0, 5 ms from host 3.
		const client, far, near = 4, 0, 3
		links := func(i, j int) link.Link {
			l := link.Link{Latency: 15 * time.Millisecond, Jitter: 3 * time.Millisecond, Loss: 0.01, Bandwidth: 10 << 20}
			switch [2]int{min(i, j), max(i, j)} {
			case [2]int{far, client}:
				l.Latency = 60 * time.Millisecond
			case [2]int{near, client}:
				l.Latency = 5 * time.Millisecond
			}
			return l
		}
		nw := link.New(2, links)
		defer nw.Close()
		shardOf := []int{0, 1, 2, 0}
		var nodes []*node.Node
		for i, k := range shardOf {
			s := m.layout.Shards[k]
			home := filepath.Join(t.TempDir(), fmt.Sprint("node", i))
			m.copyTo(t, home, s.CID, m.mc.String(), m.manifest.Tokenizer.CID)
			h, err := nw.Host(i, nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg := node.Config{Home: home, Shard: s.CID, Threads: 1, Host: h, Log: logger(t)}
			if i > 0 {
				cfg.Bootstrap = nodes[0].Addrs()
			}
			n, err := node.New(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			go n.Run(ctx)
			nodes = append(nodes, n)
		}
		h, err := nw.Host(client, nil)
		if err != nil {
			t.Fatal(err)
		}
		c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: nodes[1].Addrs(), Host: h, Log: logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		man, err := c.Resolve(ctx, m.mc)
		if err != nil {
			t.Fatal(err)
		}
		hops, r, provs, err := c.FindRoute(ctx, man, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range provs {
			t.Logf("provider %s layers %v: RTT %v", p.Peer.ID.ShortString(), p.Shard.Layers, p.RTT)
		}
		t.Logf("route %v, expected %.0f µs a token", r.IDs(), r.ExpectedMicros)
		if len(hops) != 3 || hops[0].Peer.ID != nodes[near].ID() {
			t.Fatalf("route %v: want 3 hops starting at the near copy %s", r.IDs(), nodes[near].ID().ShortString())
		}
		s, err := c.Open(ctx, hops, swarm.SessionOptions{ModelID: man.ModelID, Vocab: man.Config.Vocab})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		t0 := time.Now()
		got, err := generate.Run(ctx, s, prompt, generate.Options{MaxTokens: nTokens, IgnoreEOS: true, Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d tokens in %v of simulated time", len(got.IDs), time.Since(t0))
		if fmt.Sprint(got.IDs) != fmt.Sprint(m.want) {
			t.Fatalf("swarm generated\n%v\nlocal\n%v", got.IDs, m.want)
		}
	})
}
