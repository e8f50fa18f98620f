package node_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	gocid "github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/muxer/yamux"
	"github.com/libp2p/go-libp2p/p2p/security/insecure"
	libp2ptls "github.com/libp2p/go-libp2p/p2p/security/tls"
	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// testLog logs warnings and errors. (Not to t.Output: a node's
// goroutines may log after its test has ended.)
func testLog(*testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

var loopback = []string{"/ip4/127.0.0.1/tcp/0"}

func swarmKey(t testing.TB) pnet.PSK {
	t.Helper()
	b, err := node.NewSwarmKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := node.ParseSwarmKey(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newKey(t testing.TB) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

func newHost(t testing.TB, o node.HostOptions) host.Host {
	t.Helper()
	if o.Listen == nil {
		o.Listen = loopback
	}
	h, err := node.NewHost(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestSwarmKeyFile(t *testing.T) {
	good, err := node.NewSwarmKey()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(good, []byte("/key/swarm/psk/1.0.0/\n/base16/\n")) || len(good) != len("/key/swarm/psk/1.0.0/\n/base16/\n")+65 {
		t.Fatalf("swarm key file %q is not in the ipfs format", good)
	}
	again, _ := node.NewSwarmKey()
	if bytes.Equal(good, again) {
		t.Fatal("two swarm keys are equal")
	}
	raw := bytes.Repeat([]byte{7}, 32)
	tests := []struct {
		name string
		file string
		ok   bool
	}{
		{"generated", string(good), true},
		{"base64", "/key/swarm/psk/1.0.0/\n/base64/\n" + base64.StdEncoding.EncodeToString(raw) + "\n", true},
		{"windows line ends", strings.ReplaceAll(string(good), "\n", "\r\n"), true},
		{"no header", "/base16/\n" + strings.Repeat("ab", 32) + "\n", false},
		{"unknown encoding", "/key/swarm/psk/1.0.0/\n/base32/\nabc\n", false},
		{"short", "/key/swarm/psk/1.0.0/\n/base16/\nabcd\n", false},
		{"not hex", "/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("zz", 32) + "\n", false},
		{"all zeros", "/key/swarm/psk/1.0.0/\n/base16/\n" + strings.Repeat("00", 32) + "\n", false},
		{"empty", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := node.ParseSwarmKey([]byte(tt.file))
			if tt.ok && (err != nil || len(k) != 32) {
				t.Fatalf("ParseSwarmKey: %d bytes, %v", len(k), err)
			}
			if !tt.ok && !errors.Is(err, node.ErrSwarmKey) {
				t.Fatalf("ParseSwarmKey: %v, want ErrSwarmKey", err)
			}
		})
	}
	if _, err := node.ReadSwarmKey(filepath.Join(t.TempDir(), "none")); !errors.Is(err, node.ErrSwarmKey) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing key file: %v", err)
	}
}

func TestParseAllow(t *testing.T) {
	_, a := newKey(t)
	_, b := newKey(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "allow")
	os.WriteFile(file, []byte("# the swarm\n"+a.String()+"\n\n  "+b.String()+"  # node 2\n"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, []byte("# nobody yet\n\n"), 0o644)
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte(a.String()+"\nnot-a-peer\n"), 0o644)
	tests := []struct {
		name, spec string
		want       []peer.ID
	}{
		{"file", file, []peer.ID{a, b}},
		{"list", a.String() + ", " + b.String(), []peer.ID{a, b}},
		{"one", a.String(), []peer.ID{a}},
		{"empty file", empty, nil},
		{"bad line", bad, nil},
		{"missing file", filepath.Join(dir, "missing"), nil},
		{"empty list", " , ", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := node.ParseAllow(tt.spec)
			if tt.want == nil {
				if !errors.Is(err, node.ErrAllowList) {
					t.Fatalf("ParseAllow: %v, %v; want ErrAllowList", got, err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("ParseAllow: %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestPrivateSwarmTCPOnly: go-libp2p's pnet protects TCP only and its QUIC
// transport refuses a pre-shared key, so a private host listens and dials
// on TCP only and says so when given a QUIC address.
func TestPrivateSwarmTCPOnly(t *testing.T) {
	k := swarmKey(t)
	if _, err := node.NewHost(node.HostOptions{SwarmKey: k, Listen: []string{"/ip4/127.0.0.1/udp/0/quic-v1"}}); !errors.Is(err, node.ErrPrivateQUIC) {
		t.Fatalf("a QUIC listen address with a swarm key: %v, want ErrPrivateQUIC", err)
	}
	if _, err := node.NewHost(node.HostOptions{SwarmKey: k[:16]}); !errors.Is(err, node.ErrSwarmKey) {
		t.Fatalf("a 16-byte swarm key: %v, want ErrSwarmKey", err)
	}
	h := newHost(t, node.HostOptions{SwarmKey: k, Listen: []string{}})
	for _, a := range h.Addrs() {
		if !strings.Contains(a.String(), "/tcp/") {
			t.Fatalf("a private host listens on %s", a)
		}
	}
	cfg := node.Config{Home: t.TempDir(), Shard: "bafkreigh2akiscaildcqabsyg3dfr6chu3fgpregiymsck7e7aqa4s52zy", SwarmKey: k,
		Bootstrap: []string{"/ip4/127.0.0.1/udp/4001/quic-v1/p2p/12D3KooWDGnEU2Hpo59U3LzrrWdX383qMpYCEdcB73PTjsqFULgK"}}
	if err := cfg.Validate(); !errors.Is(err, node.ErrConfig) || !errors.Is(err, node.ErrPrivateQUIC) {
		t.Fatalf("a QUIC bootstrap address in a private swarm: %v", err)
	}
}

// prep is stories15M in a block store, whole (Layouts[0]), cut into
// layers [0, 3) and [3, 6) (Layouts[1]) and cost-balanced into two stages
// (Layouts[2]), with its tokenizer; shared by the tests of this file.
type prep struct {
	dir      string
	manifest *shards.Manifest
	mc       string
	cfg      ovrt.Config
	whole    *ovrt.Model
}

var (
	prepOnce sync.Once
	prepared *prep
	prepErr  error
)

func prepare(t *testing.T) *prep {
	t.Helper()
	model, tok := testmodel.Stories15M(t)
	prepOnce.Do(func() { prepared, prepErr = buildPrep(model, tok) })
	if prepErr != nil {
		t.Fatal(prepErr)
	}
	return prepared
}

func buildPrep(model, tok string) (*prep, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "node-private-")
	if err != nil {
		return nil, err
	}
	st, err := teststore.Build(ctx, dir, model, tok, teststore.Cut{Ranges: []shards.Stage{{Start: 0, End: 3}, {Start: 3, End: 6}}}, teststore.Cut{Balanced: 2})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	w, m, mc := st.Weights, st.Manifest, st.MC
	p := &prep{dir: dir, manifest: m, mc: mc.String(), cfg: w.Config}
	if p.whole, err = ovrt.Compile(w); err != nil {
		return nil, err
	}
	return p, nil
}

// startNode starts a node on a copy of the prepared store hosting shard,
// its Config adjusted by set.
func startNode(t *testing.T, shard string, set func(*node.Config)) *node.Node {
	t.Helper()
	p := prepare(t)
	cfg := node.Config{Home: filepath.Join(t.TempDir(), "n"), Shard: shard, Listen: loopback, Threads: 1, Log: testLog(t)}
	if set != nil {
		set(&cfg)
	}
	if err := os.CopyFS(cfg.Home, os.DirFS(p.dir)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	n, err := node.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	go n.Run(ctx)
	return n
}

// limitedNode starts a node serving layers [0, 3) of stories15M, its
// Config adjusted by set.
func limitedNode(t *testing.T, set func(*node.Config)) (*node.Node, shards.ShardRef) {
	t.Helper()
	ref := prepare(t).manifest.Layouts[1].Shards[0]
	return startNode(t, ref.CID, set), ref
}

// stageConn is a raw stage stream to a node.
type stageConn struct {
	t *testing.T
	s network.Stream
	r *wire.Reader
}

func (c *stageConn) send(m wire.Message) {
	c.t.Helper()
	if err := wire.Write(c.s, m); err != nil {
		c.t.Fatal(err)
	}
}

// read returns the next message other than a credit, or fails the test.
func (c *stageConn) read() wire.Message {
	c.t.Helper()
	for {
		m, err := c.r.Read()
		if err != nil {
			c.t.Fatalf("read: %v", err)
		}
		if m.Type() != wire.TypeCredit {
			return m
		}
	}
}

func (c *stageConn) expectError(want error) *wire.Error {
	c.t.Helper()
	m := c.read()
	e, ok := m.(*wire.Error)
	if !ok || !errors.Is(e, want) {
		c.t.Fatalf("got %v %v, want an error frame (%v)", m.Type(), m, want)
	}
	return e
}

// playNextHop makes c answer as the node's next hop: it accepts every
// Open, grants all the credit asked, and drains what follows.
func playNextHop(c host.Host) {
	c.SetStreamHandler(protocol.ID(wire.StageProtocol), func(s network.Stream) {
		defer s.Close()
		r := wire.NewReader(s, 0)
		m, err := r.Read()
		if err != nil {
			return
		}
		o := m.(*wire.Open)
		wire.Write(s, &wire.Opened{Session: o.Session, Hop: o.Hop})
		wire.Write(s, &wire.Credit{Session: o.Session, N: 1 << 30}) // all the node may want
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	})
}

// sendOpen opens a stage stream from c to n and sends an Open for a
// two-hop route, n then c, with client as the client.
func sendOpen(t *testing.T, c host.Host, n *node.Node, ref shards.ShardRef, id byte, client peer.ID) *stageConn {
	t.Helper()
	s, err := c.NewStream(context.Background(), n.ID(), protocol.ID(wire.StageProtocol))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Reset() })
	s.SetReadDeadline(time.Now().Add(20 * time.Second))
	sc := &stageConn{t: t, s: s, r: wire.NewReader(s, 0)}
	var addrs []string
	for _, a := range c.Addrs() {
		addrs = append(addrs, a.String())
	}
	sc.send(&wire.Open{Session: wire.SessionID{id}, ModelID: n.Header.ModelID, Route: []wire.Hop{
		{Peer: []byte(n.ID()), Shard: ref.CID, Start: 0, End: 3},
		{Peer: []byte(c.ID()), Addrs: addrs, Shard: "next", Start: 3, End: 6},
	}, Client: []byte(client), DType: wire.F32, Output: wire.OutArgmax})
	return sc
}

// openOK is sendOpen expecting Opened.
func openOK(t *testing.T, c host.Host, n *node.Node, ref shards.ShardRef, id byte) *stageConn {
	t.Helper()
	sc := sendOpen(t, c, n, ref, id, c.ID())
	if m := sc.read(); m.Type() != wire.TypeOpened {
		t.Fatalf("open answered with %v: %v", m.Type(), m)
	}
	return sc
}

// outsiderLocksOut checks that o can neither hold a connection to n nor
// open a stage stream nor join the DHT through it.
func outsiderLockedOut(t *testing.T, o host.Host, n *node.Node, want error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	info := peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}
	// First, while no dial backoff hides the reason.
	_, err := node.JoinDHT(ctx, o, dht.ModeClient, []peer.AddrInfo{info}, testLog(t))
	if !errors.Is(err, node.ErrBootstrap) || want != nil && !errors.Is(err, want) {
		t.Fatalf("an outsider joined the DHT through the node: %v", err)
	}
	t.Logf("outsider: %v", err)
	o.Connect(ctx, info) // may succeed on o's side before n hangs up
	if c := o.Network().Connectedness(n.ID()); c == network.Connected {
		t.Fatalf("the outsider is %v to the node", c)
	}
	if len(n.Host.Network().ConnsToPeer(o.ID())) > 0 {
		t.Fatal("the node holds a connection to the outsider")
	}
	if s, err := o.NewStream(ctx, n.ID(), protocol.ID(wire.StageProtocol)); err == nil {
		// The stream may open on o's side; the node must not serve it.
		s.SetReadDeadline(time.Now().Add(5 * time.Second))
		wire.Write(s, &wire.Opened{})
		if m, err := wire.NewReader(s, 0).Read(); err == nil {
			t.Fatalf("the node answered an outsider's stage stream with %v", m.Type())
		}
		s.Reset()
	}
}

// TestPrivateSwarm: a peer without the swarm key, or with another key,
// cannot connect to a node of a private swarm, join its DHT or open a
// stage stream; a peer with the key can.
func TestPrivateSwarm(t *testing.T) {
	k := swarmKey(t)
	n, ref := limitedNode(t, func(c *node.Config) { c.SwarmKey = k })
	t.Run("no key", func(t *testing.T) {
		t.Parallel()
		outsiderLockedOut(t, newHost(t, node.HostOptions{}), n, nil)
	})
	t.Run("another key", func(t *testing.T) {
		t.Parallel()
		outsiderLockedOut(t, newHost(t, node.HostOptions{SwarmKey: swarmKey(t)}), n, nil)
	})
	t.Run("the key", func(t *testing.T) {
		t.Parallel()
		c := newHost(t, node.HostOptions{SwarmKey: k})
		if err := c.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
		playNextHop(c)
		openOK(t, c, n, ref, 1)
	})
}

// TestPrivateSwarmNodeCannotJoin: a node started without the key, or with
// another, fails to join through a member.
func TestPrivateSwarmNodeCannotJoin(t *testing.T) {
	k := swarmKey(t)
	n, ref := limitedNode(t, func(c *node.Config) { c.SwarmKey = k })
	for name, key := range map[string]pnet.PSK{"no key": nil, "another key": swarmKey(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
			defer cancel()
			_, err := node.New(ctx, node.Config{Home: t.TempDir(), Shard: ref.CID, Listen: loopback, SwarmKey: key, Bootstrap: n.Addrs(), Log: testLog(t)})
			if !errors.Is(err, node.ErrBootstrap) {
				t.Fatalf("a node joined a private swarm: %v", err)
			}
			t.Logf("%v", err)
		})
	}
}

// TestAllowList: a peer not on a node's allow list can neither hold a
// connection nor open a stage stream nor join the DHT through it; a
// listed peer can, but not for a route through unlisted peers; and the
// node does not dial unlisted peers either.
func TestAllowList(t *testing.T) {
	ck, cid := newKey(t)
	n, ref := limitedNode(t, func(c *node.Config) { c.Allow = []peer.ID{cid} })
	t.Run("unlisted", func(t *testing.T) {
		outsiderLockedOut(t, newHost(t, node.HostOptions{}), n, node.ErrRefused)
	})
	t.Run("node dials no unlisted peer", func(t *testing.T) {
		o := newHost(t, node.HostOptions{})
		err := n.Host.Connect(context.Background(), peer.AddrInfo{ID: o.ID(), Addrs: o.Addrs()})
		if err == nil || len(o.Network().ConnsToPeer(n.ID())) > 0 {
			t.Fatalf("the node connected to an unlisted peer: %v", err)
		}
	})
	c := newHost(t, node.HostOptions{Key: ck, Allow: []peer.ID{n.ID()}})
	if err := c.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
		t.Fatal(err)
	}
	playNextHop(c)
	t.Run("listed", func(t *testing.T) {
		openOK(t, c, n, ref, 1)
	})
	t.Run("route through an unlisted peer", func(t *testing.T) {
		_, other := newKey(t)
		s, err := c.NewStream(context.Background(), n.ID(), protocol.ID(wire.StageProtocol))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Reset()
		sc := &stageConn{t: t, s: s, r: wire.NewReader(s, 0)}
		sc.send(&wire.Open{Session: wire.SessionID{2}, ModelID: n.Header.ModelID, Route: []wire.Hop{
			{Peer: []byte(n.ID()), Shard: ref.CID, Start: 0, End: 3},
			{Peer: []byte(other), Shard: "next", Start: 3, End: 6},
		}, Client: []byte(c.ID()), DType: wire.F32, Output: wire.OutArgmax})
		sc.expectError(wire.ErrForbidden)
	})
	t.Run("a listed peer opening for another client", func(t *testing.T) {
		_, other := newKey(t)
		sendOpen(t, c, n, ref, 3, other).expectError(wire.ErrForbidden)
	})
}

// TestOnlyEncrypted: a pipeshard host speaks Noise on TCP (and TLS 1.3
// inside QUIC) and nothing else; a peer offering plaintext, or another
// security protocol, can neither connect to it nor be connected to.
func TestOnlyEncrypted(t *testing.T) {
	n := newHost(t, node.HostOptions{Listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}})
	n.SetStreamHandler("/test/echo", func(s network.Stream) { s.Close() })
	var conns []network.Conn
	for _, a := range n.Addrs() {
		c := newHost(t, node.HostOptions{Listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}})
		if err := c.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: []ma.Multiaddr{a}}); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c.Network().ConnsToPeer(n.ID())...)
	}
	if len(conns) != 2 {
		t.Fatalf("%d connections over TCP and QUIC", len(conns))
	}
	for _, conn := range conns {
		st := conn.ConnState()
		switch {
		case st.Transport == "tcp" && st.Security != "/noise":
			t.Errorf("a TCP connection secured by %q", st.Security)
		case st.Transport == "quic-v1" && st.Security != "":
			t.Errorf("a QUIC connection with security %q", st.Security)
		case st.Transport != "tcp" && st.Transport != "quic-v1":
			t.Errorf("a connection over %q", st.Transport)
		}
		t.Logf("%s: transport %s, security %q, muxer %s", conn.RemoteMultiaddr(), st.Transport, st.Security, st.StreamMultiplexer)
	}
	others := []struct {
		name string
		sec  libp2p.Option
	}{
		{"plaintext", libp2p.Security(insecure.ID, insecure.NewWithIdentity)},
		{"tls over tcp", libp2p.Security(libp2ptls.ID, libp2ptls.New)},
	}
	for _, o := range others {
		t.Run(o.name, func(t *testing.T) {
			p, err := libp2p.New(libp2p.ListenAddrStrings(loopback...), libp2p.Transport(tcp.NewTCPTransport),
				libp2p.Muxer(yamux.ID, yamux.DefaultTransport), o.sec)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Connect(ctx, peer.AddrInfo{ID: n.ID(), Addrs: n.Addrs()}); err == nil {
				t.Fatal("connected to a node")
			}
			if _, err := p.NewStream(ctx, n.ID(), "/test/echo"); err == nil {
				t.Fatal("opened a stream to a node")
			}
			if err := n.Connect(ctx, peer.AddrInfo{ID: p.ID(), Addrs: p.Addrs()}); err == nil {
				t.Fatal("a node connected to it")
			}
		})
	}
}

// TestPeerLimits: sessions, KV bytes and requests per peer are refused
// past their limits with ErrLimit, peer by peer.
func TestPeerLimits(t *testing.T) {
	t.Run("sessions", func(t *testing.T) {
		n, ref := limitedNode(t, func(c *node.Config) { c.Stage.MaxSessionsPerPeer = 2 })
		c1, c2 := newHost(t, node.HostOptions{}), newHost(t, node.HostOptions{})
		for _, c := range []host.Host{c1, c2} {
			if err := c.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
				t.Fatal(err)
			}
			playNextHop(c)
		}
		first := openOK(t, c1, n, ref, 1)
		openOK(t, c1, n, ref, 2)
		sendOpen(t, c1, n, ref, 3, c1.ID()).expectError(wire.ErrLimit)
		openOK(t, c2, n, ref, 4) // another peer has its own quota
		// Closing a session frees its place.
		first.send(&wire.Close{Session: wire.SessionID{1}})
		deadline := time.Now().Add(10 * time.Second)
		for n.Stage.Sessions() > 2 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		openOK(t, c1, n, ref, 5)
	})
	t.Run("kv bytes", func(t *testing.T) {
		// Each session reserves its whole context of KV cache: room for
		// one and a half sessions admits one.
		c := prepare(t).cfg
		perSession := int64(c.Context) * int64(2*4*c.KVDim()*3)
		n, ref := limitedNode(t, func(c *node.Config) { c.Stage.MaxKVBytesPerPeer = perSession * 3 / 2 })
		cl := newHost(t, node.HostOptions{})
		if err := cl.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
		playNextHop(cl)
		openOK(t, cl, n, ref, 1)
		e := sendOpen(t, cl, n, ref, 2, cl.ID()).expectError(wire.ErrLimit)
		if !strings.Contains(e.Msg, "KV bytes") {
			t.Fatalf("the KV limit says %q", e.Msg)
		}
	})
	t.Run("rate", func(t *testing.T) {
		n, ref := limitedNode(t, func(c *node.Config) { c.Stage.RatePerPeer, c.Stage.BurstPerPeer = 4, 4 })
		c := newHost(t, node.HostOptions{})
		if err := c.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Host.Addrs()}); err != nil {
			t.Fatal(err)
		}
		playNextHop(c)
		sc := openOK(t, c, n, ref, 1) // spends one of the four
		const sent = 12
		for i := range sent {
			f := &wire.Forward{Session: wire.SessionID{1}, Seq: uint64(i + 1)}
			f.SetTokens([]int32{1})
			sc.send(f)
		}
		// The three left of the burst pass (and refill a little); the rest
		// are refused, each with ErrLimit, and the session stays open.
		refused := 0
		for refused < sent-5 {
			sc.expectError(wire.ErrLimit)
			refused++
		}
		time.Sleep(1500 * time.Millisecond)
		before := n.Stage.Snapshot().Forwards
		f := &wire.Forward{Session: wire.SessionID{1}, Seq: 100}
		f.SetTokens([]int32{1})
		sc.send(f)
		deadline := time.Now().Add(10 * time.Second)
		for n.Stage.Snapshot().Forwards == before && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if n.Stage.Snapshot().Forwards == before {
			t.Fatal("after a pause the peer's forward did not run")
		}
	})
}

// identityHome returns a node home holding a fresh identity key, and the
// peer ID it gives the node.
func identityHome(t *testing.T) (string, peer.ID) {
	t.Helper()
	home := t.TempDir()
	k, err := node.LoadIdentity(filepath.Join(home, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return home, id
}

// TestPrivateSwarmGenerates is the whole path in a private swarm with an
// allow list: two nodes and a client that share the swarm key and list
// each other; the client knows one address and the model CID, resolves
// the model over bitswap, finds the route in the DHT and generates what
// one process generates, greedy and sampled.
func TestPrivateSwarmGenerates(t *testing.T) {
	p := prepare(t)
	k := swarmKey(t)
	h0, id0 := identityHome(t)
	h1, id1 := identityHome(t)
	ck, cid := newKey(t)
	allow := []peer.ID{id0, id1, cid}
	layout := p.manifest.Layouts[2]
	n0 := startNode(t, layout.Shards[0].CID, func(c *node.Config) { c.Home, c.SwarmKey, c.Allow = h0, k, allow })
	startNode(t, layout.Shards[1].CID, func(c *node.Config) {
		c.Home, c.SwarmKey, c.Allow, c.Bootstrap = h1, k, allow, n0.Addrs()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := swarm.New(ctx, swarm.Config{Home: t.TempDir(), Bootstrap: n0.Addrs(), Listen: loopback, Key: ck, SwarmKey: k, Allow: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m, err := c.Resolve(ctx, mustCID(t, p.mc))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := c.Tokenizer(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	hops, _, _, err := c.FindRoute(ctx, m, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hops) != 2 || hops[0].Peer.ID != id0 || hops[1].Peer.ID != id1 {
		t.Fatalf("route %v, want the two nodes", hops)
	}
	prompt := tok.Encode("Once upon a time", true)
	for _, sp := range []sample.Params{{}, {Temp: 0.9, TopP: 0.9, Seed: 5}} {
		s, err := c.Open(ctx, hops, swarm.SessionOptions{ModelID: m.ModelID, Sampling: sp, Vocab: m.Config.Vocab})
		if err != nil {
			t.Fatal(err)
		}
		got, err := generate.Run(ctx, s, prompt, generate.Options{MaxTokens: 24, IgnoreEOS: true, Seed: sp.Seed, Context: 256})
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		l, err := generate.NewLocal(sp, p.whole)
		if err != nil {
			t.Fatal(err)
		}
		want, err := generate.Run(ctx, l, prompt, generate.Options{MaxTokens: 24, IgnoreEOS: true, Seed: sp.Seed, Context: 256})
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.IDs) != fmt.Sprint(want.IDs) {
			t.Fatalf("temp %v: private swarm\n%v\nlocal\n%v", sp.Temp, got.IDs, want.IDs)
		}
	}
}

func mustCID(t *testing.T, s string) gocid.Cid {
	t.Helper()
	c, err := gocid.Decode(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPeerStreamLimit: the resource manager bounds the stage streams one
// peer holds open, below anything the stage itself would notice.
func TestPeerStreamLimit(t *testing.T) {
	n := newHost(t, node.HostOptions{PerPeer: node.PeerLimits{StageStreams: 2}})
	n.SetStreamHandler(protocol.ID(wire.StageProtocol), func(s network.Stream) {
		b := make([]byte, 1)
		for {
			if _, err := s.Read(b); err != nil {
				return
			}
			s.Write(b)
		}
	})
	c := newHost(t, node.HostOptions{})
	if err := c.Connect(context.Background(), peer.AddrInfo{ID: n.ID(), Addrs: n.Addrs()}); err != nil {
		t.Fatal(err)
	}
	echo := func() error {
		s, err := c.NewStream(context.Background(), n.ID(), protocol.ID(wire.StageProtocol))
		if err != nil {
			return err
		}
		t.Cleanup(func() { s.Reset() })
		s.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := s.Write([]byte{1}); err != nil {
			return err
		}
		_, err = s.Read(make([]byte, 1))
		return err
	}
	for i := range 2 {
		if err := echo(); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if err := echo(); err == nil {
		t.Fatal("a third stage stream of one peer was served")
	} else {
		t.Logf("third stream: %v", err)
	}
}
