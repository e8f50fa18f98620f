package netem

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The netem backend is a star: a hub namespace holds a bridge br0 and one
// veth h<i> per host whose peer is psim0 in host i's namespace. Packets to
// host `to` leave the hub through h<to>; its root htb qdisc sorts them by
// source address (u32 filters) into one class per impaired sender, whose
// leaf is a netem qdisc with that pair's Link. Unmatched traffic (other
// senders, ARP) goes unimpaired through class 1:1. Impairing at the hub,
// not in the sender's stack, keeps netem's queue from pushing back on the
// sender's sockets, as a real router does not.

const (
	ethHeader = 14 // bytes the hub's qdiscs count beyond the IP packet
	pollEvery = 500 * time.Millisecond
)

// netemLeaf is the leaf qdisc of a pair: netem with its delay, jitter
// (uniform, netem's default), loss, rate counted on IP bytes
// (packetoverhead -14 takes the Ethernet header off) and a packet limit
// that holds the queue plus what travels the delay.
func netemLeaf(l Link) string {
	var b strings.Builder
	b.WriteString("netem")
	if l.Delay > 0 || l.Jitter > 0 {
		fmt.Fprintf(&b, " delay %dus", l.Delay.Microseconds())
		if l.Jitter > 0 {
			fmt.Fprintf(&b, " %dus", l.Jitter.Microseconds())
		}
	}
	if l.Loss > 0 {
		fmt.Fprintf(&b, " loss random %s%%", strconv.FormatFloat(l.Loss*100, 'f', -1, 64))
	}
	limit := int64(10000)
	if l.Rate > 0 {
		fmt.Fprintf(&b, " rate %dbit packetoverhead -%d", l.Rate*8, ethHeader)
		q := l.Queue
		if q == 0 {
			q = DefaultQueue(l.Rate)
		}
		inFlight := float64(l.Rate) * (l.Delay + l.Jitter).Seconds()
		limit = max(1000, (q+int64(inFlight))/mtu+1)
	}
	fmt.Fprintf(&b, " limit %d", limit)
	return b.String()
}

// class is the htb minor (and leaf major) of sender from: 2.. in hex.
func class(from int) string { return strconv.FormatInt(int64(from)+2, 16) }

// port is the hub's veth towards host i.
func port(i int) string { return "h" + strconv.Itoa(i) }

// starPlan returns the batches that build the star: the hub's ip batch,
// each host's ip batch, and the hub's tc batch.
func starPlan(hosts []string, links []Link, leaf func(Link) string) (hub string, host []string, tc string) {
	n := len(hosts)
	var hb, tb strings.Builder
	hb.WriteString("link add br0 type bridge\nlink set br0 up\n")
	for i, ns := range hosts {
		fmt.Fprintf(&hb, "link add %s type veth peer name %s netns %s\n", port(i), tunName, ns)
		fmt.Fprintf(&hb, "link set %s master br0 up\n", port(i))
		host = append(host, fmt.Sprintf(
			"link set lo up\naddr add %s/16 dev %s\nlink set %s mtu %d gso_max_segs 1 up\n",
			hostAddr(i), tunName, tunName, mtu))
	}
	for to := range n {
		root := false
		for from := range n {
			l := links[from*n+to]
			if from == to || l == (Link{}) {
				continue
			}
			dev := port(to)
			if !root {
				fmt.Fprintf(&tb, "qdisc add dev %s root handle 1: htb default 1\n", dev)
				fmt.Fprintf(&tb, "class add dev %s parent 1: classid 1:1 htb rate 100gbit quantum 1514\n", dev)
				root = true
			}
			c := class(from)
			fmt.Fprintf(&tb, "class add dev %s parent 1: classid 1:%s htb rate 100gbit quantum 1514\n", dev, c)
			fmt.Fprintf(&tb, "qdisc add dev %s parent 1:%s handle %s: %s\n", dev, c, c, leaf(l))
			fmt.Fprintf(&tb, "filter add dev %s parent 1: protocol ip prio 1 u32 match ip src %s/32 flowid 1:%s\n", dev, hostAddr(from), c)
		}
	}
	return hb.String(), host, tb.String()
}

// batch runs `tool -n ns -batch -` on script.
func batch(tool, ns, script string) error {
	if script == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, tool, "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s -n %s -batch: %v: %s", ErrSetup, tool, ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// output runs tool -n ns args and returns its stdout.
func output(tool, ns string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, tool, append([]string{"-n", ns}, args...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("%w: %s -n %s %s: %w", ErrSetup, tool, ns, strings.Join(args, " "), err)
	}
	return out, nil
}

type star struct {
	hub   string
	hosts int
	links []Link
	log   *slog.Logger

	quit chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// newStar builds the star in the (existing) namespaces and watches
// MaxBytes: every pollEvery it sums the bytes the hosts sent into the hub
// and, past maxBytes, takes the bridge down and calls onCap.
func newStar(hub string, hosts []string, links []Link, maxBytes int64, leaf func(Link) string, log *slog.Logger, onCap func()) (*star, error) {
	hb, hs, tb := starPlan(hosts, links, leaf)
	if err := batch("ip", hub, hb); err != nil {
		return nil, err
	}
	for i, s := range hs {
		if err := batch("ip", hosts[i], s); err != nil {
			return nil, err
		}
	}
	if err := batch("tc", hub, tb); err != nil {
		return nil, err
	}
	st := &star{hub: hub, hosts: len(hosts), links: links, log: log, quit: make(chan struct{})}
	st.wg.Add(1)
	go st.watch(maxBytes, onCap)
	return st, nil
}

func (st *star) watch(maxBytes int64, onCap func()) {
	defer st.wg.Done()
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		select {
		case <-st.quit:
			return
		case <-t.C:
		}
		ports, err := st.ports()
		if err != nil {
			st.log.Debug("netem: poll", "err", err)
			continue
		}
		var in int64
		for _, p := range ports {
			in += p.rx.Bytes - ethHeader*p.rx.Packets
		}
		if in > maxBytes {
			if err := batch("ip", st.hub, "link set br0 down\n"); err != nil {
				st.log.Error("netem: stop forwarding", "err", err)
			}
			onCap()
			return
		}
	}
}

func (st *star) stop() {
	st.once.Do(func() { close(st.quit) })
	st.wg.Wait()
}

type portStats struct{ rx, tx Counter }

// ports reads the hub ports' counters (IP bytes: Ethernet headers taken
// off).
func (st *star) ports() (map[int]portStats, error) {
	out, err := output("ip", st.hub, "-s", "-j", "link", "show")
	if err != nil {
		return nil, err
	}
	return parsePorts(out)
}

func parsePorts(js []byte) (map[int]portStats, error) {
	type dir struct{ Bytes, Packets int64 }
	var links []struct {
		Ifname string
		Stats  struct{ Rx, Tx dir } `json:"stats64"`
	}
	if err := json.Unmarshal(js, &links); err != nil {
		return nil, fmt.Errorf("%w: ip -j link: %w", ErrSetup, err)
	}
	m := map[int]portStats{}
	for _, l := range links {
		i, err := strconv.Atoi(strings.TrimPrefix(l.Ifname, "h"))
		if err != nil || !strings.HasPrefix(l.Ifname, "h") {
			continue
		}
		m[i] = portStats{
			rx: Counter{Packets: l.Stats.Rx.Packets, Bytes: l.Stats.Rx.Bytes},
			tx: Counter{Packets: l.Stats.Tx.Packets, Bytes: l.Stats.Tx.Bytes},
		}
	}
	return m, nil
}

// leafStats are one leaf qdisc's counters.
type leafStats struct {
	Handle, Kind          string
	Bytes, Packets, Drops int64
}

func parseLeaves(js []byte) ([]leafStats, error) {
	var qs []leafStats
	if err := json.Unmarshal(bytes.TrimSpace(js), &qs); err != nil {
		return nil, fmt.Errorf("%w: tc -j qdisc: %w", ErrSetup, err)
	}
	return qs, nil
}

// stats reads the kernel's counters: Forwarded totals from the hub ports,
// per impaired pair from its leaf qdisc (netem counts lost packets as
// drops; their bytes are unknown). Errors leave zeros and are logged.
func (st *star) stats() Stats {
	var s Stats
	ports, err := st.ports()
	if err != nil {
		st.log.Debug("netem: stats", "err", err)
		return s
	}
	for i := range st.hosts {
		p := ports[i]
		s.Forwarded.add(Counter{Packets: p.tx.Packets, Bytes: p.tx.Bytes - ethHeader*p.tx.Packets})
	}
	for to := range st.hosts {
		if !st.impaired(to) {
			continue
		}
		out, err := output("tc", st.hub, "-s", "-j", "qdisc", "show", "dev", port(to))
		if err != nil {
			st.log.Debug("netem: stats", "err", err)
			continue
		}
		leaves, err := parseLeaves(out)
		if err != nil {
			st.log.Debug("netem: stats", "err", err)
			continue
		}
		for _, q := range leaves {
			major, err := strconv.ParseInt(strings.TrimSuffix(q.Handle, ":"), 16, 64)
			if err != nil || major < 2 {
				continue
			}
			ps := PairStats{From: int(major) - 2, To: to,
				Forwarded: Counter{Packets: q.Packets, Bytes: q.Bytes - ethHeader*q.Packets},
				Lost:      Counter{Packets: q.Drops}}
			s.Pairs = append(s.Pairs, ps)
			s.Lost.add(ps.Lost)
		}
	}
	return s
}

func (st *star) impaired(to int) bool {
	for from := range st.hosts {
		if from != to && st.links[from*st.hosts+to] != (Link{}) {
			return true
		}
	}
	return false
}
