package swarm

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"

	"github.com/pipeshard/pipeshard/internal/fetch"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/shards"
)

// Config configures a client.
type Config struct {
	Home      string   // local store for manifests and tokenizers
	Bootstrap []string // full multiaddrs
	Listen    []string // default: TCP and QUIC on all interfaces (TCP only with SwarmKey)
	Log       *slog.Logger
	// Key is the client's identity (nil: a fresh one). A node's allow
	// list names clients by the peer ID of this key.
	Key crypto.PrivKey
	// SwarmKey joins a private swarm (TCP only); Allow, if not nil, lists
	// the only peers the client talks to. See node.HostOptions.
	SwarmKey pnet.PSK
	Allow    []peer.ID
	// Host, if set, is the client's libp2p host (a simulated one, say):
	// New uses it instead of starting one on Listen. The client owns it
	// from the call to New on: Close closes it, and so does a New that
	// fails.
	Host host.Host
	// Observer, if set, is told what the client's sessions do (metrics).
	Observer Observer
}

// Client talks to a swarm.
type Client struct {
	Host  host.Host
	DHT   *dht.IpfsDHT
	Store *shards.Store
	res   *results
	log   *slog.Logger
	obs   Observer
	live  live

	fetchOnce sync.Once
	fetch     *fetch.Service
	fetchErr  error

	PubSub   *pubsub.PubSub
	ctx      context.Context // lives until Close: background trackers
	cancel   context.CancelFunc
	trackMu  sync.Mutex
	trackers map[string]*status.Tracker // by model ID
}

// New starts a client host, joins the DHT through the bootstrap peers,
// and registers the result handler.
func New(ctx context.Context, cfg Config) (_ *Client, err error) {
	if cfg.Host != nil {
		defer func() {
			if err != nil {
				cfg.Host.Close()
			}
		}()
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	boot, err := node.ParseAddrs(cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	c := &Client{log: cfg.Log, res: &results{sessions: map[wire.SessionID]chan wire.Message{}}, obs: cfg.Observer}
	if c.obs == nil {
		c.obs = nopObserver{}
	}
	if c.Store, err = shards.Open(cfg.Home); err != nil {
		return nil, err
	}
	if cfg.Host != nil {
		c.Host = cfg.Host
	} else if c.Host, err = node.NewHost(node.HostOptions{Key: cfg.Key, Listen: cfg.Listen, SwarmKey: cfg.SwarmKey, Allow: cfg.Allow}); err != nil {
		c.Store.Close()
		return nil, err
	}
	c.Host.SetStreamHandler(wire.ResultProtocol, c.res.handler)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.trackers = map[string]*status.Tracker{}
	if c.PubSub, err = pubsub.NewGossipSub(c.ctx, c.Host); err != nil {
		c.Close()
		return nil, err
	}
	if c.DHT, err = node.JoinDHT(ctx, c.Host, dht.ModeClient, boot, c.log); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close shuts the client down.
func (c *Client) Close() error {
	if c.cancel != nil {
		c.cancel()
	}
	var parts []node.ClosePart
	if c.fetch != nil {
		parts = append(parts, node.ClosePart{Name: "fetch", Close: func() { c.fetch.Close() }})
	}
	if c.DHT != nil {
		parts = append(parts, node.ClosePart{Name: "DHT", Close: func() { c.DHT.Close() }})
	}
	if c.Host != nil {
		parts = append(parts, node.ClosePart{Name: "host", Close: func() { c.Host.Close() }})
	}
	if c.Store != nil {
		parts = append(parts, node.ClosePart{Name: "store", Close: func() { c.Store.Close() }})
	}
	return node.CloseParts(c.log, parts...)
}

// Status returns the tracker of model id's status records, joining its
// topic on first use.
func (c *Client) Status(modelID string) (*status.Tracker, error) {
	c.trackMu.Lock()
	defer c.trackMu.Unlock()
	if t := c.trackers[modelID]; t != nil {
		return t, nil
	}
	t, err := status.NewTracker(c.PubSub, modelID, status.DefaultTTL, nil)
	if err != nil {
		return nil, err
	}
	go t.Run(c.ctx)
	c.trackers[modelID] = t
	return t, nil
}

// Providers finds peers announcing c in the DHT.
//
// A provider record can come without addresses: the peer that stored it
// keeps them only as long as its peerstore does. Such a provider is
// looked up by its peer ID (the DHT's peer routing) before it is given
// up; those lookups run concurrently once the provider lookup is over.
func (c *Client) Providers(ctx context.Context, k cid.Cid, max int) ([]peer.AddrInfo, error) {
	var out []peer.AddrInfo
	var bare []peer.ID
	for p := range c.DHT.FindProvidersAsync(ctx, k, max) {
		switch {
		case p.ID == c.Host.ID():
		case len(p.Addrs) > 0 || len(c.Host.Peerstore().Addrs(p.ID)) > 0:
			out = append(out, p)
		default:
			bare = append(bare, p.ID)
		}
	}
	found := make([]peer.AddrInfo, len(bare))
	var wg sync.WaitGroup
	for i, id := range bare {
		wg.Go(func() {
			fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			ai, err := c.DHT.FindPeer(fctx, id)
			if err != nil {
				c.log.Debug("provider without addresses", "peer", id.ShortString(), "err", err)
				return
			}
			found[i] = ai
		})
	}
	wg.Wait()
	for _, ai := range found {
		if len(ai.Addrs) > 0 {
			out = append(out, ai)
		}
	}
	return out, nil
}

// Ping measures the round trip to p (the median of n pings).
func (c *Client) Ping(ctx context.Context, p peer.AddrInfo, n int) (time.Duration, error) {
	c.Host.Peerstore().AddAddrs(p.ID, p.Addrs, time.Hour)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rtts []time.Duration
	for r := range ping.Ping(ctx, c.Host, p.ID) {
		if r.Error != nil {
			return 0, r.Error
		}
		rtts = append(rtts, r.RTT)
		if len(rtts) == n {
			break
		}
	}
	if len(rtts) == 0 {
		return 0, fmt.Errorf("swarm: ping %s: no answer", p.ID.ShortString())
	}
	sort.Slice(rtts, func(i, j int) bool { return rtts[i] < rtts[j] })
	return rtts[len(rtts)/2], nil
}

// Open opens a session along route.
func (c *Client) Open(ctx context.Context, route []Hop, o SessionOptions) (*Session, error) {
	s, err := openSession(ctx, c.Host, c.res, route, o)
	if err != nil {
		return nil, err
	}
	s.obs, s.live = c.obs, &c.live
	c.live.add(s)
	c.obs.SessionOpened()
	return s, nil
}
