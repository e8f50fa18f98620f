package link

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"
)

// packet is a datagram with its sender.
type packet struct {
	from *net.UDPAddr
	data []byte
}

// endpoint is a UDP socket on the simulated network: the net.PacketConn
// a host's QUIC transport reads and writes. Writes never block (the link
// queues or drops); reads wait for a packet, the read deadline or Close.
type endpoint struct {
	n    *Network
	host int
	ap   netip.AddrPort
	udp  *net.UDPAddr

	mu       sync.Mutex
	inbox    []packet
	closed   bool
	deadline time.Time
	wake     chan struct{} // a packet arrived or the deadline moved
	done     chan struct{} // closed by Close
}

var _ net.PacketConn = (*endpoint)(nil)

func newEndpoint(n *Network, host int, ap netip.AddrPort) *endpoint {
	return &endpoint{
		n: n, host: host, ap: ap, udp: net.UDPAddrFromAddrPort(ap),
		wake: make(chan struct{}, 1), done: make(chan struct{}),
	}
}

func (e *endpoint) signal() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// push queues an arrived packet (the receive buffer is unbounded: a
// sender's congestion window bounds it).
func (e *endpoint) push(p packet) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return
	}
	e.inbox = append(e.inbox, p)
	e.mu.Unlock()
	e.signal()
}

// ReadFrom implements net.PacketConn.
func (e *endpoint) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		e.mu.Lock()
		if len(e.inbox) > 0 {
			p := e.inbox[0]
			e.inbox[0] = packet{}
			e.inbox = e.inbox[1:]
			more := len(e.inbox) > 0
			e.mu.Unlock()
			if more {
				e.signal() // another reader may be waiting
			}
			return copy(b, p.data), p.from, nil
		}
		if e.closed {
			e.mu.Unlock()
			return 0, nil, net.ErrClosed
		}
		dl := e.deadline
		e.mu.Unlock()
		var t *time.Timer
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, nil, os.ErrDeadlineExceeded
			}
			t = time.NewTimer(d)
			expired = t.C
		}
		select {
		case <-e.wake:
		case <-e.done:
		case <-expired:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// WriteTo implements net.PacketConn.
func (e *endpoint) WriteTo(b []byte, addr net.Addr) (int, error) {
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return 0, net.ErrClosed
	}
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, &net.AddrError{Err: "not a UDP address", Addr: addr.String()}
	}
	ap := ua.AddrPort()
	e.n.send(e, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), slices.Clone(b))
	return len(b), nil
}

// Close implements net.PacketConn.
func (e *endpoint) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	e.inbox = nil
	close(e.done)
	e.mu.Unlock()
	e.n.forget(e)
	return nil
}

// LocalAddr implements net.PacketConn.
func (e *endpoint) LocalAddr() net.Addr { return e.udp }

// SetDeadline implements net.PacketConn; writes have no deadline.
func (e *endpoint) SetDeadline(t time.Time) error { return e.SetReadDeadline(t) }

// SetReadDeadline implements net.PacketConn.
func (e *endpoint) SetReadDeadline(t time.Time) error {
	e.mu.Lock()
	e.deadline = t
	e.mu.Unlock()
	e.signal()
	return nil
}

// SetWriteDeadline implements net.PacketConn: writes never block.
func (e *endpoint) SetWriteDeadline(time.Time) error { return nil }

// SetReadBuffer and SetWriteBuffer let quic-go size its buffers (there
// are none to size).
func (e *endpoint) SetReadBuffer(int) error  { return nil }
func (e *endpoint) SetWriteBuffer(int) error { return nil }
