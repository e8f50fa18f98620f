package node

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/noise"
	quic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/pipeshard/pipeshard/internal/wire"
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
	Listen []string       // multiaddrs; default: TCP and QUIC on all interfaces, any port (TCP only with SwarmKey)
	// Limits scale the resource manager; zero values take libp2p's
	// defaults scaled to the machine.
	Limits rcmgr.ScalingLimitConfig
	// SwarmKey, if set, makes the host a member of a private swarm: every
	// connection is wrapped in libp2p's pnet (XSalsa20 with this
	// pre-shared key) before its security handshake, so a peer without the
	// key cannot even negotiate. pnet works over TCP only; a private host
	// refuses QUIC listen addresses (ErrPrivateQUIC) and dials TCP only.
	SwarmKey pnet.PSK
	// Allow, if not nil, is the only set of peers the host connects to
	// or accepts (its own ID is always allowed): a connection gater
	// refuses every other peer, inbound and outbound, once its peer ID is
	// authenticated. An empty, non-nil list allows nobody but the host.
	Allow []peer.ID
	// PerPeer bounds what one remote peer may hold on the host, through
	// the resource manager's per-peer scope. Zero fields keep libp2p's
	// defaults (8 connections, 512 streams, 64 MiB and up, scaled to the
	// machine).
	PerPeer PeerLimits
}

// PeerLimits are the resource manager's bounds on one remote peer.
type PeerLimits struct {
	Conns   int   // connections, inbound and outbound
	Streams int   // streams of every protocol, inbound and outbound
	Memory  int64 // bytes the peer's connections and streams may reserve
	// StageStreams bounds the inbound stage streams one peer may hold
	// open (one per session it carries). A node sets it a little above
	// its session limit, so that the stage's typed errors are what a peer
	// normally meets; this is the backstop.
	StageStreams int
}

// Private-swarm and allow-list errors.
var (
	ErrSwarmKey    = errors.New("node: bad swarm key")
	ErrAllowList   = errors.New("node: bad allow list")
	ErrPrivateQUIC = errors.New("node: a private swarm (swarm key) runs over TCP only: QUIC cannot use a pre-shared key")
)

// DefaultListen is where a node listens when not told.
var DefaultListen = []string{"/ip4/0.0.0.0/tcp/0", "/ip4/0.0.0.0/udp/0/quic-v1"}

// DefaultPrivateListen is where a node of a private swarm listens when
// not told: pnet needs TCP.
var DefaultPrivateListen = []string{"/ip4/0.0.0.0/tcp/0"}

// NewHost returns a libp2p host for pipeshard: TCP and QUIC, Noise,
// yamux, and the resource manager's limits. Clients use it too. With a
// swarm key it is TCP only, every connection under the key; with an
// allow list it talks to listed peers only. Every connection is
// encrypted and authenticated: Noise on TCP, TLS 1.3 inside QUIC; there
// is no option for a plaintext or unauthenticated transport.
func NewHost(o HostOptions) (host.Host, error) {
	private := len(o.SwarmKey) > 0
	if len(o.Listen) == 0 {
		o.Listen = DefaultListen
		if private {
			o.Listen = DefaultPrivateListen
		}
	}
	if private {
		if len(o.SwarmKey) != 32 {
			return nil, fmt.Errorf("%w: %d bytes, want 32", ErrSwarmKey, len(o.SwarmKey))
		}
		if err := CheckPrivateAddrs(o.Listen); err != nil {
			return nil, err
		}
	}
	if o.Key == nil {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return nil, err
		}
		o.Key = k
	}
	limits := o.Limits
	if limits.ServiceBaseLimit.Streams == 0 {
		limits = rcmgr.DefaultLimits
	}
	// The Add* methods write to maps: never the caller's (or libp2p's).
	limits.ServiceLimits = maps.Clone(limits.ServiceLimits)
	limits.ServicePeerLimits = maps.Clone(limits.ServicePeerLimits)
	limits.ProtocolLimits = maps.Clone(limits.ProtocolLimits)
	limits.ProtocolPeerLimits = maps.Clone(limits.ProtocolPeerLimits)
	libp2p.SetDefaultServiceLimits(&limits)
	o.PerPeer.apply(&limits)
	rm, err := rcmgr.NewResourceManager(rcmgr.NewFixedLimiter(limits.AutoScale()))
	if err != nil {
		return nil, fmt.Errorf("node: resource manager: %w", err)
	}
	opts := []libp2p.Option{
		libp2p.Identity(o.Key),
		libp2p.ListenAddrStrings(o.Listen...),
		libp2p.Transport(tcp.NewTCPTransport),
		libp2p.Security(noise.ID, noise.New),
		libp2p.Muxer(yamux.ID, yamux.DefaultTransport),
		libp2p.ResourceManager(rm),
	}
	if private {
		// go-libp2p refuses to build a QUIC transport with a PSK.
		opts = append(opts, libp2p.PrivateNetwork(o.SwarmKey))
	} else {
		opts = append(opts, libp2p.Transport(quic.NewTransport))
	}
	if o.Allow != nil {
		self, err := peer.IDFromPrivateKey(o.Key)
		if err != nil {
			return nil, fmt.Errorf("node: identity: %w", err)
		}
		opts = append(opts, libp2p.ConnectionGater(newAllowGater(self, o.Allow)))
	}
	h, err := libp2p.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("node: libp2p host: %w", err)
	}
	return h, nil
}

// apply writes the set fields of l into the per-peer limits of c, as
// exact values (no scaling with the machine's memory).
func (l PeerLimits) apply(c *rcmgr.ScalingLimitConfig) {
	b, inc := &c.PeerBaseLimit, &c.PeerLimitIncrease
	if l.Conns > 0 {
		b.Conns, b.ConnsInbound, b.ConnsOutbound = l.Conns, l.Conns, l.Conns
		inc.Conns, inc.ConnsInbound, inc.ConnsOutbound = 0, 0, 0
	}
	if l.Streams > 0 {
		b.Streams, b.StreamsInbound, b.StreamsOutbound = l.Streams, l.Streams, l.Streams
		inc.Streams, inc.StreamsInbound, inc.StreamsOutbound = 0, 0, 0
	}
	if l.Memory > 0 {
		b.Memory, inc.Memory = l.Memory, 0
	}
	if l.StageStreams > 0 {
		n := l.StageStreams
		c.AddProtocolPeerLimit(protocolID(wire.StageProtocol),
			rcmgr.BaseLimit{StreamsInbound: n, StreamsOutbound: n, Streams: 2 * n, Memory: c.ProtocolPeerBaseLimit.Memory},
			rcmgr.BaseLimitIncrease{Memory: c.ProtocolPeerLimitIncrease.Memory})
	}
}

// CheckPrivateAddrs refuses addresses a private swarm cannot use: pnet
// protects TCP connections only, so QUIC, WebTransport and WebRTC (UDP)
// addresses are an error rather than a silent hole.
func CheckPrivateAddrs(addrs []string) error {
	for _, a := range addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			return fmt.Errorf("node: address %q: %w", a, err)
		}
		if _, err := m.ValueForProtocol(ma.P_UDP); err == nil {
			return fmt.Errorf("%w: %s (use a /tcp/ address)", ErrPrivateQUIC, a)
		}
	}
	return nil
}

// swarmKeyHeader starts the swarm key file format ipfs and go-libp2p use.
const swarmKeyHeader = "/key/swarm/psk/1.0.0/"

// NewSwarmKey returns a fresh random swarm key in the text format ipfs
// uses (/key/swarm/psk/1.0.0/, /base16/, 64 hex digits), for a file
// every member of a private swarm holds.
func NewSwarmKey() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	return []byte(swarmKeyHeader + "\n/base16/\n" + hex.EncodeToString(k) + "\n"), nil
}

// ParseSwarmKey reads a swarm key in the ipfs format (/base16/, /base64/
// or /bin/ encoding).
func ParseSwarmKey(b []byte) (pnet.PSK, error) {
	if !bytes.HasPrefix(b, []byte(swarmKeyHeader)) {
		return nil, fmt.Errorf("%w: does not start with %s", ErrSwarmKey, swarmKeyHeader)
	}
	k, err := pnet.DecodeV1PSK(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSwarmKey, err)
	}
	if bytes.Equal(k, make([]byte, len(k))) {
		return nil, fmt.Errorf("%w: the key is all zeros", ErrSwarmKey)
	}
	return k, nil
}

// ReadSwarmKey reads the swarm key file at path.
func ReadSwarmKey(path string) (pnet.PSK, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSwarmKey, err)
	}
	k, err := ParseSwarmKey(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// ParseAllow reads an allow list: the path of a file with one peer ID a
// line (blank lines and # comments skipped), or peer IDs separated by
// commas. A list that names nobody is an error: it would shut the host
// off from every peer.
func ParseAllow(spec string) ([]peer.ID, error) {
	spec = strings.TrimSpace(spec)
	var fields []string
	if st, err := os.Stat(spec); err == nil && !st.IsDir() {
		b, err := os.ReadFile(spec)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrAllowList, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			line, _, _ := strings.Cut(sc.Text(), "#")
			if line = strings.TrimSpace(line); line != "" {
				fields = append(fields, line)
			}
		}
		if err := sc.Err(); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrAllowList, spec, err)
		}
	} else {
		for _, f := range strings.Split(spec, ",") {
			if f = strings.TrimSpace(f); f != "" {
				fields = append(fields, f)
			}
		}
	}
	var ids []peer.ID
	for _, f := range fields {
		id, err := peer.Decode(f)
		if err != nil {
			return nil, fmt.Errorf("%w: %q is neither a readable file nor a peer ID: %v", ErrAllowList, f, err)
		}
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %q lists no peers", ErrAllowList, spec)
	}
	return ids, nil
}

// allowGater is a connection gater that admits listed peers only.
// Outbound dials to others are refused before any packet is sent;
// inbound connections are dropped right after the security handshake
// has authenticated the remote peer's ID, before any stream is opened.
type allowGater struct {
	self  peer.ID
	allow map[peer.ID]bool
}

func newAllowGater(self peer.ID, ids []peer.ID) *allowGater {
	g := &allowGater{self: self, allow: map[peer.ID]bool{self: true}}
	for _, id := range ids {
		g.allow[id] = true
	}
	return g
}

func (g *allowGater) InterceptPeerDial(p peer.ID) bool                 { return g.allow[p] }
func (g *allowGater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return g.allow[p] }
func (g *allowGater) InterceptAccept(network.ConnMultiaddrs) bool      { return true }
func (g *allowGater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.allow[p]
}
func (g *allowGater) InterceptUpgraded(c network.Conn) (bool, control.DisconnectReason) {
	return g.allow[c.RemotePeer()], 0
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

// ErrRefused is returned when a peer closes a connection as soon as it
// has learnt who dialed: this host is not on its allow list.
var ErrRefused = errors.New("node: the peer refused the connection (this peer ID is not on its allow list)")

// connect dials p and tells the usual reasons a private swarm refuses a
// peer apart: a different or missing swarm key (the handshake fails), or
// an allow list without this host (the peer hangs up after it).
func connect(ctx context.Context, h host.Host, p peer.AddrInfo) error {
	if err := h.Connect(ctx, p); err != nil {
		if strings.Contains(err.Error(), "failed to negotiate security protocol") {
			return fmt.Errorf("%w (a private swarm? every peer needs the same swarm key)", err)
		}
		return err
	}
	// Connect returns once identify is over, which fails at once on a
	// connection the other side has closed.
	if h.Network().Connectedness(p.ID) != network.Connected {
		return fmt.Errorf("%w: %s", ErrRefused, p.ID)
	}
	return nil
}

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
			// A retry inside the dial backoff only says "dial backoff":
			// keep the first attempt's reason.
			if e := connect(ctx, h, b); e == nil || attempt == 0 {
				err = e
			}
			if err == nil || ctx.Err() != nil || errors.Is(err, ErrRefused) {
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
