package netem

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// maxInFlight bounds the bytes the delay line holds for all pairs together
// (queued for Rate plus travelling their Delay). Beyond it packets are
// dropped as QueueDrops: the emulator's memory stays bounded whatever the
// Links say.
const maxInFlight = 64 << 20

// slack: packets due within this much of the present leave in the same
// wake-up; re-arming the timer for less costs more than it is late.
const slack = 20_000 // ns

// DefaultQueue returns the drop-tail buffer of a Link whose Queue is 0:
// 200 ms worth of its Rate, at least 64 KiB and at most 8 MiB (a home
// router's buffer; pipeshard's paths are mostly uplinks of homes).
func DefaultQueue(rate int64) int64 {
	if rate <= 0 {
		return 0
	}
	return min(max(rate/5, 64<<10), 8<<20)
}

// verdict of a pair on one packet.
type verdict int

const (
	pass verdict = iota
	lost
	queueFull
)

// pair is the state of one direction of a host pair: its link, its random
// stream, its serializer and its counters. Only the reader of host from
// calls admit; the counters are read by Stats.
type pair struct {
	from, to int
	link     Link
	queue    int64 // drop-tail limit in bytes of what waits for Rate
	rng      *rand.Rand

	nextFree int64 // monotonic ns when the serializer is next free
	lastDue  int64 // due time of the last packet admitted (keeps order)

	fwd, lost, queueDrops counter
}

func newPair(from, to int, l Link, seed int64) *pair {
	q := l.Queue
	if q == 0 {
		q = DefaultQueue(l.Rate)
	}
	return &pair{
		from: from, to: to, link: l, queue: q,
		rng: rand.New(rand.NewPCG(uint64(seed), uint64(from)<<32|uint64(to))),
	}
}

// admit decides the fate of a packet of n bytes offered at now (ns): lost
// (one draw of the pair's stream when Loss > 0), dropped because the bytes
// still waiting for the serializer plus n exceed the queue, or passed with
// the time it is due at the destination: when the serializer has sent it
// at Rate, plus Delay, plus a uniform draw in [-Jitter, +Jitter] (a second
// draw, only when Jitter > 0), never before it was sent and never before
// the pair's previous packet (jitter does not reorder).
func (p *pair) admit(n int, now int64) (int64, verdict) {
	l := &p.link
	if l.Loss > 0 && p.rng.Float64() < l.Loss {
		return 0, lost
	}
	sent := now
	if l.Rate > 0 {
		start := max(now, p.nextFree)
		backlog := float64(start-now) * float64(l.Rate) / 1e9
		if backlog+float64(n) > float64(p.queue) {
			return 0, queueFull
		}
		sent = start + int64(n)*1e9/l.Rate
		p.nextFree = sent
	}
	due := sent + int64(l.Delay)
	if l.Jitter > 0 {
		due += int64((p.rng.Float64()*2 - 1) * float64(l.Jitter))
		due = max(due, sent)
	}
	due = max(due, p.lastDue)
	p.lastDue = due
	return due, pass
}

// counter is a Counter updated atomically.
type counter struct{ packets, bytes atomic.Int64 }

func (c *counter) add(n int) {
	c.packets.Add(1)
	c.bytes.Add(int64(n))
}

func (c *counter) load() Counter {
	return Counter{Packets: c.packets.Load(), Bytes: c.bytes.Load()}
}

// item is a packet waiting in the delay line.
type item struct {
	due int64
	seq uint64
	to  int
	pkt []byte
	p   *pair
}

// itemHeap orders items by due time, ties by arrival.
type itemHeap []*item

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	return h[i].due < h[j].due || h[i].due == h[j].due && h[i].seq < h[j].seq
}
func (h itemHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *itemHeap) Push(x any)   { *h = append(*h, x.(*item)) }
func (h *itemHeap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return it
}

// schedule is the one queue of the delay line: readers push, the release
// loop pops what is due. arm is told, under mu, the due time of the head
// whenever it changes (0: empty).
type schedule struct {
	mu       sync.Mutex
	h        itemHeap
	seq      uint64
	inFlight int64
	closed   bool
	arm      func(due int64)
}

// push queues it; false when closed or over maxInFlight.
func (s *schedule) push(it *item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.inFlight+int64(len(it.pkt)) > maxInFlight {
		return false
	}
	s.seq++
	it.seq = s.seq
	s.inFlight += int64(len(it.pkt))
	heap.Push(&s.h, it)
	if s.h[0] == it {
		s.arm(it.due)
	}
	return true
}

// popDue appends to batch the items due at or before now, re-arms for the
// new head and tells whether the schedule is closed.
func (s *schedule) popDue(now int64, batch []*item) ([]*item, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return batch, true
	}
	for len(s.h) > 0 && s.h[0].due <= now {
		it := heap.Pop(&s.h).(*item)
		s.inFlight -= int64(len(it.pkt))
		batch = append(batch, it)
	}
	if len(s.h) > 0 {
		s.arm(s.h[0].due)
	} else {
		s.arm(0)
	}
	return batch, false
}

func (s *schedule) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.arm(1) // wake the release loop now
}

// monoNow is CLOCK_MONOTONIC in ns, the clock of the timerfd.
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return ts.Nano()
}

// timer is a timerfd on CLOCK_MONOTONIC: a blocking read wakes within tens
// of microseconds of the armed time, where Go's timers round short waits
// up to a millisecond.
type timer int

func newTimer() (timer, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("%w: timerfd: %w", ErrSetup, err)
	}
	return timer(fd), nil
}

// arm sets the timer to fire at due (absolute monotonic ns); 0 disarms it.
func (t timer) arm(due int64) {
	var v unix.ItimerSpec
	if due > 0 {
		v.Value = unix.NsecToTimespec(due)
	}
	_ = unix.TimerfdSettime(int(t), unix.TFD_TIMER_ABSTIME, &v, nil)
}

// wait blocks until the timer has fired.
func (t timer) wait() {
	var b [8]byte
	for {
		_, err := unix.Read(int(t), b[:])
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

func (t timer) close() { unix.Close(int(t)) }

// line is the delayline backend: the process reads every host's TUN,
// impairs and delays the packets, and writes them into the destination's
// TUN.
type line struct {
	log      *slog.Logger
	hosts    int
	links    []Link // hosts*hosts, from*hosts+to
	seed     int64
	tuns     []int // TUN fds, non-blocking
	stopR    int   // eventfd: readable once the readers must stop
	stopping atomic.Bool

	maxBytes int64
	offered  atomic.Int64 // IPv4 bytes to a host offered so far
	capped   atomic.Bool
	onCap    func() // called once, when MaxBytes is reached

	sched schedule
	tm    timer

	pairsMu sync.Mutex
	pairs   []*pair   // every pair made, for Stats
	own     [][]*pair // own[from][to], touched only by from's reader

	invalid, capDrops, writeErrs counter
	readers                      sync.WaitGroup
	released                     chan struct{} // closed when release returns
}

// newLine makes the engine without its TUNs and goroutines (tests drive
// ingress and the schedule directly).
func newLine(hosts int, links []Link, seed, maxBytes int64, log *slog.Logger) *line {
	l := &line{log: log, hosts: hosts, links: links, seed: seed, maxBytes: maxBytes, own: make([][]*pair, hosts)}
	for i := range l.own {
		l.own[i] = make([]*pair, hosts)
	}
	return l
}

// start runs one reader per TUN and the release loop, each on its own OS
// thread (see boost).
func (l *line) start(tuns []int) error {
	tm, err := newTimer()
	if err != nil {
		return err
	}
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		tm.close()
		return fmt.Errorf("%w: eventfd: %w", ErrSetup, err)
	}
	l.tm, l.stopR = tm, stop
	l.tuns = tuns
	l.sched.arm = tm.arm
	l.released = make(chan struct{})
	l.readers.Add(len(tuns))
	go l.release()
	for i := range tuns {
		go l.read(i)
	}
	return nil
}

// stop ends the goroutines, then closes the TUNs (which removes them), the
// timer and the eventfd.
func (l *line) stop() error {
	if l.tuns == nil {
		return nil
	}
	l.sched.close()
	<-l.released // no write into a closed TUN
	l.stopping.Store(true)
	var one [8]byte
	one[0] = 1
	if _, err := unix.Write(l.stopR, one[:]); err != nil {
		return fmt.Errorf("%w: stop readers: %w", ErrCleanup, err)
	}
	l.readers.Wait()
	var errs []error
	for _, fd := range l.tuns {
		if err := unix.Close(fd); err != nil {
			errs = append(errs, fmt.Errorf("%w: close TUN: %w", ErrCleanup, err))
		}
	}
	l.tm.close()
	unix.Close(l.stopR)
	l.tuns = nil
	return errors.Join(errs...)
}

// boost locks the calling goroutine to its OS thread for good (the thread
// ends with the goroutine) and raises the thread's priority to nice -20,
// so that the emulator keeps time when other work loads the machine. It is
// best effort.
func boost(log *slog.Logger) {
	runtime.LockOSThread()
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), -20); err != nil {
		log.Debug("netem: raise thread priority", "err", err)
	}
}

// read forwards the packets host from sends: it reads its TUN until it is
// empty, then waits in poll(2) for more or for the stop eventfd.
func (l *line) read(from int) {
	defer l.readers.Done()
	boost(l.log)
	fd := l.tuns[from]
	buf := make([]byte, 1<<16)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(l.stopR), Events: unix.POLLIN}}
	for {
		n, err := unix.Read(fd, buf)
		switch {
		case err == nil:
			if l.stopping.Load() { // a flood never lets the TUN run dry
				return
			}
			l.ingress(from, buf[:n], monoNow())
		case errors.Is(err, unix.EAGAIN):
			if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
				l.log.Error("netem: poll", "host", from, "err", err)
				return
			}
			if fds[1].Revents != 0 {
				return
			}
		case errors.Is(err, unix.EINTR):
		default:
			l.log.Error("netem: read TUN", "host", from, "err", err)
			return
		}
	}
}

// ingress handles one packet that host from sent at now.
func (l *line) ingress(from int, pkt []byte, now int64) {
	h, err := parseIPv4(pkt)
	if err != nil {
		l.invalid.add(len(pkt))
		return
	}
	to := hostIndex(h.dst, l.hosts)
	if to < 0 || to == from {
		l.invalid.add(len(pkt))
		return
	}
	n := h.length
	if l.capped.Load() {
		l.capDrops.add(n)
		return
	}
	if l.offered.Add(int64(n)) > l.maxBytes {
		l.capDrops.add(n)
		if l.capped.CompareAndSwap(false, true) && l.onCap != nil {
			l.onCap()
		}
		return
	}
	p := l.pair(from, to)
	due, v := p.admit(n, now)
	switch v {
	case lost:
		p.lost.add(n)
		return
	case queueFull:
		p.queueDrops.add(n)
		return
	}
	it := &item{due: due, to: to, pkt: append([]byte(nil), pkt[:n]...), p: p}
	if !l.sched.push(it) {
		p.queueDrops.add(n)
	}
}

func (l *line) pair(from, to int) *pair {
	if p := l.own[from][to]; p != nil {
		return p
	}
	p := newPair(from, to, l.links[from*l.hosts+to], l.seed)
	l.own[from][to] = p
	l.pairsMu.Lock()
	l.pairs = append(l.pairs, p)
	l.pairsMu.Unlock()
	return p
}

// release writes packets into their destination's TUN when they are due.
func (l *line) release() {
	defer close(l.released)
	boost(l.log)
	var batch []*item
	for {
		var closed bool
		batch, closed = l.sched.popDue(monoNow()+slack, batch[:0])
		if closed {
			return
		}
		for i, it := range batch {
			if _, err := unix.Write(l.tuns[it.to], it.pkt); err != nil {
				l.writeErrs.add(len(it.pkt))
				l.log.Debug("netem: write", "host", it.to, "err", err)
			} else {
				it.p.fwd.add(len(it.pkt))
			}
			batch[i] = nil
		}
		l.tm.wait()
	}
}

func (l *line) stats() Stats {
	l.pairsMu.Lock()
	ps := append([]*pair(nil), l.pairs...)
	l.pairsMu.Unlock()
	var s Stats
	for _, p := range ps {
		st := PairStats{From: p.from, To: p.to, Forwarded: p.fwd.load(), Lost: p.lost.load(), QueueDrops: p.queueDrops.load()}
		s.Pairs = append(s.Pairs, st)
		s.Forwarded.add(st.Forwarded)
		s.Lost.add(st.Lost)
		s.QueueDrops.add(st.QueueDrops)
	}
	slices.SortFunc(s.Pairs, func(a, b PairStats) int { return cmp.Or(cmp.Compare(a.From, b.From), cmp.Compare(a.To, b.To)) })
	s.Capped = l.capDrops.load()
	s.Invalid = l.invalid.load()
	s.WriteErrors = l.writeErrs.load()
	return s
}
