package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Errors. Every error of Parse wraps ErrParse, every error of Validate
// ErrInvalid; Run's own failures wrap ErrRun.
var (
	ErrParse   = errors.New("scenario: parse")
	ErrInvalid = errors.New("scenario: invalid")
	ErrRun     = errors.New("scenario: run")
)

// maxFile bounds a scenario file's size.
const maxFile = 1 << 20

// Scenario is one experiment on the real swarm: the nodes, the network
// between them, churn, the clients and their load, and bounds. Parse
// reads it from YAML or JSON; Validate checks it; Run plays it.
type Scenario struct {
	Name        string   `yaml:"name" json:"name"`
	Description string   `yaml:"description,omitempty" json:"description,omitempty"`
	Seed        int64    `yaml:"seed,omitempty" json:"seed,omitempty"` // the emulator's randomness (jitter, loss)
	Model       Model    `yaml:"model" json:"model"`
	Nodes       []Node   `yaml:"nodes" json:"nodes"`
	Network     Topology `yaml:"network" json:"network"`
	Churn       []Event  `yaml:"churn,omitempty" json:"churn,omitempty"`
	Clients     []Client `yaml:"clients" json:"clients"`
	Bounds      Bounds   `yaml:"bounds" json:"bounds"`

	lines map[string]int // "nodes.2" → line of that entry, for messages
}

// SynthPrefix starts the Model.Name of a synthetic model.
const SynthPrefix = "synth:"

// Model is the served model and the layouts (cuts) its shards come from.
type Model struct {
	// Name is a known model ("stories15M", the default), a path that
	// `pipeshard shards import` reads (llama2.c, Hugging Face, GGUF), or
	// "synth:SHAPE", a synthetic model with a real model's shapes that
	// `pipeshard shards synth --shape SHAPE --seed 1` makes (its text is
	// noise: give clients prompt_ids).
	Name string `yaml:"name,omitempty" json:"name,omitempty"`
	// Quant is the shards' weight type: f32 (default), q8 or q4.
	Quant string `yaml:"quant,omitempty" json:"quant,omitempty"`
	// Layouts are explicit cuts, each "0:2,2:4,4:6" as
	// `shards split --ranges` takes them.
	Layouts []string `yaml:"layouts,omitempty" json:"layouts,omitempty"`
	// Stages adds one cost-balanced cut into n stages per entry, as
	// `shards split --stages n` makes it (for `layers: auto` nodes).
	Stages []int `yaml:"stages,omitempty" json:"stages,omitempty"`
}

// Node is a group of Count identical volunteer nodes.
type Node struct {
	// Name names the group; its nodes are Name when Count is 1 and
	// Name0, Name1, ... (Name-0, ... if Name ends in a digit) otherwise.
	// Default: node<i> for the i-th group.
	Name  string `yaml:"name,omitempty" json:"name,omitempty"`
	Count int    `yaml:"count,omitempty" json:"count,omitempty"` // default 1
	// Cores is the node's --threads (default 1); its process also gets
	// GOMAXPROCS=Cores.
	Cores int `yaml:"cores,omitempty" json:"cores,omitempty"`
	// Memory is --max-memory (0: no bound).
	Memory Size `yaml:"memory,omitempty" json:"memory,omitempty"`
	// Layers is what the nodes serve: one range "0:3" (every node of the
	// group; "6:6/0:16000" adds head rows), a list "0:2,2:4,4:6" of
	// exactly Count ranges (one per node, in order), or "auto" (the
	// default): --layers auto over the model's layouts.
	Layers string `yaml:"layers,omitempty" json:"layers,omitempty"`
	// Region places the nodes in a region of Network.Regions.
	Region string `yaml:"region,omitempty" json:"region,omitempty"`
	// Uplink caps every link out of each node (0: Network.Bandwidth).
	Uplink Bandwidth `yaml:"uplink,omitempty" json:"uplink,omitempty"`
	// Fetch starts the nodes with an empty store, so they fetch their
	// shard from peers over the emulated network; by default their store
	// holds the model already.
	Fetch bool `yaml:"fetch,omitempty" json:"fetch,omitempty"`
	// Standby nodes are not started with the swarm; a churn event starts
	// them.
	Standby bool `yaml:"standby,omitempty" json:"standby,omitempty"`
	// CPUs pins the nodes' processes to these CPUs (taskset -c syntax,
	// e.g. "0" or "0-1"); empty: not pinned.
	CPUs string `yaml:"cpus,omitempty" json:"cpus,omitempty"`
}

// Topology describes the links between every two hosts (nodes and
// clients). A link's one-way delay is, from the most specific rule to
// the least: a Links entry, the Latency matrix, half the RTT between the
// two hosts' regions, Delay.
type Topology struct {
	Delay     Duration  `yaml:"delay,omitempty" json:"delay,omitempty"`         // one-way, every link
	Jitter    Duration  `yaml:"jitter,omitempty" json:"jitter,omitempty"`       // every link
	Loss      float64   `yaml:"loss,omitempty" json:"loss,omitempty"`           // packet loss fraction in [0, 1)
	Bandwidth Bandwidth `yaml:"bandwidth,omitempty" json:"bandwidth,omitempty"` // per link and direction; 0: unlimited
	// Transport is what nodes and clients listen on: "tcp" (default) or
	// "quic".
	Transport string `yaml:"transport,omitempty" json:"transport,omitempty"`
	// TCP is the hosts' TCP congestion control: cubic (default), as the
	// home machines pipeshard runs on ship, "host" for the emulating
	// machine's own, or another the kernel has (bbr, reno).
	TCP string `yaml:"tcp,omitempty" json:"tcp,omitempty"`
	// Regions maps a region to the round-trip times to other regions
	// (itself included); one entry per pair is enough.
	Regions map[string]map[string]Duration `yaml:"regions,omitempty" json:"regions,omitempty"`
	// Latency is a matrix of one-way delays between hosts, in host order
	// (nodes, then clients, as listed); Latency[i][j] is from i to j.
	Latency [][]Duration `yaml:"latency,omitempty" json:"latency,omitempty"`
	// Links override the rules above for some pairs, later entries over
	// earlier ones.
	Links []LinkRule `yaml:"links,omitempty" json:"links,omitempty"`
}

// LinkRule overrides the link between some hosts. From and To (one
// direction) or Between (both directions) name hosts, groups of nodes or
// clients, regions, or "*" (every host). Fields left out keep their
// value.
type LinkRule struct {
	From      string     `yaml:"from,omitempty" json:"from,omitempty"`
	To        string     `yaml:"to,omitempty" json:"to,omitempty"`
	Between   []string   `yaml:"between,omitempty" json:"between,omitempty"`
	Delay     *Duration  `yaml:"delay,omitempty" json:"delay,omitempty"`
	Jitter    *Duration  `yaml:"jitter,omitempty" json:"jitter,omitempty"`
	Loss      *float64   `yaml:"loss,omitempty" json:"loss,omitempty"`
	Bandwidth *Bandwidth `yaml:"bandwidth,omitempty" json:"bandwidth,omitempty"`
}

// Event is one churn event, At after the swarm is up: exactly one of
// Kill (SIGKILL: a crash), Stop (SIGTERM: a graceful leave) or Start
// (start a standby or stopped node, with its identity and store).
type Event struct {
	At    Duration `yaml:"at" json:"at"`
	Kill  string   `yaml:"kill,omitempty" json:"kill,omitempty"`
	Stop  string   `yaml:"stop,omitempty" json:"stop,omitempty"`
	Start string   `yaml:"start,omitempty" json:"start,omitempty"`
}

// Node returns the event's node and its action: "kill", "stop" or
// "start".
func (e Event) Node() (name, action string) {
	switch {
	case e.Kill != "":
		return e.Kill, "kill"
	case e.Stop != "":
		return e.Stop, "stop"
	}
	return e.Start, "start"
}

// Client is a group of Count client hosts, each running one client
// process per phase that keeps InFlight requests in flight.
type Client struct {
	Name   string    `yaml:"name,omitempty" json:"name,omitempty"` // as Node.Name; default client<i>
	Count  int       `yaml:"count,omitempty" json:"count,omitempty"`
	Region string    `yaml:"region,omitempty" json:"region,omitempty"`
	Uplink Bandwidth `yaml:"uplink,omitempty" json:"uplink,omitempty"`
	// InFlight is the number of concurrent requests (sessions) per
	// client. A list is a sweep: the scenario runs one phase per value,
	// one after another, on the same swarm. Default 1.
	InFlight Ints `yaml:"in_flight,omitempty" json:"in_flight,omitempty"`
	// Requests is how many requests each client makes per phase;
	// Duration instead (or as well) stops starting new ones after that
	// long. At least one of them is required.
	Requests int      `yaml:"requests,omitempty" json:"requests,omitempty"`
	Duration Duration `yaml:"duration,omitempty" json:"duration,omitempty"`
	// Prompt is text, or PromptIDs token ids (no BOS added).
	Prompt    string `yaml:"prompt,omitempty" json:"prompt,omitempty"`
	PromptIDs []int  `yaml:"prompt_ids,omitempty" json:"prompt_ids,omitempty"`
	// Tokens per request (default 32).
	Tokens    int      `yaml:"tokens,omitempty" json:"tokens,omitempty"`
	IgnoreEOS bool     `yaml:"ignore_eos,omitempty" json:"ignore_eos,omitempty"`
	Sampling  Sampling `yaml:"sampling,omitempty" json:"sampling,omitempty"`
	// Timeout bounds the search for a route per request (default 60s).
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Args are extra flags for the client process, such as
	// ["--speculate", "ngram", "--spec-k", "4"]. A list of several is a
	// sweep, as InFlight: one entry per phase (or one for all).
	Args [][]string `yaml:"args,omitempty" json:"args,omitempty"`
}

// Sampling is how requests pick tokens: greedy when Temp is 0. Request
// k of a client uses seed Seed + k.
type Sampling struct {
	Temp float64 `yaml:"temp,omitempty" json:"temp,omitempty"`
	TopP float64 `yaml:"top_p,omitempty" json:"top_p,omitempty"`
	TopK int     `yaml:"top_k,omitempty" json:"top_k,omitempty"`
	Seed uint64  `yaml:"seed,omitempty" json:"seed,omitempty"`
}

// Bounds stop a run that goes on too long or sends too much.
type Bounds struct {
	// MaxDuration bounds the whole run, swarm start-up included
	// (default 10m).
	MaxDuration Duration `yaml:"max_duration,omitempty" json:"max_duration,omitempty"`
	// MaxTraffic bounds the bytes the emulated network carries (0: no
	// bound); the emulator enforces it.
	MaxTraffic Size `yaml:"max_traffic,omitempty" json:"max_traffic,omitempty"`
}

// Defaults.
const (
	DefaultModel       = "stories15M"
	DefaultTokens      = 32
	DefaultMaxDuration = Duration(10 * 60e9)
)

// Load reads and parses a scenario file.
func Load(path string) (*Scenario, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrParse, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrParse, path, err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// Parse reads a scenario from YAML or JSON (JSON is YAML). It is strict:
// an unknown field, a duplicate key, a value of the wrong type or a
// second document is an error, with the line where the YAML library
// gives one. Parse fills defaults but does not Validate.
func Parse(data []byte) (*Scenario, error) {
	if len(data) > maxFile {
		return nil, fmt.Errorf("%w: %d bytes (at most %d)", ErrParse, len(data), maxFile)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var s Scenario
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty file", ErrParse)
		}
		return nil, fmt.Errorf("%w: %s", ErrParse, cleanYAMLError(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: more than one document in the file", ErrParse)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err == nil {
		s.lines = entryLines(&root)
	}
	s.defaults()
	return &s, nil
}

func cleanYAMLError(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	return strings.ReplaceAll(msg, "\n  ", "; ")
}

// entryLines records the line of every entry of the lists Validate
// talks about: "nodes.0", "clients.1", "churn.2", "network.links.0".
func entryLines(root *yaml.Node) map[string]int {
	lines := map[string]int{}
	if root.Kind != yaml.DocumentNode || len(root.Content) == 0 {
		return lines
	}
	var walk func(n *yaml.Node, path string)
	walk = func(n *yaml.Node, path string) {
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i].Value
				p := k
				if path != "" {
					p = path + "." + k
				}
				lines[p] = n.Content[i].Line
				if path == "" || path == "network" {
					walk(n.Content[i+1], p)
				}
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				lines[fmt.Sprintf("%s.%d", path, i)] = c.Line
			}
		}
	}
	walk(root.Content[0], "")
	return lines
}

// at returns " (line N)" for an entry of the file, or "".
func (s *Scenario) at(path string) string {
	if l, ok := s.lines[path]; ok {
		return fmt.Sprintf(" (line %d)", l)
	}
	return ""
}

// defaults fills what a file may leave out.
func (s *Scenario) defaults() {
	if s.Model.Name == "" {
		s.Model.Name = DefaultModel
	}
	if s.Model.Quant == "" {
		s.Model.Quant = "f32"
	}
	if s.Network.Transport == "" {
		s.Network.Transport = "tcp"
	}
	for i := range s.Nodes {
		n := &s.Nodes[i]
		if n.Name == "" {
			n.Name = fmt.Sprintf("node%d", i)
		}
		if n.Count == 0 {
			n.Count = 1
		}
		if n.Cores == 0 {
			n.Cores = 1
		}
		if n.Layers == "" {
			n.Layers = "auto"
		}
	}
	for i := range s.Clients {
		c := &s.Clients[i]
		if c.Name == "" {
			c.Name = fmt.Sprintf("client%d", i)
		}
		if c.Count == 0 {
			c.Count = 1
		}
		if len(c.InFlight) == 0 {
			c.InFlight = Ints{1}
		}
		if c.Tokens == 0 {
			c.Tokens = DefaultTokens
		}
		if c.Timeout == 0 {
			c.Timeout = Duration(60e9)
		}
	}
	if s.Bounds.MaxDuration == 0 {
		s.Bounds.MaxDuration = DefaultMaxDuration
	}
}

// Marshal writes the scenario as YAML that Parse reads back to the same
// scenario.
func (s *Scenario) Marshal() ([]byte, error) { return yaml.Marshal(s) }

// Limits on a scenario's size: every host is a real process.
const (
	maxHosts    = 128
	maxInFlight = 64
	maxRequests = 100000
	maxDelay    = 10 * time.Second
	maxRTT      = 20 * time.Second
	maxRun      = 24 * time.Hour
)
