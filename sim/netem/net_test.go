package netem

import (
	"context"
	"errors"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// symmetric returns a Link func that gives every direction l.
func symmetric(l Link) func(int, int) Link {
	return func(int, int) Link { return l }
}

// TestRTT: the median round trip between two hosts is within ±10% of
// twice the one-way Delay. The echo is the kernel's (ICMP) and the reply
// is timed by the kernel on arrival, so the round trip is the emulator's:
// no user-space responder or reader wake-up is in it.
func TestRTT(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct {
		name   string
		oneWay time.Duration
		pings  int
	}{
		{"20ms", 10 * time.Millisecond, 40},
		{"100ms", 50 * time.Millisecond, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := startNet(t, Spec{Hosts: 2, Link: symmetric(Link{Delay: tc.oneWay}), Backend: BackendDelayline, Seed: 1})
			want := 2 * tc.oneWay
			got := icmpPing(t, n, 0, 1, tc.pings)
			t.Logf("configured RTT %v, measured median %v over %d pings (%+.1f%%)", want, got, tc.pings, 100*(float64(got)/float64(want)-1))
			if math.Abs(float64(got-want)) > 0.1*float64(want) {
				t.Errorf("median RTT %v, want %v ± 10%%", got, want)
			}
		})
	}
}

// TestThroughput: a TCP bulk transfer through a 2 MB/s link gets 2 MB/s of
// IP packets, that is Rate × MSS/MTU of payload (full-sized segments: the
// MSS plus 52 bytes of IP, TCP and timestamp headers make the 1500-byte
// MTU), within ±10%, measured over the steady part of the transfer. The
// payload is counted by the receiving kernel (TCP_INFO bytes_received,
// sampled every 20 ms with the time it was read), so that the test's own
// reader, however late it runs, does not skew the measure. The sender uses
// cubic, Linux's default, whatever this machine's default is.
func TestThroughput(t *testing.T) {
	const (
		rate   = 2_000_000       // bytes of IP packets per second
		warmup = 1 * time.Second // slow start and its first queue overflow
		window = 2 * time.Second // measured
	)
	n := startNet(t, Spec{Hosts: 2, Backend: BackendDelayline, Seed: 1, Link: func(from, to int) Link {
		l := Link{Delay: 10 * time.Millisecond}
		if from == 0 {
			l.Rate = rate
		}
		return l
	}})
	var ln *net.TCPListener
	if err := n.Do(1, func() (err error) {
		ln, err = net.ListenTCP("tcp4", &net.TCPAddr{IP: n.Addr(1).AsSlice()})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	type sample struct {
		at    time.Time
		bytes uint64 // payload received in order by the kernel
	}
	samples := make(chan []sample, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			samples <- nil
			return
		}
		defer c.Close()
		eof := make(chan struct{})
		go func() {
			io.Copy(io.Discard, c)
			close(eof)
		}()
		rc, err := c.SyscallConn()
		if err != nil {
			samples <- nil
			return
		}
		var s []sample
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-eof:
				samples <- s
				return
			case <-tick.C:
			}
			rc.Control(func(fd uintptr) {
				at := time.Now()
				if ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO); err == nil {
					s = append(s, sample{at, ti.Bytes_received})
				}
			})
		}
	}()

	var c *net.TCPConn
	if err := n.Do(0, func() error {
		d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, "cubic")
			}); err != nil {
				return err
			}
			return serr
		}}
		nc, err := d.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		c = nc.(*net.TCPConn)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mss := 1448
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			if v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG); err == nil && v > 0 {
				mss = v
			}
		})
	}
	deadline := time.Now().Add(warmup + window + 300*time.Millisecond)
	c.SetWriteDeadline(deadline)
	chunk := make([]byte, 64<<10)
	for time.Now().Before(deadline) {
		if _, err := c.Write(chunk); err != nil {
			break
		}
	}
	c.Close() // the kernel still sends what is buffered, then FIN
	s := <-samples
	i := slices.IndexFunc(s, func(x sample) bool { return x.bytes > 0 })
	if i < 0 {
		t.Fatal("receiver got nothing")
	}
	first := s[i].at
	at := func(d time.Duration) sample {
		j, _ := slices.BinarySearchFunc(s, first.Add(d), func(x sample, t time.Time) int { return x.at.Compare(t) })
		return s[min(j, len(s)-1)]
	}
	a, b := at(warmup), at(warmup+window)
	goodput := float64(b.bytes-a.bytes) / b.at.Sub(a.at).Seconds()
	want := float64(rate) * float64(mss) / mtu
	t.Logf("rate %d B/s of IP packets, MSS %d: want goodput %.0f B/s, measured %.0f B/s over %v (%+.1f%%); pair 0→1 %+v",
		rate, mss, want, goodput, b.at.Sub(a.at).Round(time.Millisecond), 100*(goodput/want-1), n.Stats().Pairs[0])
	if math.Abs(goodput-want) > 0.1*want {
		t.Errorf("goodput %.0f B/s, want %.0f ± 10%%", goodput, want)
	}
}

// TestLoss: 1% loss on 5000 UDP datagrams loses 1% ± 0.4% of them. The
// binomial σ of the loss rate is √(0.01·0.99/5000) ≈ 0.14%, so ±0.4% is
// about 2.8σ; and since loss is drawn from the Spec's seed, two runs of
// one seed lose exactly the same datagrams.
func TestLoss(t *testing.T) {
	const (
		count = 5000
		loss  = 0.01
		tol   = 0.004
	)
	run := func(seed int64) []bool {
		n := startNet(t, Spec{Hosts: 2, Backend: BackendDelayline, Seed: seed,
			Link: symmetric(Link{Delay: time.Millisecond, Loss: loss})})
		ca, cb := udp(t, n, 0), udp(t, n, 1)
		cb.SetReadBuffer(8 << 20)
		got := make([]bool, count)
		var received int
		var mu sync.Mutex
		go func() {
			buf := make([]byte, 64)
			for {
				k, _, err := cb.ReadFromUDP(buf)
				if err != nil {
					return
				}
				if k == 2 {
					mu.Lock()
					got[int(buf[0])|int(buf[1])<<8] = true
					received++
					mu.Unlock()
				}
			}
		}()
		dst := cb.LocalAddr().(*net.UDPAddr)
		pair := func() PairStats {
			for _, p := range n.Stats().Pairs {
				if p.From == 0 && p.To == 1 {
					return p
				}
			}
			return PairStats{}
		}
		for seq := 0; seq < count; seq++ {
			if _, err := ca.WriteToUDP([]byte{byte(seq), byte(seq >> 8)}, dst); err != nil {
				t.Fatal(err)
			}
			if seq%100 == 99 { // let the emulator keep up: no drop before it
				waitFor(t, 5*time.Second, "the emulator to take the datagrams", func() bool {
					p := pair()
					return p.Forwarded.Packets+p.Lost.Packets == int64(seq+1)
				})
			}
		}
		p := pair()
		waitFor(t, 5*time.Second, "the datagrams forwarded to arrive", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return int64(received) >= p.Forwarded.Packets
		})
		mu.Lock()
		defer mu.Unlock()
		if p.Lost.Packets+p.Forwarded.Packets != count || p.QueueDrops.Packets != 0 {
			t.Fatalf("pair 0→1 %+v: want %d packets through the emulator", p, count)
		}
		rate := float64(count-received) / count
		t.Logf("seed %d: %d of %d lost: %.2f%% (configured %.2f%% ± %.2f%%)", seed, count-received, count, 100*rate, 100*loss, 100*tol)
		if math.Abs(rate-loss) > tol {
			t.Errorf("loss %.2f%%, want %.2f%% ± %.2f%%", 100*rate, 100*loss, 100*tol)
		}
		return slices.Clone(got)
	}
	a := run(42)
	b := run(42)
	if !slices.Equal(a, b) {
		t.Error("two runs of seed 42 lost different datagrams")
	}
}

// TestChooseBackend: auto picks netem only when the kernel has it.
func TestChooseBackend(t *testing.T) {
	yes, no := func() bool { return true }, func() bool { return false }
	for _, tc := range []struct {
		req   string
		probe func() bool
		want  string
		err   error
	}{
		{"", yes, BackendNetem, nil},
		{BackendAuto, yes, BackendNetem, nil},
		{BackendAuto, no, BackendDelayline, nil},
		{BackendDelayline, yes, BackendDelayline, nil},
		{BackendDelayline, no, BackendDelayline, nil},
		{BackendNetem, yes, BackendNetem, nil},
		{BackendNetem, no, "", ErrNoNetem},
		{"tc", yes, "", ErrSpec},
	} {
		got, err := chooseBackend(tc.req, tc.probe)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("chooseBackend(%q, %v) = %q, %v; want %q, %v", tc.req, tc.probe(), got, err, tc.want, tc.err)
		}
	}
}

// TestBackend: "delayline" can be forced when auto would pick netem, and
// Backend reports what auto picked on this kernel.
func TestBackend(t *testing.T) {
	yes := func() bool { return true }

	// Forced delayline while the kernel (as far as start knows) has netem.
	n := startHooked(t, Spec{Hosts: 2, Backend: BackendDelayline}, hooks{probe: yes})
	if n.Backend() != BackendDelayline {
		t.Errorf("Backend() = %q, want %q", n.Backend(), BackendDelayline)
	}
	pingMedian(t, n, 0, 1, 3)

	// Auto on this very kernel.
	n = startNet(t, Spec{Hosts: 2})
	want := BackendDelayline
	if HasNetem() {
		want = BackendNetem
	}
	t.Logf("HasNetem() = %v; auto chose %q", HasNetem(), n.Backend())
	if n.Backend() != want {
		t.Errorf("auto: Backend() = %q, want %q", n.Backend(), want)
	}
	if !HasNetem() {
		if _, err := start(t.Context(), Spec{Hosts: 2, Backend: BackendNetem}, hooks{}); !errors.Is(err, ErrNoNetem) {
			t.Errorf("Backend netem without netem: err %v, want ErrNoNetem", err)
		}
	}
}

// TestCleanup: Close removes the namespaces (twice is fine); Cleanup
// removes those of a dead pid and keeps those of a live one.
func TestCleanup(t *testing.T) {
	n := startNet(t, Spec{Hosts: 3, Backend: BackendDelayline})
	names := slices.Clone(n.names())
	for _, name := range names {
		if !nsExists(name) {
			t.Fatalf("namespace %s missing while running", name)
		}
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for _, name := range names {
		if nsExists(name) {
			t.Errorf("namespace %s left after Close", name)
		}
	}
	if err := n.Do(0, func() error { return nil }); err == nil {
		t.Error("Do after Close succeeded")
	}

	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPID := dead.Process.Pid
	if alive(deadPID) {
		t.Skipf("pid %d already reused", deadPID)
	}
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { sleeper.Process.Kill(); sleeper.Wait() }()

	deadNS := prefix + strconv.Itoa(deadPID) + "-1-0"
	liveNS := prefix + strconv.Itoa(sleeper.Process.Pid) + "-1-0"
	for _, name := range []string{deadNS, liveNS} {
		if err := addNetns(name); err != nil {
			t.Fatal(err)
		}
	}
	defer delNetns(liveNS)
	defer delNetns(deadNS)
	removed, err := Cleanup(testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, deadNS) || nsExists(deadNS) {
		t.Errorf("Cleanup removed %v; want %s (dead pid) gone", removed, deadNS)
	}
	if slices.Contains(removed, liveNS) || !nsExists(liveNS) {
		t.Errorf("Cleanup removed %v; want %s (live pid) kept", removed, liveNS)
	}
}

// TestMaxBytes: past MaxBytes nothing is forwarded, and Err and Stats say
// so.
func TestMaxBytes(t *testing.T) {
	const maxBytes = 50_000
	n := startNet(t, Spec{Hosts: 2, Backend: BackendDelayline, MaxBytes: maxBytes})
	ca, cb := udp(t, n, 0), udp(t, n, 1)
	var received int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			k, _, err := cb.ReadFromUDP(buf)
			if err != nil {
				return
			}
			received += int64(k)
		}
	}()
	msg := make([]byte, 1000) // 1028 bytes of IP packet
	for range 100 {
		if _, err := ca.WriteToUDP(msg, cb.LocalAddr().(*net.UDPAddr)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "100 packets through the emulator", func() bool {
		s := n.Stats()
		return s.Forwarded.Packets+s.Capped.Packets == 100
	})
	s := n.Stats()
	t.Logf("%+v", s)
	if !errors.Is(n.Err(), ErrMaxBytes) || !errors.Is(s.Stopped, ErrMaxBytes) {
		t.Errorf("Err() = %v, Stats.Stopped = %v; want ErrMaxBytes", n.Err(), s.Stopped)
	}
	if s.Forwarded.Bytes > maxBytes || s.Forwarded.Packets != maxBytes/1028 || s.Capped.Packets != 100-maxBytes/1028 {
		t.Errorf("forwarded %+v, capped %+v; want %d packets forwarded, the rest capped", s.Forwarded, s.Capped, maxBytes/1028)
	}
	select {
	case <-n.Done():
		t.Error("MaxBytes closed the Net; it should only stop forwarding")
	default:
	}
	cb.Close()
	<-done
	if received > maxBytes {
		t.Errorf("received %d bytes of payload past MaxBytes %d", received, maxBytes)
	}
}

// TestMaxDuration: the Net closes itself after MaxDuration, and on its
// context's end.
func TestMaxDuration(t *testing.T) {
	n := startNet(t, Spec{Hosts: 2, Backend: BackendDelayline, MaxDuration: 300 * time.Millisecond})
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Net did not close itself after MaxDuration")
	}
	if !errors.Is(n.Err(), ErrMaxDuration) {
		t.Errorf("Err() = %v, want ErrMaxDuration", n.Err())
	}
	for _, name := range n.names() {
		if nsExists(name) {
			t.Errorf("namespace %s left after MaxDuration", name)
		}
	}

	ctx, cancel := context.WithCancel(t.Context())
	n, err := Start(ctx, Spec{Hosts: 1, Backend: BackendDelayline, Log: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-n.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Net did not close itself when its context ended")
	}
	if !errors.Is(n.Err(), context.Canceled) {
		t.Errorf("Err() = %v, want context.Canceled", n.Err())
	}
}

// TestCommand: a command runs inside a host's namespace and sees its
// address.
func TestCommand(t *testing.T) {
	n := startNet(t, Spec{Hosts: 2, Backend: BackendDelayline})
	out, err := n.Command(t.Context(), 1, "ip", "-4", "-o", "addr", "show", "dev", tunName).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), n.Addr(1).String()+"/16") {
		t.Errorf("host 1 sees %q, want %s/16", out, n.Addr(1))
	}
	out, err = n.Command(t.Context(), 1, "cat", "/proc/sys/net/ipv6/conf/"+tunName+"/disable_ipv6").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "1" {
		t.Errorf("IPv6 on %s: disable_ipv6 %q, %v; want 1", tunName, out, err)
	}
}

// TestNotRoot: Start says why it cannot run without root.
func TestNotRoot(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("running as root")
	}
	if _, err := Start(t.Context(), Spec{Hosts: 2}); !errors.Is(err, ErrNotRoot) {
		t.Errorf("Start: %v, want ErrNotRoot", err)
	}
}

// TestCongestionControl: the hosts' TCP congestion control is cubic
// unless the spec says otherwise, "host" keeps the machine's, and a name
// the kernel does not have is refused.
func TestCongestionControl(t *testing.T) {
	own, err := os.ReadFile(congestionFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ tcp, want string }{
		{"", "cubic"},
		{"reno", "reno"},
		{"host", strings.TrimSpace(string(own))},
	} {
		n := startNet(t, Spec{Hosts: 2, Backend: BackendDelayline, TCP: tt.tcp})
		for i := range 2 {
			out, err := n.Command(t.Context(), i, "cat", congestionFile).CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != tt.want {
				t.Errorf("TCP %q: host %d has %q, %v; want %s", tt.tcp, i, out, err, tt.want)
			}
		}
	}
	needRoot(t)
	if _, err := Start(t.Context(), Spec{Hosts: 1, Backend: BackendDelayline, TCP: "nosuch", Log: testLogger(t)}); !errors.Is(err, ErrSpec) {
		t.Errorf("an unknown congestion control: %v, want ErrSpec", err)
	}
}
