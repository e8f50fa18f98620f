package link

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	libp2pquic "github.com/libp2p/go-libp2p/p2p/transport/quic"
	"github.com/libp2p/go-libp2p/p2p/transport/quicreuse"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/quic-go/quic-go"
	"go.uber.org/fx"
)

// Port is the UDP port a host listens on.
const Port = 4001

// Key returns host i's identity key, derived from the network's seed, so
// that peer IDs (and the DHT's distances between them) repeat from run to
// run.
func (n *Network) Key(i int) crypto.PrivKey {
	r := rand.New(rand.NewPCG(n.seed^0x6b6579, uint64(i)))
	var seed [ed25519.SeedSize]byte
	for k := 0; k < len(seed); k += 8 {
		binary.LittleEndian.PutUint64(seed[k:], r.Uint64())
	}
	k, err := crypto.UnmarshalEd25519PrivateKey(ed25519.NewKeyFromSeed(seed[:]))
	if err != nil {
		panic(err) // a 64-byte ed25519 key always unmarshals
	}
	return k
}

// Host starts host i on the network: a real libp2p host (libp2p.New)
// whose only transport is QUIC, listening on /ip4/IP(i)/udp/Port/quic-v1,
// its UDP sockets endpoints of the network. key nil means Key(i). opts are
// passed on to libp2p.New after the network's own, for example a resource
// manager; options that change the transports or listen addresses break
// the host.
//
// The network closes the host on Close, if its owner has not.
func (n *Network) Host(i int, key crypto.PrivKey, opts ...libp2p.Option) (host.Host, error) {
	sh, err := n.addHost(i)
	if err != nil {
		return nil, err
	}
	if key == nil {
		key = n.Key(i)
	}
	listen, err := ma.NewMultiaddr(fmt.Sprintf("/ip4/%s/udp/%d/quic-v1", sh.ip, Port))
	if err != nil {
		return nil, err
	}
	src := sourceIP{sh.ip.AsSlice()}
	reuse := []quicreuse.Option{
		quicreuse.OverrideListenUDP(func(_ string, laddr *net.UDPAddr) (net.PacketConn, error) {
			return n.listen(i, laddr)
		}),
		quicreuse.OverrideSourceIPSelector(func() (quicreuse.SourceIPSelector, error) { return src, nil }),
	}
	base := []libp2p.Option{
		libp2p.Identity(key),
		libp2p.ListenAddrs(listen),
		libp2p.Transport(libp2pquic.NewTransport),
		libp2p.QUICReuse(newConnManager(reuse)),
		// Identify's observed-address discovery would only learn the
		// addresses the host already has, and keeps timers that stall
		// testing/synctest.
		libp2p.DisableIdentifyAddressDiscovery(),
	}
	h, err := libp2p.New(append(base, opts...)...)
	if err != nil {
		n.mu.Lock()
		delete(n.hosts, i)
		delete(n.byIP, sh.ip)
		n.mu.Unlock()
		return nil, fmt.Errorf("link: host %d: %w", i, err)
	}
	n.mu.Lock()
	sh.h = h
	n.mu.Unlock()
	return h, nil
}

// newConnManager returns a constructor of libp2p's QUIC connection
// manager with the given overrides, otherwise as libp2p makes it: inbound
// connections are accounted to the resource manager, which decides which
// source addresses to verify.
func newConnManager(extra []quicreuse.Option) any {
	return func(l fx.Lifecycle, srk quic.StatelessResetKey, tk quic.TokenGeneratorKey, rm network.ResourceManager) (*quicreuse.ConnManager, error) {
		opts := append([]quicreuse.Option{
			quicreuse.ConnContext(func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
				addr, err := quicreuse.ToQuicMultiaddr(ci.RemoteAddr, quic.Version1)
				if err != nil {
					addr = nil
				}
				scope, err := rm.OpenConnection(network.DirInbound, false, addr)
				if err != nil {
					return ctx, err
				}
				ctx = network.WithConnManagementScope(ctx, scope)
				context.AfterFunc(ctx, scope.Done)
				return ctx, nil
			}),
			quicreuse.VerifySourceAddress(rm.VerifySourceAddress),
		}, extra...)
		cm, err := quicreuse.NewConnManager(srk, tk, opts...)
		if err != nil {
			return nil, err
		}
		l.Append(fx.StopHook(cm.Close))
		return cm, nil
	}
}

// sourceIP answers quicreuse's question "which local address reaches
// this destination?" with the host's only address (the default asks the
// machine's routing table, which knows nothing of the network).
type sourceIP struct{ ip net.IP }

func (s sourceIP) PreferredSourceIPForDestination(*net.UDPAddr) (net.IP, error) { return s.ip, nil }
