package node_test

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

// TestLayersAuto: two nodes serve layers [0, 3) of a model cut as [0, 3)
// + [3, 6) (and also stored whole). A node that joins with --layers auto
// and too little memory for the whole model takes [3, 6), the range
// nobody serves, fetching it from the swarm, which keeps the first node's
// copy in its store.
func TestLayersAuto(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg, _ := shards.SynthConfig("tiny", 6)
	w, err := shards.Synth(cfg, ovrt.F32, 3)
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
	m, mc, err = master.Split(ctx, mc, []shards.Stage{{Start: 0, End: 3}, {Start: 3, End: 6}}, ovrt.F32, "ranges", nil)
	if err != nil {
		t.Fatal(err)
	}
	whole, first, second := m.Layouts[0].Shards[0], m.Layouts[1].Shards[0], m.Layouts[1].Shards[1]
	copyTo := func(home string, cids ...string) {
		st, err := shards.Open(home)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		for _, c := range cids {
			var b bytes.Buffer
			if err := master.Blocks.Export(ctx, cid.MustParse(c), &b); err != nil {
				t.Fatal(err)
			}
			if _, err := st.Blocks.AddFile(ctx, &b, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	var nodes []*node.Node
	for i := range 2 {
		home := filepath.Join(t.TempDir(), fmt.Sprint("n", i))
		// The first node also keeps the rest of the model, to share.
		if i == 0 {
			copyTo(home, first.CID, second.CID, whole.CID, mc.String())
		} else {
			copyTo(home, first.CID, mc.String())
		}
		c := node.Config{Home: home, Shard: first.CID, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1}
		if i > 0 {
			c.Bootstrap = nodes[0].Addrs()
		}
		n, err := node.New(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		go n.Run(ctx)
		nodes = append(nodes, n)
	}
	// Let the DHT learn who provides the rest.
	time.Sleep(2 * time.Second)
	n, err := node.New(ctx, node.Config{Home: t.TempDir(), Model: mc.String(), Bootstrap: nodes[1].Addrs(),
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, MaxMemory: whole.Bytes - 1, ListenFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if n.Header.Start != 3 || n.Header.End != 6 {
		t.Fatalf("the joining node took layers [%d, %d), want the unserved [3, 6)", n.Header.Start, n.Header.End)
	}
	// Nothing fits: a clear error.
	_, err = node.New(ctx, node.Config{Home: t.TempDir(), Model: mc.String(), Bootstrap: nodes[0].Addrs(),
		Listen: []string{"/ip4/127.0.0.1/tcp/0"}, MaxMemory: 1000, ListenFor: time.Second})
	if err == nil {
		t.Fatal("a node with 1000 bytes of memory took a shard")
	}
	t.Log(err)
}
