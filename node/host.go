package node

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// LoadIdentity reads the Ed25519 identity key in path, creating it (mode
// 0600) when absent, so that a node keeps its peer ID across restarts.
func LoadIdentity(path string) (crypto.PrivKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		k, err := crypto.UnmarshalPrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("node: identity key %s: %w", path, err)
		}
		return k, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("node: identity key: %w", err)
	}
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, err
	}
	b, err = crypto.MarshalPrivateKey(k)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("node: write identity key: %w", err)
	}
	return k, nil
}

// HostOptions configure NewHost.
type HostOptions struct {
	Key    crypto.PrivKey // nil: a fresh key
	Listen []string       // multiaddrs; default: TCP and QUIC on all interfaces, any port
	// Limits scale the resource manager; zero values take libp2p's
	// defaults scaled to the machine.
	Limits rcmgr.ScalingLimitConfig
}

// DefaultListen is where a node listens when not told.
var DefaultListen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}

// NewHost returns a libp2p host for pipeshard: TCP and QUIC, Noise,
// yamux, and the resource manager's limits. Clients use it too.
func NewHost(o HostOptions) (host.Host, error) {
	if len(o.Listen) == 0 {
		o.Listen = DefaultListen
	}
	limits := o.Limits
	if limits.ServiceBaseLimit.Streams == 0 {
		limits = rcmgr.DefaultLimits
	}
	libp2p.SetDefaultServiceLimits(&limits)
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.ListenAddrStrings(o.Listen...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Transport(quic.NewTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(rm),
	}
	if o.Key != nil {
		opts = append(opts, libp2p.Identity(o.Key))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("node: libp2p host: %w", err)
	}
	return h, nil
}

// FullAddrs returns h's addresses with its peer ID, as others dial them.
func FullAddrs(h host.Host) []string {
	var out []string
	for _, a := range h.Addrs() {
		out = append(out, a.Encapsulate(ma.StringCast("/p2p/"+h.ID().String())).String())
	}
	return out
}

// ParseAddrs turns full multiaddrs (with /p2p/ID) into peer infos.
func ParseAddrs(addrs []string) ([]peer.AddrInfo, error) {
	var mas []ma.Multiaddr
	for _, a := range addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return nil, fmt.Errorf("node: address %q: %w", a, err)
		}
		mas = append(mas, m)
	}
	infos, err := peer.AddrInfosFromP2pAddrs(mas...)
	if err != nil {
		return nil, fmt.Errorf("node: addresses %v: %w", addrs, err)
	}
	return infos, nil
}

// ErrBootstrap is returned when no bootstrap peer can be reached.
var ErrBootstrap = errors.New("node: no bootstrap peer reachable")

// JoinDHT starts the pipeshard DHT (under DHTPrefix, apart from the
// public IPFS DHT) on h, as a server or a client, and connects to the
// bootstrap peers. It fails only when there were peers and none answered.
func JoinDHT(ctx context.Context, h host.Host, mode dht.ModeOpt, boot []peer.AddrInfo, log *slog.Logger) (*dht.IpfsDHT, error) {
	d, err := dht.New(h, dht.Mode(mode), dht.ProtocolPrefix(DHTPrefix), dht.BootstrapPeers(boot...))
	if err != nil {
		return nil, fmt.Errorf("node: dht: %w", err)
	}
	reached := 0
	var last error
	for _, b := range boot {
		// A busy bootstrap peer may time out a handshake: try three times.
		var err error
		for attempt := range 3 {
			if err = h.Connect(ctx, b); err == nil || ctx.Err() != nil {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(attempt+1) * time.Second):
			}
		}
		if err != nil {
			log.Warn("bootstrap peer unreachable", "peer", b.ID, "err", err)
			last = err
			continue
		}
		reached++
	}
	if len(boot) > 0 && reached == 0 {
		d.Close()
		return nil, fmt.Errorf("%w: %w", ErrBootstrap, last)
	}
	if err := d.Bootstrap(ctx); err != nil {
		d.Close()
		return nil, fmt.Errorf("node: dht bootstrap: %w", err)
	}
	return d, nil
}
