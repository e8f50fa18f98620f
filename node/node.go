package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/pipeshard/pipeshard/internal/fetch"
	"github.com/pipeshard/pipeshard/internal/status"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

// DHTPrefix keeps pipeshard's DHT apart from the public IPFS DHT.
const DHTPrefix = "/pipeshard"

// Version is reported in status records.
const Version = "pipeshard/0.1"

// Sentinel errors.
var (
	ErrConfig   = errors.New("node: invalid configuration")
	ErrNoShard  = errors.New("node: shard not available")
	ErrTooLarge = errors.New("node: shard exceeds --max-memory")
	// ErrCloseTimeout: a part of the node did not close in time; Close
	// went on with the others and returned.
	ErrCloseTimeout = errors.New("node: close timed out")
)

// Config is a node's configuration.
type Config struct {
	Home      string        // identity key and block store
	Listen    []string      // multiaddrs (default: TCP and QUIC, any port)
	Bootstrap []string      // full multiaddrs of peers to join through
	Shard     string        // CID of the shard to host, or
	Model     string        // the model CID: host the shard the swarm needs most (--layers auto)
	ListenFor time.Duration // with Model: how long to gather the swarm's status first (default 6 s)
	Threads   int           // runtime threads (0: all cores)
	MaxMemory int64         // bound on shard + KV bytes (0: none)
	Reprovide time.Duration
	Stage     StageOptions
	// SwarmKey, if set, makes the node a member of a private swarm: only
	// peers holding the same key can connect, over TCP only (see
	// HostOptions.SwarmKey and ReadSwarmKey).
	SwarmKey pnet.PSK
	// Allow, if not nil, lists the only peers the node talks to (its own
	// ID is always allowed), clients included; Stage.Allowed is set from it.
	Allow []peer.ID
	// Progress, if set, sees a shard fetch's bytes.
	Progress func(done, total int64)
	Log      *slog.Logger
	// Host, if set, is the node's libp2p host (a simulated one, say):
	// New uses it instead of starting one from Home's identity key and
	// Listen. The node owns it from the call to New on: Close closes it,
	// and so does a New that fails.
	Host host.Host
}

// Validate checks c.
func (c *Config) Validate() error {
	switch {
	case c.Home == "":
		return fmt.Errorf("%w: no home directory", ErrConfig)
	case c.Shard == "" && c.Model == "":
		return fmt.Errorf("%w: no shard to host (--shard CID, or --model CID --layers auto)", ErrConfig)
	}
	if _, err := cid.Decode(c.Shard); err != nil && c.Shard != "" {
		return fmt.Errorf("%w: shard %q: %v", ErrConfig, c.Shard, err)
	}
	if _, err := ParseAddrs(c.Bootstrap); err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if len(c.SwarmKey) > 0 {
		if err := CheckPrivateAddrs(append(slices.Clone(c.Listen), c.Bootstrap...)); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	return nil
}

// Node is a volunteer: a libp2p host in the pipeshard DHT serving one
// shard over the stage protocol.
type Node struct {
	cfg       Config
	Host      host.Host
	DHT       *dht.IpfsDHT
	Store     *shards.Store
	Stage     *Stage
	Header    *shards.Header
	Fetch     *fetch.Service // serves the store's blocks; fetches a missing shard
	PubSub    *pubsub.PubSub // carries signed status records
	statusPub *status.Publisher
	model     *ovrt.Model
	log       *slog.Logger
	// announced are the CIDs the node provides: its shard, its model's
	// manifests and tokenizer.
	announced []cid.Cid
}

// New starts a node's host and DHT and loads its shard; Run serves.
func New(ctx context.Context, cfg Config) (_ *Node, err error) {
	if cfg.Host != nil {
		defer func() {
			if err != nil {
				cfg.Host.Close()
			}
		}()
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Reprovide == 0 {
		cfg.Reprovide = 12 * time.Hour
	}
	n := &Node{cfg: cfg, log: cfg.Log}
	if cfg.Allow != nil && cfg.Stage.Allowed == nil {
		allowed := map[peer.ID]bool{}
		for _, id := range cfg.Allow {
			allowed[id] = true
		}
		n.cfg.Stage.Allowed = func(p peer.ID) bool { return allowed[p] || p == n.Host.ID() }
	}
	var key crypto.PrivKey
	if cfg.Host == nil {
		if key, err = LoadIdentity(filepath.Join(cfg.Home, "identity.key")); err != nil {
			return nil, err
		}
	}
	if n.Store, err = shards.Open(cfg.Home); err != nil {
		return nil, err
	}
	if cfg.Host != nil {
		n.Host = cfg.Host
	} else if n.Host, err = NewHost(n.hostOptions(key)); err != nil {
		n.Store.Close()
		return nil, err
	}
	n.log = n.log.With("peer", n.Host.ID().ShortString())
	boot, _ := ParseAddrs(cfg.Bootstrap)
	if n.DHT, err = JoinDHT(ctx, n.Host, dht.ModeServer, boot, n.log); err != nil {
		n.Close()
		return nil, err
	}
	if n.Fetch, err = fetch.New(ctx, n.Host, n.DHT, n.Store.Blocks, fetch.WithLogger(n.log)); err != nil {
		n.Close()
		return nil, err
	}
	if n.PubSub, err = newPubSub(ctx, n); err != nil {
		n.Close()
		return nil, fmt.Errorf("node: pubsub: %w", err)
	}
	if n.cfg.Shard == "" {
		if n.cfg.ListenFor == 0 {
			n.cfg.ListenFor = 6 * time.Second
		}
		if n.cfg.Shard, err = n.chooseShard(ctx); err != nil {
			n.Close()
			return nil, err
		}
	}
	if err := n.ensureShard(ctx); err != nil {
		n.Close()
		return nil, err
	}
	if err := n.load(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// hostOptions are the options of the node's own host: its key, where it
// listens, its private swarm, and per-peer limits a little above the
// stage's, so that a peer meets the stage's typed errors first.
func (n *Node) hostOptions(key crypto.PrivKey) HostOptions {
	sessions := n.cfg.Stage.MaxSessions
	if sessions <= 0 {
		sessions = 64
	}
	return HostOptions{Key: key, Listen: n.cfg.Listen, SwarmKey: n.cfg.SwarmKey, Allow: n.cfg.Allow,
		PerPeer: PeerLimits{StageStreams: sessions + 16}}
}

// ensureShard fetches the shard from peers when the store lacks it,
// checking every block.
func (n *Node) ensureShard(ctx context.Context) error {
	c, _ := cid.Decode(n.cfg.Shard)
	if has, err := n.Store.Blocks.Has(ctx, c); err == nil && has {
		return nil
	}
	n.log.Info("fetching shard from peers", "shard", c)
	if err := n.Fetch.Fetch(ctx, c, n.cfg.Progress); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNoShard, c, err)
	}
	return nil
}

// load reads the shard from the store (every block verified) and
// compiles it.
func (n *Node) load(ctx context.Context) error {
	c, _ := cid.Decode(n.cfg.Shard)
	w, h, err := n.Store.LoadShard(ctx, c)
	if err != nil {
		return err
	}
	if n.cfg.MaxMemory > 0 && w.Bytes() > n.cfg.MaxMemory {
		return fmt.Errorf("%w: %s holds %d bytes, --max-memory is %d", ErrTooLarge, c, w.Bytes(), n.cfg.MaxMemory)
	}
	if n.cfg.MaxMemory > 0 && n.cfg.Stage.MaxKVBytes == 0 {
		n.cfg.Stage.MaxKVBytes = n.cfg.MaxMemory - w.Bytes()
	}
	m, err := ovrt.Compile(w, ovrt.WithThreads(n.cfg.Threads))
	if err != nil {
		return err
	}
	n.model, n.Header = m, h
	n.Stage = NewStage(n.Host, m, h.ModelID, c.String(), n.cfg.Stage, n.log)
	n.Stage.Calibrate(5)
	n.announced = []cid.Cid{c}
	if id, err := cid.Decode(h.ModelID); err == nil {
		n.announced = append(n.announced, id)
	}
	// Manifests of this model in the store, and its tokenizer.
	for _, root := range n.Store.Blocks.List() {
		if man, err := n.Store.Manifest(ctx, root); err == nil && man.ModelID == h.ModelID {
			n.announced = append(n.announced, root)
			if t, err := cid.Decode(man.Tokenizer.CID); err == nil {
				n.announced = append(n.announced, t)
			}
		}
	}
	return nil
}

// Addrs returns the node's full multiaddrs.
func (n *Node) Addrs() []string { return FullAddrs(n.Host) }

// ID returns the node's peer ID.
func (n *Node) ID() peer.ID { return n.Host.ID() }

// Run serves until ctx ends: the stage protocol, and provider records
// announced at start and every Reprovide.
func (n *Node) Run(ctx context.Context) error {
	go n.provideLoop(ctx)
	go n.runStatus(ctx)
	n.Stage.Run(ctx)
	return nil
}

func (n *Node) provideLoop(ctx context.Context) {
	pending := slices.Clone(n.announced)
	retry := time.Second
	// every is the wait before the next announce: it starts short and
	// doubles up to Reprovide (see settle).
	every := min(settle, n.cfg.Reprovide)
	// told is the routing table's size at the last announce.
	told := -1
	grow := time.NewTicker(growthCheck)
	defer grow.Stop()
	for {
		var failed []cid.Cid
		size := n.DHT.RoutingTable().Size()
		for _, c := range pending {
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := n.DHT.Provide(pctx, c, true)
			cancel()
			if err != nil && ctx.Err() == nil {
				// A lone first node has nobody to tell yet: try again
				// soon, without alarming anyone.
				n.log.Debug("provide", "cid", c, "err", err)
				failed = append(failed, c)
			}
		}
		var wait time.Duration
		pending = slices.Clone(n.announced)
		if len(failed) > 0 {
			wait, pending = retry, failed
			retry = min(2*retry, time.Minute)
		} else {
			if told < 0 {
				n.log.Info("announced", "cids", len(n.announced), "peers", size)
			} else {
				n.log.Debug("announced again", "cids", len(n.announced), "peers", size)
			}
			retry, told = time.Second, size
			wait, every = every, min(2*every, n.cfg.Reprovide)
		}
		deadline := time.After(wait)
	waiting:
		for {
			select {
			case <-ctx.Done():
				return
			case <-deadline:
				break waiting
			case <-grow.C:
				if len(failed) == 0 && tableGrew(told, n.DHT.RoutingTable().Size()) {
					break waiting
				}
			}
		}
	}
}

// A node announces its CIDs again, sooner than Reprovide, while it is
// young, because an announce can land in the wrong place and say nothing:
//
//   - A node that joins a young swarm stores its provider records on the
//     few peers it knows, which are the closest to its CIDs only until
//     more peers join, and a client's lookup walks to the peers closest
//     to a CID, so it may never ask the early ones. The node announces
//     again each time its routing table has doubled (tableGrew), checked
//     every growthCheck: at most log2(swarm size) extra announces.
//   - The DHT's Provide reports success once it has looked the closest
//     peers up, even when every store to them failed (a loaded peer, a
//     dropped connection). The node announces again settle after its
//     first announce, then at doubling intervals up to Reprovide: about
//     eleven extra announces in the first 12 hours.
const (
	settle      = 30 * time.Second
	growthCheck = 10 * time.Second
)

// tableGrew reports whether a routing table that held then peers at the
// last announce and holds now peers has grown enough to announce again.
func tableGrew(then, now int) bool { return now >= 2*max(then, 1) }

// Close stops the node's host and closes its store.
func (n *Node) Close() error {
	var parts []ClosePart
	if n.model != nil {
		parts = append(parts, ClosePart{"model", n.model.Close})
	}
	if n.Fetch != nil {
		parts = append(parts, ClosePart{"fetch", func() { n.Fetch.Close() }})
	}
	if n.DHT != nil {
		parts = append(parts, ClosePart{"DHT", func() { n.DHT.Close() }})
	}
	if n.Host != nil {
		parts = append(parts, ClosePart{"host", func() { n.Host.Close() }})
	}
	if n.Store != nil {
		parts = append(parts, ClosePart{"store", func() { n.Store.Close() }})
	}
	return CloseParts(n.log, parts...)
}
