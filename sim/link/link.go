package link

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
)

// Link is one direction of the path from one host to another.
type Link struct {
	// Latency is the one-way delay of every packet.
	Latency time.Duration
	// Jitter varies the delay within [Latency-Jitter, Latency+Jitter]
	// (never below zero), its mean staying Latency: the delay moves
	// linearly between random values drawn every max(1 ms, 2·Jitter) of
	// time, never faster than time passes, so packets keep their order.
	Jitter time.Duration
	// Loss is the probability, in [0, 1], that a packet is lost on the
	// way (after it has used its share of Bandwidth).
	Loss float64
	// Bandwidth is the link's rate in bytes per second; 0 is unlimited.
	Bandwidth int64
	// Queue bounds how long a packet may wait for a busy link (only with
	// a Bandwidth): a packet that would wait longer is dropped, as a
	// router's full buffer drops it. 0 means DefaultQueue.
	Queue time.Duration
}

// DefaultQueue is a Link's queue when its Queue is 0.
const DefaultQueue = 100 * time.Millisecond

// Links gives the link from host i to host j. It must be a pure function:
// the network calls it once per ordered pair, when the first packet goes
// from i to j.
type Links func(from, to int) Link

// Uniform is the same link between every two hosts.
func Uniform(l Link) Links { return func(int, int) Link { return l } }

// Matrix reads the link from i to j in m[i][j]. A pair outside m gets
// the zero Link (instant, lossless).
func Matrix(m [][]Link) Links {
	return func(i, j int) Link {
		if i < len(m) && j < len(m[i]) {
			return m[i][j]
		}
		return Link{}
	}
}

// Stats counts the packets offered to one directed link.
type Stats struct {
	Packets, Bytes int64 // sent into the link, dropped ones included
	Lost           int64 // dropped by the link's Loss
	Overflow       int64 // dropped because the link's Queue was full
}

// Network is a simulated packet network of numbered hosts. Every ordered
// pair of hosts has its own Link. Its randomness (jitter and loss) is a
// PCG generator seeded from the network's seed, the pair and the packet's
// time: the same seed gives the same draws for the same traffic.
type Network struct {
	seed  uint64
	links Links

	mu     sync.Mutex
	closed bool
	hosts  map[int]*simHost
	byIP   map[netip.Addr]int
	eps    map[netip.AddrPort]*endpoint
	pipes  map[[2]int]*pipe
	queue  deliveries
	seq    uint64
	kick   chan struct{}
	done   chan struct{}
	exited chan struct{}
}

// simHost is what the network knows of host i.
type simHost struct {
	ip       netip.Addr
	nextPort uint16
	h        host.Host
}

// pipe is the state of the directed link from one host to another.
type pipe struct {
	Link
	key       uint64    // the pair, mixed
	busyUntil time.Time // the link transmits until then
	last      time.Time // arrival of the latest packet (keeps order)
	slot      int64     // the millisecond the latest packet was sent in
	inSlot    uint64    // packets sent in that millisecond so far
	pcg       rand.PCG  // reseeded for every draw
	stats     Stats
}

// New returns a network whose links are given by links, its randomness
// seeded by seed. It starts one goroutine, which delivers packets: under
// testing/synctest, call New inside the bubble, so that delivery follows
// the bubble's clock. Close stops it.
func New(seed uint64, links Links) *Network {
	n := &Network{
		seed: seed, links: links,
		hosts: map[int]*simHost{}, byIP: map[netip.Addr]int{},
		eps: map[netip.AddrPort]*endpoint{}, pipes: map[[2]int]*pipe{},
		kick: make(chan struct{}, 1), done: make(chan struct{}), exited: make(chan struct{}),
	}
	go n.deliver()
	return n
}

// IP is host i's address on the network: 10.0.0.0/8, counting from
// 10.0.0.1 for host 0.
func IP(i int) netip.Addr {
	k := uint32(i + 1)
	return netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)})
}

// Stats returns the counts of the link from host i to host j.
func (n *Network) Stats(from, to int) Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p := n.pipes[[2]int{from, to}]; p != nil {
		return p.stats
	}
	return Stats{}
}

// Close closes every host made by Host (closing a host twice is
// harmless), then every endpoint, and stops delivering packets.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	var hosts []host.Host
	for _, h := range n.hosts {
		if h.h != nil {
			hosts = append(hosts, h.h)
		}
	}
	n.mu.Unlock()
	for _, h := range hosts {
		h.Close()
	}
	n.mu.Lock()
	n.closed = true
	eps := make([]*endpoint, 0, len(n.eps))
	for _, e := range n.eps {
		eps = append(eps, e)
	}
	n.mu.Unlock()
	for _, e := range eps {
		e.Close()
	}
	close(n.done)
	<-n.exited
	return nil
}

// addHost registers host i.
func (n *Network) addHost(i int) (*simHost, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.closed:
		return nil, net.ErrClosed
	case i < 0 || i >= 1<<24-1:
		return nil, fmt.Errorf("link: host %d out of range", i)
	case n.hosts[i] != nil:
		return nil, fmt.Errorf("link: host %d already exists", i)
	}
	h := &simHost{ip: IP(i), nextPort: 49152}
	n.hosts[i] = h
	n.byIP[h.ip] = i
	return h, nil
}

// listen opens a UDP endpoint of host i at laddr: its IP must be host
// i's or unspecified (then it is host i's), its port 0 picks a free one.
func (n *Network) listen(i int, laddr *net.UDPAddr) (*endpoint, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	h := n.hosts[i]
	if n.closed || h == nil {
		return nil, net.ErrClosed
	}
	ip, ok := netip.AddrFromSlice(laddr.IP)
	ip = ip.Unmap()
	if !ok || ip.IsUnspecified() {
		ip = h.ip
	}
	if ip != h.ip {
		return nil, fmt.Errorf("link: host %d is %s, cannot listen on %s", i, h.ip, ip)
	}
	port := uint16(laddr.Port)
	if port == 0 {
		for n.eps[netip.AddrPortFrom(ip, h.nextPort)] != nil {
			h.nextPort++
		}
		port = h.nextPort
		h.nextPort++
	}
	ap := netip.AddrPortFrom(ip, port)
	if n.eps[ap] != nil {
		return nil, fmt.Errorf("link: listen %s: address already in use", ap)
	}
	e := newEndpoint(n, i, ap)
	n.eps[ap] = e
	return e, nil
}

// forget removes a closed endpoint.
func (n *Network) forget(e *endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.eps[e.ap] == e {
		delete(n.eps, e.ap)
	}
}

// pipeLocked returns the link from host i to host j, making it on first
// use.
func (n *Network) pipeLocked(i, j int) *pipe {
	k := [2]int{i, j}
	p := n.pipes[k]
	if p == nil {
		p = &pipe{Link: n.links(i, j), key: mix(uint64(uint32(i))<<32 | uint64(uint32(j)))}
		if p.Queue == 0 {
			p.Queue = DefaultQueue
		}
		n.pipes[k] = p
	}
	return p
}

// slot is the granularity of loss: the k-th packet sent on a link
// within a millisecond always meets the same fate.
const slot = time.Millisecond

// mix is splitmix64's finalizer: near inputs give unrelated outputs.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// uniform returns a number in [0, 1) that depends only on the network's
// seed, the pair, what it is for, and the two words a and b.
func (p *pipe) uniform(seed uint64, what, a, b uint64) float64 {
	p.pcg.Seed(seed^mix(p.key^what), mix(a)^b)
	return float64(p.pcg.Uint64()>>11) / (1 << 53)
}

// Kinds of draw.
const (
	drawJitter = 0x6a6974746572 // "jitter"
	drawLoss   = 0x6c6f7373     // "loss"
)

// jitterAt is the jitter of a packet leaving the link at t. It moves
// linearly between values drawn at knots max(slot, 2·Jitter) apart, so
// that it never falls faster than time passes: packets stay in order by
// themselves, as behind a queue, and the mean delay stays Latency however
// dense the traffic. The knots' values depend only on (seed, pair, knot).
func (p *pipe) jitterAt(seed uint64, t time.Time) time.Duration {
	k := int64(max(slot, 2*p.Jitter))
	ns := t.UnixNano()
	m := ns / k
	frac := float64(ns-m*k) / float64(k)
	u0 := p.uniform(seed, drawJitter, uint64(m), 0)
	u1 := p.uniform(seed, drawJitter, uint64(m+1), 0)
	return time.Duration((2*(u0+(u1-u0)*frac) - 1) * float64(p.Jitter))
}

// draw decides the fate of a packet of size bytes sent on the pipe at
// now: its arrival time, or ok false if it is dropped. Its loss depends
// only on (seed, pair, the millisecond it is sent in, its index in that
// millisecond), its jitter only on (seed, pair, the time it leaves):
// traffic on other links, or an extra packet in an earlier millisecond,
// changes nothing, so a run under testing/synctest repeats its draws even
// when the protocols above add or remove a packet here and there.
func (p *pipe) draw(seed uint64, now time.Time, size int) (arrive time.Time, ok bool) {
	ms := now.UnixNano() / int64(slot)
	if ms != p.slot {
		p.slot, p.inSlot = ms, 0
	}
	idx := p.inSlot
	p.inSlot++
	p.stats.Packets++
	p.stats.Bytes += int64(size)
	depart := now
	if p.Bandwidth > 0 {
		start := now
		if p.busyUntil.After(now) {
			start = p.busyUntil
		}
		if start.Sub(now) > p.Queue {
			p.stats.Overflow++
			return time.Time{}, false
		}
		p.busyUntil = start.Add(time.Duration(int64(size) * int64(time.Second) / p.Bandwidth))
		depart = p.busyUntil
	}
	if p.Loss > 0 && p.uniform(seed, drawLoss, uint64(ms), idx) < p.Loss {
		p.stats.Lost++
		return time.Time{}, false
	}
	delay := p.Latency
	if p.Jitter > 0 {
		delay += p.jitterAt(seed, depart)
	}
	arrive = depart.Add(max(delay, 0))
	if arrive.Before(p.last) {
		arrive = p.last // rounding: never overtake
	}
	p.last = arrive
	return arrive, true
}

// send puts a packet from endpoint e to dst on the way.
func (n *Network) send(e *endpoint, dst netip.AddrPort, b []byte) {
	n.mu.Lock()
	defer n.mu.Unlock()
	to, ok := n.byIP[dst.Addr()]
	if n.closed || !ok {
		return // nobody there: UDP drops it silently
	}
	p := n.pipeLocked(e.host, to)
	arrive, ok := p.draw(n.seed, time.Now(), len(b))
	if !ok {
		return
	}
	n.seq++
	heap.Push(&n.queue, delivery{at: arrive, seq: n.seq, to: dst, pkt: packet{from: e.udp, data: b}})
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// deliver hands packets to their endpoints at their arrival times.
func (n *Network) deliver() {
	defer close(n.exited)
	t := time.NewTimer(time.Hour)
	t.Stop()
	var due []delivery
	for {
		n.mu.Lock()
		now := time.Now()
		due = due[:0]
		for len(n.queue) > 0 && !n.queue[0].at.After(now) {
			d := heap.Pop(&n.queue).(delivery)
			if e := n.eps[d.to]; e != nil {
				d.ep = e
				due = append(due, d)
			}
		}
		wait := time.Duration(-1)
		if len(n.queue) > 0 {
			wait = n.queue[0].at.Sub(now)
		}
		n.mu.Unlock()
		for i := range due {
			due[i].ep.push(due[i].pkt)
			due[i] = delivery{}
		}
		if wait >= 0 {
			t.Reset(wait)
		}
		select {
		case <-n.done:
			t.Stop()
			return
		case <-n.kick:
		case <-t.C:
		}
	}
}

// delivery is a packet on its way, due at at.
type delivery struct {
	at  time.Time
	seq uint64 // sending order, for equal times
	to  netip.AddrPort
	ep  *endpoint
	pkt packet
}

// deliveries is a min-heap by (at, seq).
type deliveries []delivery

func (q deliveries) Len() int { return len(q) }
func (q deliveries) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q deliveries) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *deliveries) Push(x any)   { *q = append(*q, x.(delivery)) }
func (q *deliveries) Pop() any {
	old := *q
	d := old[len(old)-1]
	old[len(old)-1] = delivery{}
	*q = old[:len(old)-1]
	return d
}
