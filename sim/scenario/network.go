package scenario

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os/exec"
	"strconv"
	"time"

	"github.com/pipeshard/pipeshard/shards"
)

// Network is an emulated network of hosts that Run starts processes in.
// sim/netem's *Net implements it; Run's tests use plain loopback.
type Network interface {
	// Backend names the emulator: "netem" or "delayline".
	Backend() string
	// Addr is host i's address: what its processes listen on.
	Addr(i int) netip.Addr
	// Command returns a command that runs inside host i.
	Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd
	Close() error
}

// Loopback is a Network without emulation: every host is 127.0.0.1 and
// its processes run here, unimpaired. It is for measurements that need
// no delay (and none of an emulator's own cost) and for tests of the
// runner.
type Loopback struct{}

func (Loopback) Backend() string     { return "loopback" }
func (Loopback) Addr(int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 0, 1}) }
func (Loopback) Close() error        { return nil }
func (Loopback) Command(ctx context.Context, _ int, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, name, args...)
}

// LinkParams is one direction of the link between two hosts. It has the
// fields of sim/netem's Link, in the same order, so one converts to the
// other: netem.Link(s.Link(a, b)).
type LinkParams struct {
	Delay, Jitter time.Duration
	Loss          float64
	Rate          int64 // bytes/s; 0: unlimited
}

// NetSpec is what an emulator needs to build the scenario's network; its
// fields are those of sim/netem's Spec.
type NetSpec struct {
	Hosts       int
	Link        func(from, to int) LinkParams
	Backend     string // "auto", "netem" or "delayline"
	Seed        int64
	MaxDuration time.Duration
	MaxBytes    int64
	TCP         string // the hosts' TCP congestion control (Topology.TCP)
	Log         *slog.Logger
}

// NetSpec returns the spec of the scenario's network, for backend. Its
// Link is a snapshot of Scenario.Link for every pair, taken now.
func (s *Scenario) NetSpec(backend string, log *slog.Logger) NetSpec {
	n := len(s.Hosts())
	links := make([][]LinkParams, n)
	for i := range links {
		links[i] = make([]LinkParams, n)
		for j := range links[i] {
			links[i][j] = s.Link(i, j)
		}
	}
	return NetSpec{
		Hosts: n, Backend: backend, Seed: s.Seed,
		Link: func(from, to int) LinkParams {
			if from < 0 || to < 0 || from >= n || to >= n {
				return LinkParams{}
			}
			return links[from][to]
		},
		MaxDuration: s.Bounds.MaxDuration.D(), MaxBytes: int64(s.Bounds.MaxTraffic), TCP: s.Network.TCP, Log: log,
	}
}

// Host is one emulated machine: a node or a client. Hosts are numbered
// nodes first, then clients, in the order of the file.
type Host struct {
	Index  int    `json:"index"`
	Name   string `json:"name"`
	Group  string `json:"group"`
	Client bool   `json:"client,omitempty"`
	Region string `json:"region,omitempty"`
	// Group is the index of the host's group in Nodes or Clients.
	GroupIndex int `json:"-"`
	// Stage is a node's range, nil for "auto" (and for clients).
	Stage *shards.Stage `json:"-"`
	// Layers is the node's range as written, or "auto".
	Layers string    `json:"layers,omitempty"`
	Uplink Bandwidth `json:"-"`
}

// instanceName names member i of a group of count.
func instanceName(group string, i, count int) string {
	if count == 1 {
		return group
	}
	if c := group[len(group)-1]; c >= '0' && c <= '9' {
		return group + "-" + strconv.Itoa(i)
	}
	return group + strconv.Itoa(i)
}

// Hosts lists the scenario's hosts: every node, then every client.
// Nodes whose layers do not parse get a nil Stage (Validate reports
// them).
func (s *Scenario) Hosts() []Host {
	var hs []Host
	for gi, g := range s.Nodes {
		stages, _ := nodeStages(g)
		for i := 0; i < g.Count && i < maxHosts; i++ {
			h := Host{Index: len(hs), Name: instanceName(g.Name, i, g.Count), Group: g.Name, GroupIndex: gi, Region: g.Region, Uplink: g.Uplink, Layers: "auto"}
			if i < len(stages) && stages[i] != nil {
				h.Stage = stages[i]
				h.Layers = stages[i].String()
			}
			hs = append(hs, h)
		}
	}
	for gi, c := range s.Clients {
		for i := 0; i < c.Count && i < maxHosts; i++ {
			hs = append(hs, Host{Index: len(hs), Name: instanceName(c.Name, i, c.Count), Group: c.Name, GroupIndex: gi, Client: true, Region: c.Region, Uplink: c.Uplink})
		}
	}
	return hs
}

// rtt returns the round trip between two regions, and whether the file
// gives one.
func (n *Topology) rtt(a, b string) (time.Duration, bool) {
	if d, ok := n.Regions[a][b]; ok {
		return d.D(), true
	}
	d, ok := n.Regions[b][a]
	return d.D(), ok
}

// matches reports whether name (a host, a group, a region or "*")
// covers host h.
func matches(name string, h Host) bool {
	return name == "*" || name == h.Name || name == h.Group || name == h.Region && h.Region != ""
}

// Link returns the link from host from to host to, by the rules of
// Network. A host's link to itself is ideal.
func (s *Scenario) Link(from, to int) LinkParams {
	hs := s.Hosts()
	if from == to || from < 0 || to < 0 || from >= len(hs) || to >= len(hs) {
		return LinkParams{}
	}
	n := &s.Network
	a, b := hs[from], hs[to]
	l := LinkParams{Delay: n.Delay.D(), Jitter: n.Jitter.D(), Loss: n.Loss, Rate: int64(n.Bandwidth)}
	if a.Region != "" && b.Region != "" {
		if d, ok := n.rtt(a.Region, b.Region); ok {
			l.Delay = d / 2
		}
	}
	if from < len(n.Latency) && to < len(n.Latency[from]) {
		l.Delay = n.Latency[from][to].D()
	}
	for _, k := range n.Links {
		fwd := matches(k.From, a) && matches(k.To, b)
		if len(k.Between) == 2 {
			fwd = matches(k.Between[0], a) && matches(k.Between[1], b) || matches(k.Between[1], a) && matches(k.Between[0], b)
		}
		if !fwd {
			continue
		}
		if k.Delay != nil {
			l.Delay = k.Delay.D()
		}
		if k.Jitter != nil {
			l.Jitter = k.Jitter.D()
		}
		if k.Loss != nil {
			l.Loss = *k.Loss
		}
		if k.Bandwidth != nil {
			l.Rate = int64(*k.Bandwidth)
		}
	}
	if a.Uplink > 0 && (l.Rate == 0 || int64(a.Uplink) < l.Rate) {
		l.Rate = int64(a.Uplink)
	}
	return l
}

// String describes a link for logs.
func (l LinkParams) String() string {
	rate := "unlimited"
	if l.Rate > 0 {
		rate = fmt.Sprintf("%.4gMbit/s", float64(l.Rate)*8/1e6)
	}
	return fmt.Sprintf("delay %v jitter %v loss %.4g%% rate %s", l.Delay, l.Jitter, 100*l.Loss, rate)
}
