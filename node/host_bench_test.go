package node

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// BenchmarkStreamRoundTrip is the transport's floor under a stage hop: a
// small message out on one stream and its answer back, between two
// pipeshard hosts on loopback. "same" answers on the inbound stream;
// "back" answers on a stream the server opened to the client, as the last
// stage does. The stage protocol cannot add less than this per hop.
//
// "busy3ms" and "busy13ms" keep the calling goroutine computing between
// round trips, as a client does while it runs its own layers or a
// benchmark does while it runs the in-process reference, and leave the
// other core idle meanwhile. Only the round trips are timed. On a virtual machine whose
// idle vCPUs halt at once, the wake-up of the idle core shows here: it is
// the machine's cost, paid by any RPC, not the stage protocol's.
//
//	go test ./node -run '^$' -bench StreamRoundTrip -count 5
func BenchmarkStreamRoundTrip(b *testing.B) {
	for _, tr := range []struct{ name, addr string }{
		{"tcp", "/ip4/127.0.0.1/tcp/0"},
		{"quic", "/ip4/127.0.0.1/udp/0/quic-v1"},
	} {
		for _, back := range []bool{false, true} {
			for _, busy := range []time.Duration{0, 3 * time.Millisecond, 13 * time.Millisecond} {
				name := tr.name + "/same"
				if back {
					name = tr.name + "/back"
				}
				if busy > 0 {
					name += "/busy" + busy.String()
				}
				b.Run(name, func(b *testing.B) { benchRoundTrip(b, tr.addr, back, busy) })
			}
		}
	}
}

func benchRoundTrip(b *testing.B, addr string, back bool, busy time.Duration) {
	ctx := context.Background()
	srv, err := NewHost(HostOptions{Listen: []string{addr}})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	cli, err := NewHost(HostOptions{Listen: []string{addr}})
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	const req, resp = protocol.ID("/bench/req"), protocol.ID("/bench/resp")
	msg := make([]byte, 64)
	answers := make(chan []byte, 1)
	cli.SetStreamHandler(resp, func(s network.Stream) {
		for {
			buf := make([]byte, len(msg))
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			answers <- buf
		}
	})
	srv.SetStreamHandler(req, func(s network.Stream) {
		out := s
		if back {
			var err error
			if out, err = srv.NewStream(ctx, cli.ID(), resp); err != nil {
				return
			}
		}
		buf := make([]byte, len(msg))
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			if _, err := out.Write(buf); err != nil {
				return
			}
		}
	})
	if err := cli.Connect(ctx, peer.AddrInfo{ID: srv.ID(), Addrs: srv.Addrs()}); err != nil {
		b.Fatal(err)
	}
	s, err := cli.NewStream(ctx, srv.ID(), req)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	buf := make([]byte, len(msg))
	for b.Loop() {
		if busy > 0 {
			b.StopTimer()
			for t := time.Now(); time.Since(t) < busy; {
			}
			b.StartTimer()
		}
		if _, err := s.Write(msg); err != nil {
			b.Fatal(err)
		}
		if back {
			<-answers
		} else if _, err := io.ReadFull(s, buf); err != nil {
			b.Fatal(err)
		}
	}
}
