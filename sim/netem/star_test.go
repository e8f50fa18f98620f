package netem

import (
	"errors"
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// The netem backend cannot run here (no sch_netem). These tests check what
// it asks of tc, and run its plumbing — namespaces, veths, bridge, htb
// classes and u32 filters — with a pfifo where netem would be.

func TestNetemLeaf(t *testing.T) {
	for _, tc := range []struct {
		l    Link
		want string
	}{
		{Link{}, "netem limit 10000"},
		{Link{Delay: 10 * time.Millisecond}, "netem delay 10000us limit 10000"},
		{Link{Delay: 20 * time.Millisecond, Jitter: 1500 * time.Microsecond, Loss: 0.015},
			"netem delay 20000us 1500us loss random 1.5% limit 10000"},
		{Link{Delay: 10 * time.Millisecond, Rate: 2_000_000},
			"netem delay 10000us rate 16000000bit packetoverhead -14 limit 1000"},
		{Link{Delay: 100 * time.Millisecond, Rate: 100_000_000, Queue: 1 << 20},
			"netem delay 100000us rate 800000000bit packetoverhead -14 limit 7366"},
	} {
		if got := netemLeaf(tc.l); got != tc.want {
			t.Errorf("netemLeaf(%+v) = %q, want %q", tc.l, got, tc.want)
		}
	}
}

func TestStarPlan(t *testing.T) {
	links := make([]Link, 9)
	links[2*3+1] = Link{Delay: time.Millisecond} // 2 → 1 only
	hub, hosts, tc := starPlan([]string{"n0", "n1", "n2"}, links, netemLeaf)
	for _, want := range []string{
		"link add br0 type bridge\n",
		"link add h2 type veth peer name psim0 netns n2\n",
		"link set h2 master br0 up\n",
	} {
		if !strings.Contains(hub, want) {
			t.Errorf("hub batch lacks %q:\n%s", want, hub)
		}
	}
	if want := "addr add 10.77.0.3/16 dev psim0\n"; len(hosts) != 3 || !strings.Contains(hosts[2], want) {
		t.Errorf("host batches %q lack %q", hosts, want)
	}
	wantTC := "qdisc add dev h1 root handle 1: htb default 1\n" +
		"class add dev h1 parent 1: classid 1:1 htb rate 100gbit quantum 1514\n" +
		"class add dev h1 parent 1: classid 1:4 htb rate 100gbit quantum 1514\n" +
		"qdisc add dev h1 parent 1:4 handle 4: netem delay 1000us limit 10000\n" +
		"filter add dev h1 parent 1: protocol ip prio 1 u32 match ip src 10.77.0.3/32 flowid 1:4\n"
	if tc != wantTC {
		t.Errorf("tc batch\n%s\nwant\n%s", tc, wantTC)
	}
}

func TestParseStats(t *testing.T) {
	ports, err := parsePorts([]byte(`[{"ifname":"br0","stats64":{"rx":{"bytes":1,"packets":1},"tx":{"bytes":1,"packets":1}}},
		{"ifname":"h0","stats64":{"rx":{"bytes":1514,"packets":1},"tx":{"bytes":90,"packets":1}}},
		{"ifname":"h12","stats64":{"rx":{"bytes":0,"packets":0},"tx":{"bytes":3028,"packets":2}}}]`))
	if err != nil || len(ports) != 2 || ports[0].rx.Bytes != 1514 || ports[12].tx.Packets != 2 {
		t.Errorf("parsePorts = %+v, %v", ports, err)
	}
	leaves, err := parseLeaves([]byte(`[{"kind":"htb","handle":"1:","bytes":90,"packets":1,"drops":0},
		{"kind":"netem","handle":"a:","parent":"1:a","bytes":3028,"packets":2,"drops":3}]`))
	if err != nil || len(leaves) != 2 || leaves[1].Handle != "a:" || leaves[1].Drops != 3 {
		t.Errorf("parseLeaves = %+v, %v", leaves, err)
	}
}

// pfifo stands in for netem where the kernel has none.
func pfifo(Link) string { return "pfifo limit 1000" }

func TestStarPlumbing(t *testing.T) {
	yes := func() bool { return true }
	n := startHooked(t, Spec{Hosts: 3, Backend: BackendNetem, Link: func(from, to int) Link {
		if from == 0 && to == 1 {
			return Link{Delay: time.Millisecond}
		}
		return Link{}
	}}, hooks{probe: yes, leaf: pfifo})
	if n.Backend() != BackendNetem || n.hub == "" || !nsExists(n.hub) {
		t.Fatalf("Backend() = %q, hub %q", n.Backend(), n.hub)
	}
	pingMedian(t, n, 0, 1, 5)
	pingMedian(t, n, 2, 1, 5)
	st := n.Stats()
	t.Logf("%+v", st)
	i := slices.IndexFunc(st.Pairs, func(p PairStats) bool { return p.From == 0 && p.To == 1 })
	if i < 0 || st.Pairs[i].Forwarded.Packets != 5 || len(st.Pairs) != 1 {
		t.Errorf("pairs %+v: want 0→1 alone, with the 5 pings", st.Pairs)
	}
	if st.Forwarded.Packets < 20 {
		t.Errorf("forwarded %+v, want the 20 pings and answers", st.Forwarded)
	}
	names := slices.Clone(n.names())
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if nsExists(name) {
			t.Errorf("namespace %s left after Close", name)
		}
	}
}

func TestStarMaxBytes(t *testing.T) {
	yes := func() bool { return true }
	n := startHooked(t, Spec{Hosts: 2, Backend: BackendNetem, MaxBytes: 30_000}, hooks{probe: yes, leaf: pfifo})
	ca, cb := udp(t, n, 0), udp(t, n, 1)
	dst := cb.LocalAddr().(*net.UDPAddr)
	msg := make([]byte, 1000)
	for range 50 {
		if _, err := ca.WriteToUDP(msg, dst); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "ErrMaxBytes", func() bool { return errors.Is(n.Err(), ErrMaxBytes) })
	ca.WriteToUDP([]byte("late"), dst)
	buf := make([]byte, 2048)
	for {
		cb.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		k, _, err := cb.ReadFromUDP(buf)
		if err != nil {
			break // nothing more: good
		}
		if string(buf[:k]) == "late" {
			t.Fatal("forwarded after MaxBytes")
		}
	}
}
