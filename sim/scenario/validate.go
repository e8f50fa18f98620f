package scenario

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

// Validate reports the first thing wrong with the scenario, wrapping
// ErrInvalid and naming the entry (and its line, for a parsed file).
// For a model of KnownShapes it also checks every range, layout and
// prompt against the model's shape; for other models Run checks them
// once the model is imported.
func (s *Scenario) Validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, a...))
	}
	if strings.TrimSpace(s.Name) == "" {
		return bad("name: required (it names the results)")
	}
	if strings.ContainsAny(s.Name, "/\\\x00") {
		return bad("name %q: no slashes", s.Name)
	}
	// The model.
	m := s.Model
	if m.Name == "" {
		return bad("model: name: required")
	}
	if q, err := ovrt.ParseDType(m.Quant); err != nil || (q != ovrt.F32 && q != ovrt.Q8_0 && q != ovrt.Q4_0) {
		return bad("model: quant %q: want f32, q8 or q4", m.Quant)
	}
	shape, known := KnownShapes[m.Name]
	if sh, ok := strings.CutPrefix(m.Name, SynthPrefix); ok {
		cfg, err := shards.SynthConfig(sh, 0)
		if err != nil {
			return bad("model: %v", err)
		}
		shape, known = Shape{Layers: cfg.Layers, Vocab: cfg.Vocab, Context: cfg.Context}, true
	}
	for i, n := range m.Stages {
		if n < 1 || n > 64 || known && n > shape.Layers+4 {
			return bad("model: stages[%d] = %d", i, n)
		}
	}
	if known {
		if _, err := s.explicitLayouts(shape); err != nil {
			return bad("%v", err)
		}
	}
	// The hosts and their names.
	names := map[string]string{} // name → what it is
	claim := func(name, what string) error {
		if name == "" || name == "*" || strings.ContainsAny(name, " \t/,") {
			return bad("%s: name %q: want a word", what, name)
		}
		if prev, ok := names[name]; ok && prev != what {
			return bad("%s: name %q is also %s", what, name, prev)
		}
		names[name] = what
		return nil
	}
	total := 0
	for _, g := range s.Nodes {
		total += max(g.Count, 0)
	}
	for _, c := range s.Clients {
		total += max(c.Count, 0)
	}
	if total > maxHosts {
		return bad("%d hosts (nodes and clients): at most %d, each is a process", total, maxHosts)
	}
	if len(s.Nodes) == 0 {
		return bad("nodes: none")
	}
	regionUsed := map[string]bool{}
	auto, seeded := false, false
	for gi, g := range s.Nodes {
		where := fmt.Sprintf("nodes[%d] %s%s", gi, g.Name, s.at(fmt.Sprintf("nodes.%d", gi)))
		if g.Count < 1 {
			return bad("%s: count %d", where, g.Count)
		}
		if err := claim(g.Name, "node group "+g.Name); err != nil {
			return err
		}
		for i := range g.Count {
			if n := instanceName(g.Name, i, g.Count); n != g.Name {
				if err := claim(n, "node "+n); err != nil {
					return err
				}
			}
		}
		switch {
		case g.Cores < 1 || g.Cores > 256:
			return bad("%s: cores %d: want 1 to 256", where, g.Cores)
		case g.Memory < 0:
			return bad("%s: memory %d", where, g.Memory)
		case g.Uplink < 0:
			return bad("%s: uplink %d", where, g.Uplink)
		}
		stages, err := nodeStages(g)
		if err != nil {
			return bad("%s: %v", where, err)
		}
		for _, st := range stages {
			if st == nil {
				auto = true
			} else if known {
				if _, err := checkStage(*st, shape); err != nil {
					return bad("%s: %v", where, err)
				}
			}
		}
		if g.Region != "" {
			if _, ok := s.Network.Regions[g.Region]; !ok {
				return bad("%s: region %q is not in network.regions", where, g.Region)
			}
			regionUsed[g.Region] = true
		}
		if !g.Standby && !g.Fetch {
			seeded = true
		}
	}
	if !seeded {
		return bad("nodes: every node is standby or fetches its shard: at least one must start holding the model")
	}
	if auto && len(m.Layouts) == 0 && len(m.Stages) == 0 && !slices.ContainsFunc(s.Nodes, func(g Node) bool { return g.Layers != "auto" }) {
		return bad("nodes: every node has layers auto, but the model has no layouts to choose from: give model.stages or model.layouts")
	}
	if known {
		if _, err := s.Layouts(shape, nil); err != nil {
			return bad("%v", err)
		}
	}
	// Clients.
	if len(s.Clients) == 0 {
		return bad("clients: none")
	}
	phases := 1
	for _, c := range s.Clients {
		phases = max(phases, len(c.InFlight), len(c.Args))
	}
	for gi, c := range s.Clients {
		where := fmt.Sprintf("clients[%d] %s%s", gi, c.Name, s.at(fmt.Sprintf("clients.%d", gi)))
		if c.Count < 1 {
			return bad("%s: count %d", where, c.Count)
		}
		if err := claim(c.Name, "client group "+c.Name); err != nil {
			return err
		}
		for i := range c.Count {
			if n := instanceName(c.Name, i, c.Count); n != c.Name {
				if err := claim(n, "client "+n); err != nil {
					return err
				}
			}
		}
		if len(c.InFlight) != 1 && len(c.InFlight) != phases {
			return bad("%s: in_flight has %d values, another client %d: a sweep's lists must be as long (or one value)", where, len(c.InFlight), phases)
		}
		if len(c.Args) > 1 && len(c.Args) != phases {
			return bad("%s: args has %d entries, the sweep %d phases: a sweep's lists must be as long (or one entry)", where, len(c.Args), phases)
		}
		for _, k := range c.InFlight {
			if k < 1 || k > maxInFlight {
				return bad("%s: in_flight %d: want 1 to %d", where, k, maxInFlight)
			}
		}
		switch {
		case c.Requests < 0 || c.Requests > maxRequests:
			return bad("%s: requests %d: want 0 to %d", where, c.Requests, maxRequests)
		case c.Duration < 0:
			return bad("%s: duration %v", where, c.Duration)
		case c.Requests == 0 && c.Duration == 0:
			return bad("%s: give requests, duration or both: when does the client stop?", where)
		case c.Duration.D() >= s.Bounds.MaxDuration.D():
			return bad("%s: duration %v is not within bounds.max_duration %v", where, c.Duration, s.Bounds.MaxDuration)
		case c.Prompt != "" && len(c.PromptIDs) > 0:
			return bad("%s: give prompt or prompt_ids, not both", where)
		case c.Prompt == "" && len(c.PromptIDs) == 0:
			return bad("%s: give a prompt or prompt_ids", where)
		case c.Tokens < 1:
			return bad("%s: tokens %d", where, c.Tokens)
		case c.Timeout <= 0:
			return bad("%s: timeout %v", where, c.Timeout)
		case c.Uplink < 0:
			return bad("%s: uplink %d", where, c.Uplink)
		}
		for _, id := range c.PromptIDs {
			if id < 0 || known && id >= shape.Vocab {
				return bad("%s: prompt id %d outside the vocabulary", where, id)
			}
		}
		if known && len(c.PromptIDs)+c.Tokens > shape.Context {
			return bad("%s: %d prompt ids and %d tokens exceed %s's context of %d", where, len(c.PromptIDs), c.Tokens, m.Name, shape.Context)
		}
		if known && c.Tokens >= shape.Context {
			return bad("%s: %d tokens exceed %s's context of %d", where, c.Tokens, m.Name, shape.Context)
		}
		sp := c.Sampling
		if sp.Temp < 0 || math.IsNaN(sp.Temp) || math.IsInf(sp.Temp, 0) || sp.TopP < 0 || sp.TopP > 1 || math.IsNaN(sp.TopP) || sp.TopK < 0 {
			return bad("%s: sampling %+v: want temp >= 0, top_p in [0, 1], top_k >= 0", where, sp)
		}
		if c.Region != "" {
			if _, ok := s.Network.Regions[c.Region]; !ok {
				return bad("%s: region %q is not in network.regions", where, c.Region)
			}
			regionUsed[c.Region] = true
		}
	}
	// The network.
	n := s.Network
	if err := checkLink("network", n.Delay, n.Jitter, n.Loss, n.Bandwidth); err != nil {
		return bad("%v", err)
	}
	if !validCongestion(n.TCP) {
		return bad("network: tcp %q: want a congestion control's name (cubic, bbr, reno) or host", n.TCP)
	}
	if n.Transport != "tcp" && n.Transport != "quic" {
		return bad("network: transport %q: want tcp or quic", n.Transport)
	}
	regions := make([]string, 0, len(n.Regions))
	for r := range n.Regions {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	for _, r := range regions {
		if err := claim(r, "region "+r); err != nil {
			return err
		}
		for o, d := range n.Regions[r] {
			if _, ok := n.Regions[o]; !ok {
				return bad("network: regions: %s lists an RTT to %q, which is not a region", r, o)
			}
			if d < 0 || d.D() > maxRTT {
				return bad("network: regions: RTT %s-%s %v: want 0 to %v", r, o, d, maxRTT)
			}
		}
	}
	used := slices.Sorted(func(yield func(string) bool) {
		for r := range regionUsed {
			if !yield(r) {
				return
			}
		}
	})
	for i, a := range used {
		for _, b := range used[i:] {
			if _, ok := n.rtt(a, b); !ok {
				return bad("network: regions: no RTT between %s and %s", a, b)
			}
		}
	}
	if len(n.Latency) > 0 {
		if len(n.Latency) != total {
			return bad("network: latency has %d rows for %d hosts (nodes, then clients)", len(n.Latency), total)
		}
		for i, row := range n.Latency {
			if len(row) != total {
				return bad("network: latency row %d has %d entries for %d hosts", i, len(row), total)
			}
			for _, d := range row {
				if d < 0 || d.D() > maxDelay {
					return bad("network: latency row %d: %v: want 0 to %v (a bare number is seconds)", i, d, maxDelay)
				}
			}
		}
	}
	for i, l := range n.Links {
		where := fmt.Sprintf("network.links[%d]%s", i, s.at(fmt.Sprintf("network.links.%d", i)))
		var ends []string
		switch {
		case len(l.Between) > 0 && (l.From != "" || l.To != ""):
			return bad("%s: give from and to, or between, not both", where)
		case len(l.Between) > 0 && len(l.Between) != 2:
			return bad("%s: between wants two names", where)
		case len(l.Between) == 2:
			ends = l.Between
		case l.From == "" || l.To == "":
			return bad("%s: give from and to, or between", where)
		default:
			ends = []string{l.From, l.To}
		}
		for _, e := range ends {
			if _, ok := names[e]; !ok && e != "*" {
				return bad("%s: %q is no host, group or region", where, e)
			}
		}
		var d, j Duration
		var loss float64
		var bw Bandwidth
		if l.Delay != nil {
			d = *l.Delay
		}
		if l.Jitter != nil {
			j = *l.Jitter
		}
		if l.Loss != nil {
			loss = *l.Loss
		}
		if l.Bandwidth != nil {
			bw = *l.Bandwidth
		}
		if err := checkLink(where, d, j, loss, bw); err != nil {
			return bad("%v", err)
		}
	}
	// Bounds.
	b := s.Bounds
	switch {
	case b.MaxDuration <= 0 || b.MaxDuration.D() > maxRun:
		return bad("bounds: max_duration %v: want up to %v", b.MaxDuration, maxRun)
	case b.MaxTraffic < 0:
		return bad("bounds: max_traffic %d", b.MaxTraffic)
	}
	// Churn: replay it over which nodes run.
	running := map[string]bool{}
	isNode := map[string]bool{}
	for _, h := range s.Hosts() {
		if !h.Client {
			isNode[h.Name] = true
			running[h.Name] = !s.Nodes[h.GroupIndex].Standby
		}
	}
	order := make([]int, len(s.Churn))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return s.Churn[order[a]].At < s.Churn[order[b]].At })
	for _, i := range order {
		e := s.Churn[i]
		where := fmt.Sprintf("churn[%d]%s", i, s.at(fmt.Sprintf("churn.%d", i)))
		set := 0
		for _, v := range []string{e.Kill, e.Stop, e.Start} {
			if v != "" {
				set++
			}
		}
		if set != 1 {
			return bad("%s: give exactly one of kill, stop or start", where)
		}
		if e.At < 0 || e.At >= b.MaxDuration {
			return bad("%s: at %v: want 0 to bounds.max_duration %v", where, e.At, b.MaxDuration)
		}
		name, action := e.Node()
		if !isNode[name] {
			return bad("%s: %q is not a node", where, name)
		}
		switch {
		case action == "start" && running[name]:
			return bad("%s: start %s at %v: it is already running (make it standby, or kill it first)", where, name, e.At)
		case action != "start" && !running[name]:
			return bad("%s: %s %s at %v: it is not running", where, action, name, e.At)
		}
		running[name] = action == "start"
	}
	return nil
}

// checkLink checks one link's parameters.
func checkLink(where string, delay, jitter Duration, loss float64, bw Bandwidth) error {
	switch {
	case delay < 0 || delay.D() > maxDelay:
		return fmt.Errorf("%s: delay %v: want 0 to %v one-way (a bare number is seconds)", where, delay, maxDelay)
	case jitter < 0 || jitter.D() > maxDelay:
		return fmt.Errorf("%s: jitter %v: want 0 to %v", where, jitter, maxDelay)
	case !(loss >= 0 && loss < 1):
		return fmt.Errorf("%s: loss %v: want a fraction in [0, 1)", where, loss)
	case bw < 0:
		return fmt.Errorf("%s: bandwidth %d", where, bw)
	case bw > 0 && bw < 1000:
		return fmt.Errorf("%s: bandwidth %d bytes/s is below 8 kbit/s: write a unit, e.g. \"100Mbit\"", where, bw)
	}
	return nil
}

// validCongestion reports whether name can be a TCP congestion control's
// name as the kernel spells them (or empty: the default).
func validCongestion(name string) bool {
	if len(name) > 15 { // TCP_CA_NAME_MAX less its NUL
		return false
	}
	for _, r := range name {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '_' {
			return false
		}
	}
	return true
}
