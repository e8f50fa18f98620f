package netem

import (
	"context"
	"errors"
	"net"
	"os"
	"slices"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// needRoot skips a test that needs root, or fails it under CI (which runs
// as root: a CI that is not has lost these tests).
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("sim/netem: this test needs root (euid 0) to make network namespaces and TUN devices; CI is set, and CI runs as root, so running it unprivileged would hide the WAN emulator's tests")
	}
	t.Skip("sim/netem: needs root (network namespaces, TUN); run `sudo go test ./sim/netem/`")
}

func startNet(t testing.TB, s Spec) *Net {
	t.Helper()
	return startHooked(t, s, hooks{})
}

func startHooked(t testing.TB, s Spec, hk hooks) *Net {
	t.Helper()
	needRoot(t)
	if s.Log == nil {
		s.Log = testLogger(t)
	}
	n, err := start(t.Context(), s, hk)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

// udp opens a UDP socket on host i's address.
func udp(t testing.TB, n *Net, i int) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	err := n.Do(i, func() (err error) {
		c, err = net.ListenUDP("udp4", &net.UDPAddr{IP: n.Addr(i).AsSlice()})
		return err
	})
	if err != nil {
		t.Fatalf("listen on host %d: %v", i, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// echo answers every datagram on c until c is closed.
func echo(c *net.UDPConn) {
	go func() {
		buf := make([]byte, 2048)
		for {
			k, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			c.WriteToUDP(buf[:k], from)
		}
	}()
}

// pingMedian sends count pings from host a to an echo on host b, one at a
// time, and returns the median round trip.
func pingMedian(t testing.TB, n *Net, a, b, count int) time.Duration {
	t.Helper()
	ca, cb := udp(t, n, a), udp(t, n, b)
	echo(cb)
	dst := cb.LocalAddr().(*net.UDPAddr)
	var rtts []time.Duration
	buf := make([]byte, 64)
	for seq := 0; seq < count; seq++ {
		msg := []byte{byte(seq), byte(seq >> 8)}
		t0 := time.Now()
		if _, err := ca.WriteToUDP(msg, dst); err != nil {
			t.Fatalf("ping %d: %v", seq, err)
		}
		for {
			ca.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, _, err := ca.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("ping %d: no answer: %v", seq, err)
			}
			if k == 2 && buf[0] == msg[0] && buf[1] == msg[1] {
				break
			}
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

// waitFor polls cond until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func nsExists(name string) bool {
	_, err := os.Stat(netnsDir + "/" + name)
	return !errors.Is(err, os.ErrNotExist)
}

// icmpPing sends count ICMP echo requests, one at a time, from host a to
// host b, whose kernel answers them, and returns the median time from just
// before each send to the kernel's receive timestamp (SO_TIMESTAMPNS) of
// its reply.
func icmpPing(t testing.TB, n *Net, a, b, count int) time.Duration {
	t.Helper()
	var c *net.IPConn
	err := n.Do(a, func() (err error) {
		c, err = net.ListenIP("ip4:icmp", &net.IPAddr{IP: n.Addr(a).AsSlice()})
		return err
	})
	if err != nil {
		t.Fatalf("raw ICMP socket on host %d: %v", a, err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		t.Fatalf("SO_TIMESTAMPNS: %v %v", err, serr)
	}
	id := uint16(os.Getpid())
	dst := &net.IPAddr{IP: n.Addr(b).AsSlice()}
	buf, oob := make([]byte, 1500), make([]byte, 512)
	var rtts []time.Duration
	for seq := range uint16(count) {
		req := []byte{8, 0, 0, 0, byte(id >> 8), byte(id), byte(seq >> 8), byte(seq), 'p', 's', 'i', 'm', 0, 0, 0, 0}
		ck := checksum(req)
		req[2], req[3] = byte(ck>>8), byte(ck)
		t0 := time.Now()
		if _, err := c.WriteToIP(req, dst); err != nil {
			t.Fatalf("ping %d: %v", seq, err)
		}
		for {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			k, oobn, _, _, err := c.ReadMsgIP(buf, oob)
			if err != nil {
				t.Fatalf("ping %d: no reply: %v", seq, err)
			}
			m := buf[:k]
			if len(m) >= 20 && m[0]>>4 == 4 { // the IP header, if left on
				m = m[int(m[0]&0x0f)*4:]
			}
			if len(m) < 8 || m[0] != 0 || uint16(m[4])<<8|uint16(m[5]) != id || uint16(m[6])<<8|uint16(m[7]) != seq {
				continue
			}
			at, ok := rxTime(oob[:oobn])
			if !ok {
				t.Fatal("reply without a kernel timestamp")
			}
			rtts = append(rtts, at.Sub(t0))
			break
		}
	}
	slices.Sort(rtts)
	return rtts[len(rtts)/2]
}

// rxTime finds the SO_TIMESTAMPNS control message.
func rxTime(oob []byte) (time.Time, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return time.Time{}, false
	}
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			ts := (*unix.Timespec)(unsafe.Pointer(&m.Data[0]))
			return time.Unix(ts.Unix()), true
		}
	}
	return time.Time{}, false
}

// checksum is the Internet checksum of b.
func checksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}
