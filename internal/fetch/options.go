package fetch

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Defaults, used when the matching option is not given.
var defaults = config{
	concurrency:         32,
	stallTimeout:        time.Minute,
	providerSearchDelay: time.Second, // boxo's bitswap default
}

// config is a Service's configuration; see the options for each field.
type config struct {
	log                 *slog.Logger
	concurrency         int
	stallTimeout        time.Duration
	providerSearchDelay time.Duration
}

func (c *config) validate() error {
	if c.concurrency < 1 {
		return fmt.Errorf("%w: concurrency %d < 1", ErrBadOption, c.concurrency)
	}
	if c.stallTimeout < 0 {
		return fmt.Errorf("%w: negative stall timeout %v", ErrBadOption, c.stallTimeout)
	}
	if c.providerSearchDelay <= 0 {
		return fmt.Errorf("%w: provider search delay %v <= 0", ErrBadOption, c.providerSearchDelay)
	}
	return nil
}

// Option configures New.
type Option func(*config) error

// WithLogger sets the logger. The default is slog.Default() with the
// attribute subsystem=fetch.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", ErrBadOption)
		}
		c.log = l
		return nil
	}
}

// WithConcurrency sets how many blocks one Fetch has in flight at most
// (default 32, that is 8 MiB of 256 KiB leaves).
func WithConcurrency(n int) Option {
	return func(c *config) error {
		c.concurrency = n
		return nil
	}
}

// WithStallTimeout sets how long a Fetch waits for its next block before
// it gives up with ErrStalled (default one minute). Zero disables the
// check: a Fetch then waits for as long as its context allows.
func WithStallTimeout(d time.Duration) Option {
	return func(c *config) error {
		c.stallTimeout = d
		return nil
	}
}

// WithProviderSearchDelay sets how long bitswap waits for a block from
// the peers it is connected to before it asks the content routing for
// providers (default one second).
func WithProviderSearchDelay(d time.Duration) Option {
	return func(c *config) error {
		c.providerSearchDelay = d
		return nil
	}
}

// fetchConfig is one Fetch's configuration.
type fetchConfig struct {
	peers []peer.AddrInfo
}

// FetchOption configures one Fetch.
type FetchOption func(*fetchConfig) error

// FromPeers makes Fetch connect to peers before it asks for any block, so
// that bitswap asks them first: a way to fetch from a known node when the
// content routing has no provider record yet, or without routing at all.
// Fetch keeps those connections from being trimmed while it runs. Peers
// that cannot be reached are skipped; if none can, and the Service has no
// routing, Fetch fails with ErrUnreachable.
func FromPeers(peers ...peer.AddrInfo) FetchOption {
	return func(c *fetchConfig) error {
		for _, p := range peers {
			if err := p.ID.Validate(); err != nil {
				return fmt.Errorf("%w: peer %q: %w", ErrBadOption, p.ID, err)
			}
		}
		c.peers = append(c.peers, peers...)
		return nil
	}
}
