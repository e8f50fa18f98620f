package swarm_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// fixture is stories15M imported and cut, shared by the tests of this
// package (importing takes seconds).
type fixture struct {
	dir      string
	store    *shards.Store
	manifest *shards.Manifest
	mc       cid.Cid
	whole    *ovrt.Model
	layouts  map[int]shards.Layout // by stage count
	// headLast is 2 stages with the whole head on the second (the
	// balanced cuts split it).
	headLast shards.Layout
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
)

func getFixture(t testing.TB) *fixture {
	t.Helper()
	model, tok := testmodel.Stories15M(t)
	fixOnce.Do(func() { fix, fixErr = buildFixture(model, tok) })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return fix
}

func buildFixture(model, tok string) (*fixture, error) {
	dir, err := os.MkdirTemp("", "swarm-fixture-")
	if err != nil {
		return nil, err
	}
	st, err := teststore.Build(context.Background(), dir, model, tok, teststore.Cut{Balanced: 2}, teststore.Cut{Balanced: 3},
		teststore.Cut{Ranges: []shards.Stage{{Start: 0, End: 3}, {Start: 3, End: 6}}})
	if err != nil {
		return nil, err
	}
	f := &fixture{dir: dir, store: st.Store, manifest: st.Manifest, mc: st.MC,
		layouts: map[int]shards.Layout{1: st.Whole, 2: st.Cuts[0], 3: st.Cuts[1]}, headLast: st.Cuts[2]}
	if f.whole, err = ovrt.Compile(st.Weights); err != nil {
		return nil, err
	}
	return f, nil
}

// copyTo puts the given stored files into the store of home.
func (f *fixture) copyTo(t testing.TB, home string, cids ...string) {
	t.Helper()
	st, err := shards.Open(home)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, s := range cids {
		var b bytes.Buffer
		if err := f.store.Blocks.Export(context.Background(), cid.MustParse(s), &b); err != nil {
			t.Fatal(err)
		}
		got, err := st.Blocks.AddFile(context.Background(), &b, nil)
		if err != nil || got.String() != s {
			t.Fatalf("copy %s: got %s, %v", s, got, err)
		}
	}
}

// startNodes runs one node per shard of layout, the first the bootstrap
// of the others, on loopback.
func startNodes(t testing.TB, f *fixture, l shards.Layout) []*node.Node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	var nodes []*node.Node
	for i, s := range l.Shards {
		home := filepath.Join(t.TempDir(), fmt.Sprint("node", i))
		f.copyTo(t, home, s.CID, f.mc.String(), f.manifest.Tokenizer.CID)
		cfg := node.Config{Home: home, Shard: s.CID, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1}
		if i > 0 {
			cfg.Bootstrap = nodes[0].Addrs()
		}
		n, err := node.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		go n.Run(ctx)
		nodes = append(nodes, n)
	}
	return nodes
}

func routeOf(l shards.Layout, nodes []*node.Node) []swarm.Hop {
	var r []swarm.Hop
	for i, s := range l.Shards {
		st := s.Stage()
		r = append(r, swarm.Hop{Peer: nodes[i].Host.Peerstore().PeerInfo(nodes[i].ID()), Shard: s.CID,
			Start: st.Start, End: st.End, HeadLo: st.HeadLo, HeadHi: st.HeadHi})
	}
	return r
}

func localIDs(t testing.TB, f *fixture, prompt []int, n int, p sample.Params) []int {
	t.Helper()
	l, err := generate.NewLocal(p, f.whole)
	if err != nil {
		t.Fatal(err)
	}
	r, err := generate.Run(context.Background(), l, prompt, generate.Options{MaxTokens: n, IgnoreEOS: true, Seed: p.Seed, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	return r.IDs
}

func TestRouteGeneratesLikeLocal(t *testing.T) {
	f := getFixture(t)
	prompt := []int{1, 450, 8338, 265}
	for _, n := range []int{1, 2, 3} {
		nodes := startNodes(t, f, f.layouts[n])
		c, err := swarm.New(context.Background(), swarm.Config{Home: t.TempDir(), Bootstrap: nodes[0].Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for _, p := range []sample.Params{{}, {Temp: 0.9, TopP: 0.9, Seed: 11}} {
			t.Run(fmt.Sprintf("stages=%d/temp=%v", n, p.Temp), func(t *testing.T) {
				s, err := c.Open(context.Background(), routeOf(f.layouts[n], nodes), swarm.SessionOptions{ModelID: f.manifest.ModelID, Sampling: p, Vocab: 32000, Timeout: 20 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				defer s.Close()
				r, err := generate.Run(context.Background(), s, prompt, generate.Options{MaxTokens: 30, IgnoreEOS: true, Seed: p.Seed, Context: 256})
				if err != nil {
					t.Fatal(err)
				}
				want := localIDs(t, f, prompt, 30, p)
				if fmt.Sprint(r.IDs) != fmt.Sprint(want) {
					t.Fatalf("swarm generated\n%v\nlocal\n%v", r.IDs, want)
				}
				if len(s.Trace) != n {
					t.Fatalf("trace has %d hops, want %d", len(s.Trace), n)
				}
				// A step's result carries the hops' compute from their trace.
				out, err := s.Step(context.Background(), generate.Step{Pos: len(prompt) + 29, IDs: []int32{int32(r.IDs[29])}, Uniform: []float64{0.5}})
				if err != nil {
					t.Fatal(err)
				}
				var compute time.Duration
				for _, h := range s.Trace {
					compute += time.Duration(h.Compute) * time.Microsecond
				}
				if out.Compute != compute || compute <= 0 {
					t.Fatalf("step's compute %v, the trace's %v", out.Compute, compute)
				}
			})
		}
	}
}

// TestDiscoverFromBootstrapAndModelCID is the client's whole path: it
// knows only one bootstrap address and the model CID.
func TestDiscoverFromBootstrapAndModelCID(t *testing.T) {
	f := getFixture(t)
	nodes := startNodes(t, f, f.layouts[3])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: nodes[1].Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.Resolve(ctx, f.mc)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Tokenizer(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	// Every node also holds a record naming a peer nobody can reach and
	// whose addresses nobody knows, as after a provider left long ago:
	// the client looks it up by ID, gives it up, and finds the rest.
	ghost, err := peer.Decode("12D3KooWQtdKRqhgcdhAvTCGPZ8RCjodQPv8KCa9fjASirc3jmuH")
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		for _, sh := range f.layouts[3].Shards {
			if err := nd.DHT.ProviderStore().AddProvider(ctx, cid.MustParse(sh.CID).Hash(), peer.AddrInfo{ID: ghost}); err != nil {
				t.Fatal(err)
			}
		}
	}
	hops, r, provs, err := c.FindRoute(ctx, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d providers; route %v, expected %.0f µs per token", len(provs), r.IDs(), r.ExpectedMicros)
	if len(hops) != 3 {
		t.Fatalf("route of %d hops, the swarm serves one 3-stage layout", len(hops))
	}
	if len(provs) != len(nodes) {
		t.Fatalf("%d providers, want the %d nodes: %v", len(provs), len(nodes), provs)
	}
	s, err := c.Open(ctx, hops, swarm.SessionOptions{ModelID: m.ModelID, Vocab: m.Config.Vocab})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := tok.Encode("Once upon a time", true)
	got, err := generate.Run(ctx, s, prompt, generate.Options{MaxTokens: 20, IgnoreEOS: true, Context: 256})
	if err != nil {
		t.Fatal(err)
	}
	if want := localIDs(t, f, prompt, 20, sample.Params{}); fmt.Sprint(got.IDs) != fmt.Sprint(want) {
		t.Fatalf("swarm %v, local %v", got.IDs, want)
	}
	// Every node's signed status arrives, with its range and a measured
	// decode time.
	tr, err := c.Status(m.ModelID)
	if err != nil {
		t.Fatal(err)
	}
	err = tr.Wait(ctx, func(rs []status.Record) bool {
		measured := 0
		for _, r := range rs {
			if r.ComputeMicros > 0 {
				measured++
			}
		}
		return measured == 3
	})
	if err != nil {
		t.Fatalf("status records: %v (have %d)", err, len(tr.Records()))
	}
}
