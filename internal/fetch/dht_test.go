package fetch

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	cid "github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
)

// newDHT starts a server-mode DHT with pipeshard's protocol prefix on h,
// knowing the bootstrap peers.
func newDHT(t testing.TB, h host.Host, bootstrap ...peer.AddrInfo) *dht.IpfsDHT {
	t.Helper()
	d, err := dht.New(h,
		dht.Mode(dht.ModeServer),
		dht.ProtocolPrefix("/pipeshard"),
		dht.BootstrapPeers(bootstrap...),
		dht.DisableAutoRefresh(),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// waitFor polls cond until it holds or ctx is done.
func waitFor(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestFetchThroughDHT has A provide a file on a four-node DHT and C, which
// knows only the bootstrap node, find A through the DHT and fetch it.
func TestFetchThroughDHT(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()

	boot := newHost(t)
	bootDHT := newDHT(t, boot)
	bootInfo := peer.AddrInfo{ID: boot.ID(), Addrs: boot.Addrs()}
	hosts := []host.Host{boot}
	dhts := []*dht.IpfsDHT{bootDHT}
	var (
		nodes   []*node
		finders []*recordingRouting
	)
	for range 3 { // A, C and a bystander
		h := newHost(t)
		d := newDHT(t, h, bootInfo)
		rt := &recordingRouting{ContentRouting: d}
		hosts = append(hosts, h)
		dhts = append(dhts, d)
		finders = append(finders, rt)
		nodes = append(nodes, newNode(t, h, rt, WithProviderSearchDelay(100*time.Millisecond)))
	}
	for i, d := range dhts[1:] {
		if err := hosts[i+1].Connect(ctx, bootInfo); err != nil {
			t.Fatal(err)
		}
		if err := d.Bootstrap(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range dhts {
		waitFor(ctx, t, "routing tables", func() bool { return d.RoutingTable().Size() >= 1 })
	}
	// Each node looks itself up, so that the others land in its table.
	for _, d := range dhts[1:] {
		if err := <-d.RefreshRoutingTable(); err != nil {
			t.Logf("refresh: %v", err)
		}
	}

	a, c := nodes[0], nodes[1]
	data := testBytes(7, fileSize)
	root := addFile(t, a.store, data)
	if err := a.svc.Provide(ctx, root); err != nil {
		t.Fatal(err)
	}

	// C must learn where A is from the DHT: drop what it knows of A.
	c.h.Network().ClosePeer(a.h.ID())
	c.h.Peerstore().ClearAddrs(a.h.ID())
	if c.h.Network().Connectedness(a.h.ID()) == network.Connected {
		t.Fatal("C is still connected to A")
	}

	p := &progressLog{t: t}
	if err := c.svc.Fetch(ctx, root, p.report); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, c.store, root); !bytes.Equal(got, data) {
		t.Fatal("fetched file differs")
	}
	if p.done != fileSize {
		t.Errorf("progress ended at %d, want %d", p.done, fileSize)
	}
	if !finders[1].found(a.h.ID()) {
		t.Errorf("C's DHT never named A as a provider")
	}
}

// recordingRouting records the providers its FindProvidersAsync returns.
type recordingRouting struct {
	routing.ContentRouting
	mu        sync.Mutex
	providers map[peer.ID]bool
}

func (r *recordingRouting) FindProvidersAsync(ctx context.Context, c cid.Cid, n int) <-chan peer.AddrInfo {
	in := r.ContentRouting.FindProvidersAsync(ctx, c, n)
	out := make(chan peer.AddrInfo)
	go func() {
		defer close(out)
		for ai := range in {
			r.mu.Lock()
			if r.providers == nil {
				r.providers = make(map[peer.ID]bool)
			}
			r.providers[ai.ID] = true
			r.mu.Unlock()
			select {
			case out <- ai:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (r *recordingRouting) found(p peer.ID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.providers[p]
}
