package fetch

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/ipfs/boxo/bitswap"
	bsnet "github.com/ipfs/boxo/bitswap/network/bsnet"
	cid "github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/routing"

	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// Service fetches UnixFS files into a store over bitswap and serves the
// store's blocks to other peers. It is safe for concurrent use; several
// Fetches, of the same file or of different ones, may run at once.
//
// Goroutines: bitswap's client and server run from New until Close. Each
// Fetch runs its own workers and watchdog, and they all exit before Fetch
// returns. Close interrupts the Fetches in flight (they return ErrClosed),
// waits for them to return, then stops bitswap.
type Service struct {
	h     host.Host
	rt    routing.ContentRouting // nil without routing
	store *blockstore.Store
	bs    *bitswap.Bitswap
	cfg   config
	log   *slog.Logger

	// closing is closed by Close; every Fetch watches it.
	closing chan struct{}

	mu      sync.Mutex // guards closed and the Add side of running
	closed  bool
	running sync.WaitGroup // Fetches in flight

	// Blocks and bytes that Fetch received from the network and stored.
	blocksFetched atomic.Int64
	bytesFetched  atomic.Int64
}

// New starts a bitswap node on h that serves the blocks of store (every
// block is re-hashed as it is read, so a corrupt one is never sent: the
// peer is told we do not have it) and that Fetch uses to fill store.
//
// rt is the content routing (the DHT) that bitswap asks for providers when
// the peers it is connected to do not have a block, and that Provide
// announces to; it may be nil, and then blocks come only from connected
// peers (see FromPeers).
//
// ctx passes its values (not its cancellation) on to bitswap: the service
// runs until Close. The host and the store stay the caller's: Close
// closes neither. One Service per host.
func New(ctx context.Context, h host.Host, rt routing.ContentRouting, store *blockstore.Store, opts ...Option) (*Service, error) {
	if h == nil || store == nil {
		return nil, fmt.Errorf("%w: nil host or store", ErrBadOption)
	}
	cfg := defaults
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.log == nil {
		cfg.log = slog.Default().With("subsystem", "fetch")
	}

	// A nil rt must reach bitswap as an untyped nil, not a typed one.
	var finder routing.ContentDiscovery
	if rt != nil {
		finder = rt
	}
	bs := bitswap.New(context.WithoutCancel(ctx), bsnet.NewFromIpfsHost(h), finder, store.Blockstore(),
		bitswap.ProviderSearchDelay(cfg.providerSearchDelay))
	return &Service{
		h:       h,
		rt:      rt,
		store:   store,
		bs:      bs,
		cfg:     cfg,
		log:     cfg.log,
		closing: make(chan struct{}),
	}, nil
}

// Close interrupts the Fetches in flight, waits for them to return, and
// stops bitswap. It does not close the host or the store. Later calls do
// nothing.
func (s *Service) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	s.mu.Unlock()

	s.running.Wait()
	return s.bs.Close()
}

// begin registers a Fetch in flight; it reports false after Close. The
// caller calls s.running.Done when it returns.
func (s *Service) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.running.Add(1)
	return true
}

// Provide announces through the content routing that this node has the
// file c. The file must be complete in the store (Has); only its root is
// announced, as peers ask for the rest in the same bitswap session.
func (s *Service) Provide(ctx context.Context, c cid.Cid) error {
	if s.rt == nil {
		return ErrNoRouting
	}
	if s.isClosed() {
		return ErrClosed
	}
	ok, err := s.store.Has(ctx, c)
	if err != nil {
		return fmt.Errorf("fetch: provide %s: %w", c, err)
	}
	if !ok {
		return fmt.Errorf("fetch: provide %s: %w", c, blockstore.ErrMissing)
	}
	if err := s.rt.Provide(ctx, c, true); err != nil {
		return fmt.Errorf("fetch: provide %s: %w", c, err)
	}
	return nil
}

func (s *Service) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Stats counts what the Service has moved since New.
type Stats struct {
	// BlocksFetched and BytesFetched count the blocks that Fetch received
	// from the network and stored (blocks it found in the store are not
	// counted, nor duplicates bitswap dropped).
	BlocksFetched, BytesFetched int64
	// BlocksSent and BytesSent count the blocks bitswap served to peers.
	BlocksSent, BytesSent int64
}

// Stats returns the counters so far.
func (s *Service) Stats() Stats {
	st := Stats{
		BlocksFetched: s.blocksFetched.Load(),
		BytesFetched:  s.bytesFetched.Load(),
	}
	if bst, err := s.bs.Stat(); err == nil {
		st.BlocksSent = int64(bst.BlocksSent)
		st.BytesSent = int64(bst.DataSent)
	}
	return st
}
