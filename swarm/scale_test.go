package swarm_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// TestThirtyNodeSwarm runs 32 real nodes on loopback (libp2p hosts, the
// DHT, GossipSub, bitswap) serving overlapping cuts of a small synthetic
// model: five layouts, twelve distinct shards, each hosted two or three
// times. A client that knows one address and the model CID finds a route
// of least expected latency (equal to a brute-force search over the same
// inputs) and generates what the model generates in one process.
func TestThirtyNodeSwarm(t *testing.T) {
	if testing.Short() {
		t.Skip("32 nodes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg, err := shards.SynthConfig("tiny", 6)
	if err != nil {
		t.Fatal(err)
	}
	w, err := shards.Synth(cfg, ovrt.F32, 7)
	if err != nil {
		t.Fatal(err)
	}
	master, err := shards.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	m, mc, err := master.Import(ctx, shards.Source{Name: "tiny", Weights: w}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cuts := []string{"0:3,3:6", "0:2,2:4,4:6", "0:1,1:6/0:256,6:6/256:512", "0:4,4:6/0:128,6:6/128:512"}
	for _, cut := range cuts {
		stages, err := shards.ParseRanges(cut, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if m, mc, err = master.Split(ctx, mc, stages, ovrt.F32, "ranges", nil); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	for _, l := range m.Layouts {
		for _, s := range l.Shards {
			all = append(all, s.CID)
		}
	}
	if len(all) != 12 {
		t.Fatalf("%d shards", len(all))
	}
	f := &fixture{store: master, manifest: m, mc: mc}
	const n = 32
	// The first node is everyone's bootstrap.
	nodes := make([]*node.Node, n)
	homes := make([]string, n)
	for i := range n {
		homes[i] = filepath.Join(t.TempDir(), fmt.Sprint("n", i))
		f.copyTo(t, homes[i], all[i%len(all)], mc.String())
	}
	start := func(i int, boot []string) error {
		home, shard := homes[i], all[i%len(all)]
		cfg := node.Config{Home: home, Shard: shard, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, Bootstrap: boot}
		nd, err := node.New(ctx, cfg)
		if err != nil {
			return err
		}
		t.Cleanup(func() {
			// Close gives up on a part that hangs (node.ErrCloseTimeout,
			// seen once under -race on a loaded machine) and logs its
			// stacks; that is not what this test is about.
			if err := nd.Close(); err != nil {
				t.Logf("node %d: %v", i, err)
			}
		})
		go nd.Run(ctx)
		nodes[i] = nd
		return nil
	}
	if err := start(0, nil); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < n; i++ {
		if err := start(i, nodes[0].Addrs()); err != nil {
			t.Fatal(err)
		}
	}
	c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: nodes[5].Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.Resolve(ctx, mc)
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the DHT knows every host.
	var provs []swarm.Provider
	for {
		if provs, err = c.Discover(ctx, got); err != nil {
			t.Fatal(err)
		}
		if len(provs) == n || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
	}
	if len(provs) != n {
		found := map[string]bool{}
		for _, p := range provs {
			found[p.Peer.ID.String()+" "+p.Shard.CID] = true
		}
		var missing []string
		for i, nd := range nodes {
			if !found[nd.ID().String()+" "+all[i%len(all)]] {
				missing = append(missing, fmt.Sprintf("node %d (%s, shard %d)", i, nd.ID().ShortString(), i%len(all)))
			}
		}
		t.Fatalf("discovered %d of %d providers; missing %v", len(provs), n, missing)
	}
	hops, plan, err := c.Plan(got, provs, nil)
	if err != nil {
		t.Fatal(err)
	}
	servers, rtt := swarm.RouteInputs(provs)
	best, err := route.BruteForce(route.Model{Layers: cfg.Layers, Vocab: cfg.Vocab}, servers, rtt, route.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Cost != best.Cost {
		t.Fatalf("planned route costs %v µs, brute force finds %v", plan.Cost, best.Cost)
	}
	t.Logf("route %v, expected %.0f µs per token", plan.IDs(), plan.ExpectedMicros)

	s, err := c.Open(ctx, hops, swarm.SessionOptions{ModelID: got.ModelID, Vocab: cfg.Vocab})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prompt := []int{1, 17, 300, 42}
	res, err := generate.Run(ctx, s, prompt, generate.Options{MaxTokens: 24, IgnoreEOS: true, Context: cfg.Context})
	if err != nil {
		t.Fatal(err)
	}
	local, err := ovrt.Compile(w)
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	l, _ := generate.NewLocal(sample.Params{}, local)
	want, err := generate.Run(ctx, l, prompt, generate.Options{MaxTokens: 24, IgnoreEOS: true, Context: cfg.Context})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(res.IDs) != fmt.Sprint(want.IDs) {
		t.Fatalf("swarm %v\nlocal %v", res.IDs, want.IDs)
	}
}
