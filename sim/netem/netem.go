package netem

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Sentinel errors. Errors of this package wrap one of them with %w.
var (
	ErrNotRoot     = errors.New("netem: needs root (euid 0) to make network namespaces and TUN devices; run as root or under sudo")
	ErrSpec        = errors.New("netem: bad spec")
	ErrNoNetem     = errors.New("netem: the kernel has no netem qdisc (sch_netem); use Backend \"delayline\" or \"auto\"")
	ErrSetup       = errors.New("netem: setting up the network failed")
	ErrNamespace   = errors.New("netem: network namespace")
	ErrCleanup     = errors.New("netem: cleanup")
	ErrClosed      = errors.New("netem: closed")
	ErrMaxDuration = errors.New("netem: MaxDuration reached")
	ErrMaxBytes    = errors.New("netem: MaxBytes reached; forwarding stopped")
)

// Backends.
const (
	BackendAuto      = "auto"
	BackendNetem     = "netem"
	BackendDelayline = "delayline"
)

// Defaults and limits of a Spec.
const (
	DefaultMaxDuration = 30 * time.Minute
	DefaultMaxBytes    = 16 << 30
	MaxHosts           = 512
)

// Link is what one direction of a host pair sees.
type Link struct {
	Delay time.Duration // one-way propagation delay
	// Jitter spreads each packet's delay uniformly over
	// [Delay-Jitter, Delay+Jitter] (netem's default distribution). The
	// delayline backend never reorders a pair's packets: a packet that
	// draws a shorter delay than its predecessor waits for it. netem
	// reorders.
	Jitter time.Duration
	Loss   float64 // probability 0..1 that a packet is dropped, independently
	// Rate is the bandwidth in bytes per second of whole IP packets
	// (headers included, no link-layer framing); 0 = unlimited. Packets
	// wait for it in a FIFO of Queue bytes.
	Rate int64
	// Queue is the drop-tail buffer in bytes of the packets waiting for
	// Rate (not those travelling their Delay); 0 → DefaultQueue(Rate).
	Queue int64
}

func (l Link) valid() error {
	switch {
	case l.Delay < 0, l.Jitter < 0, l.Rate < 0, l.Queue < 0:
		return fmt.Errorf("%w: negative field in %+v", ErrSpec, l)
	case !(l.Loss >= 0 && l.Loss <= 1):
		return fmt.Errorf("%w: loss %v not in [0, 1]", ErrSpec, l.Loss)
	}
	return nil
}

// Spec describes an emulated network.
type Spec struct {
	Hosts int
	// Link(from, to) is called once per ordered pair of distinct hosts,
	// during Start, from one goroutine. nil = no impairment.
	Link    func(from, to int) Link
	Backend string // "auto" or "" (netem if the kernel has it, else delayline), "netem", "delayline"
	Seed    int64  // seeds loss and jitter of the delayline backend
	// MaxDuration bounds the run: after it the Net closes itself
	// (0 → DefaultMaxDuration).
	MaxDuration time.Duration
	// MaxBytes bounds the IP bytes offered to the emulator; beyond it
	// nothing is forwarded any more, Stats counts the packets as Capped and
	// Err reports ErrMaxBytes (0 → DefaultMaxBytes).
	MaxBytes int64
	// TCP is the TCP congestion control of every host: "" for cubic, the
	// default of the machines volunteers run (Windows, macOS and most
	// Linux distributions), "host" for this machine's own default, or a
	// name the kernel offers (net.ipv4.tcp_available_congestion_control).
	TCP string
	Log *slog.Logger
}

// Counter counts packets and their IP bytes.
type Counter struct {
	Packets int64
	Bytes   int64
}

func (c *Counter) add(o Counter) {
	c.Packets += o.Packets
	c.Bytes += o.Bytes
}

// PairStats are the counters of one direction of a pair.
type PairStats struct {
	From, To   int
	Forwarded  Counter // delivered to To
	Lost       Counter // dropped by Loss (netem: all its drops)
	QueueDrops Counter // dropped because the queue was full
}

// Stats are the counters of a Net since Start.
type Stats struct {
	Forwarded, Lost, QueueDrops Counter // sums over Pairs
	Capped                      Counter // dropped after MaxBytes was reached
	Invalid                     Counter // not IPv4, malformed or to no host (delayline)
	WriteErrors                 Counter // could not be written to the destination (delayline)
	Pairs                       []PairStats
	// Stopped is why forwarding stopped (ErrMaxBytes, ErrMaxDuration,
	// ErrClosed, a context error), nil while it goes on.
	Stopped error
}

// Net is a running emulated network. Its methods are safe for concurrent
// use.
type Net struct {
	spec    Spec
	log     *slog.Logger
	backend string
	hosts   []string // namespace names
	hub     string   // netem backend: the bridge's namespace
	line    *line
	star    *star

	mu     sync.Mutex
	reason error

	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
	stopCtx   func() bool
	timer     *time.Timer
}

// hooks let tests replace what they cannot have here.
type hooks struct {
	probe func() bool       // HasNetem
	leaf  func(Link) string // the netem backend's leaf qdisc
}

// Start makes the network: one namespace per host, connected by the chosen
// backend. It removes leftovers of dead runs first (Cleanup). The Net
// closes itself when ctx is done or MaxDuration has passed; Close it when
// done.
func Start(ctx context.Context, s Spec) (*Net, error) {
	return start(ctx, s, hooks{})
}

func start(ctx context.Context, s Spec, hk hooks) (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if hk.probe == nil {
		hk.probe = HasNetem
	}
	if hk.leaf == nil {
		hk.leaf = netemLeaf
	}
	if s.Log == nil {
		s.Log = slog.Default()
	}
	if s.Hosts < 1 || s.Hosts > MaxHosts {
		return nil, fmt.Errorf("%w: %d hosts, want 1..%d", ErrSpec, s.Hosts, MaxHosts)
	}
	if s.MaxDuration < 0 || s.MaxBytes < 0 {
		return nil, fmt.Errorf("%w: negative MaxDuration or MaxBytes", ErrSpec)
	}
	if s.MaxDuration == 0 {
		s.MaxDuration = DefaultMaxDuration
	}
	if s.MaxBytes == 0 {
		s.MaxBytes = DefaultMaxBytes
	}
	links := make([]Link, s.Hosts*s.Hosts)
	if s.Link != nil {
		for from := range s.Hosts {
			for to := range s.Hosts {
				if from == to {
					continue
				}
				l := s.Link(from, to)
				if err := l.valid(); err != nil {
					return nil, fmt.Errorf("link %d→%d: %w", from, to, err)
				}
				links[from*s.Hosts+to] = l
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := Cleanup(s.Log); err != nil {
		s.Log.Warn("netem: cleanup of leftovers", "err", err)
	}
	backend, err := chooseBackend(s.Backend, hk.probe)
	if err != nil {
		return nil, err
	}

	pre := runPrefix(runSeq.Add(1))
	n := &Net{spec: s, log: s.Log.With("backend", backend), backend: backend, done: make(chan struct{})}
	for i := range s.Hosts {
		n.hosts = append(n.hosts, fmt.Sprintf("%s%d", pre, i))
	}
	if backend == BackendNetem {
		n.hub = pre + "hub"
	}
	claim(n.names()...)
	fail := func(err error) (*Net, error) {
		n.teardown()
		return nil, err
	}
	for _, name := range n.names() {
		if err := addNetns(name); err != nil {
			return fail(err)
		}
	}
	if cc := cmp.Or(s.TCP, "cubic"); cc != "host" {
		if err := allowCongestion(cc, n.log); err != nil {
			return fail(err)
		}
		for i := range s.Hosts {
			if err := n.Do(i, func() error { return setCongestion(cc) }); err != nil {
				return fail(fmt.Errorf("host %d: %w", i, err))
			}
		}
	}
	switch backend {
	case BackendDelayline:
		n.line = newLine(s.Hosts, links, s.Seed, s.MaxBytes, n.log)
		n.line.onCap = func() { n.stopped(ErrMaxBytes) }
		tuns := make([]int, s.Hosts)
		for i := range s.Hosts {
			err := n.Do(i, func() (err error) {
				tuns[i], err = openTUN(n.Addr(i))
				return err
			})
			if err != nil {
				for _, fd := range tuns[:i] {
					unix.Close(fd)
				}
				return fail(fmt.Errorf("host %d: %w", i, err))
			}
		}
		if err := n.line.start(tuns); err != nil {
			for _, fd := range tuns {
				unix.Close(fd)
			}
			return fail(err)
		}
	case BackendNetem:
		st, err := newStar(n.hub, n.hosts, links, s.MaxBytes, hk.leaf, n.log, func() { n.stopped(ErrMaxBytes) })
		if err != nil {
			return fail(err)
		}
		n.star = st
	}
	n.timer = time.AfterFunc(s.MaxDuration, func() { n.shutdown(ErrMaxDuration) })
	n.stopCtx = context.AfterFunc(ctx, func() { n.shutdown(context.Cause(ctx)) })
	n.log.Info("netem: started", "hosts", s.Hosts, "netns", pre+"*", "max_duration", s.MaxDuration, "max_bytes", s.MaxBytes)
	return n, nil
}

// chooseBackend resolves the requested backend given whether the kernel
// has netem (asked only for "auto" and "netem").
func chooseBackend(req string, probe func() bool) (string, error) {
	switch req {
	case "", BackendAuto:
		if probe() {
			return BackendNetem, nil
		}
		return BackendDelayline, nil
	case BackendNetem:
		if !probe() {
			return "", ErrNoNetem
		}
		return BackendNetem, nil
	case BackendDelayline:
		return BackendDelayline, nil
	}
	return "", fmt.Errorf("%w: backend %q, want auto, netem or delayline", ErrSpec, req)
}

// names are every namespace of the run.
func (n *Net) names() []string {
	if n.hub == "" {
		return n.hosts
	}
	return append(append([]string(nil), n.hosts...), n.hub)
}

// Backend is the backend in use: "netem" or "delayline".
func (n *Net) Backend() string { return n.backend }

// Hosts is the number of hosts.
func (n *Net) Hosts() int { return len(n.hosts) }

// Addr is host i's address, 10.77.0.0 + i + 1 in 10.77.0.0/16 (host 0 is
// 10.77.0.1, host 255 is 10.77.1.0).
func (n *Net) Addr(i int) netip.Addr { return hostAddr(i) }

// Namespace is the name of host i's network namespace,
// psim-<pid>-<run>-<i>, as `ip netns` knows it.
func (n *Net) Namespace(i int) string { return n.hosts[i] }

// Command returns a command that runs name inside host i's namespace
// through `ip netns exec`. ctx kills it. Its processes keep the namespace
// alive after Close: end them first.
func (n *Net) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.hosts[i], name}, args...)...)
}

// Do runs f on a locked OS thread switched into host i's namespace and
// switches the thread back afterwards. Sockets f opens stay in that
// namespace and can be used from any goroutine after Do returns; f must not
// rely on goroutines it starts being in the namespace, nor resolve names.
func (n *Net) Do(i int, f func() error) error {
	if i < 0 || i >= len(n.hosts) {
		return fmt.Errorf("%w: host %d of %d", ErrSpec, i, len(n.hosts))
	}
	return inNetns(filepath.Join(netnsDir, n.hosts[i]), f)
}

// Stats returns the counters so far.
func (n *Net) Stats() Stats {
	var s Stats
	switch {
	case n.line != nil:
		s = n.line.stats()
	case n.star != nil:
		s = n.star.stats()
	}
	s.Stopped = n.Err()
	return s
}

// Err is why forwarding stopped: nil while it goes on, else ErrMaxBytes,
// ErrMaxDuration, ErrClosed or the cause of the context's end; the first
// reason sticks.
func (n *Net) Err() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.reason
}

// Done is closed when the Net has closed (Close, its context, MaxDuration)
// and removed its namespaces.
func (n *Net) Done() <-chan struct{} { return n.done }

func (n *Net) stopped(reason error) {
	n.mu.Lock()
	first := n.reason == nil
	if first {
		n.reason = reason
	}
	n.mu.Unlock()
	switch {
	case !first:
	case errors.Is(reason, ErrMaxBytes), errors.Is(reason, ErrMaxDuration):
		n.log.Warn("netem: forwarding stopped", "reason", reason)
	default:
		n.log.Debug("netem: forwarding stopped", "reason", reason)
	}
}

// Close stops forwarding and removes every namespace and device of the
// Net. It is idempotent and safe from any goroutine; later calls return
// the first call's result.
func (n *Net) Close() error {
	return n.shutdown(ErrClosed)
}

func (n *Net) shutdown(reason error) error {
	n.closeOnce.Do(func() {
		n.stopped(reason)
		if n.timer != nil {
			n.timer.Stop()
		}
		if n.stopCtx != nil {
			n.stopCtx()
		}
		n.closeErr = n.teardown()
		// Log before Done: a caller done with the Net once Done is closed
		// (a test whose logger is its own) sees no later writes.
		n.log.Info("netem: closed", "reason", reason, "err", n.closeErr)
		close(n.done)
	})
	return n.closeErr
}

// teardown stops the backend and removes the namespaces.
func (n *Net) teardown() error {
	var errs []error
	if n.line != nil {
		errs = append(errs, n.line.stop())
	}
	if n.star != nil {
		n.star.stop()
	}
	for _, name := range n.names() {
		errs = append(errs, delNetns(name))
	}
	release(n.names()...)
	return errors.Join(errs...)
}
