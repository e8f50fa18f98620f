package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/shards"
)

// examples are every scenario file shipped or kept for tests.
func examples(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob("testdata/*.yaml")
	js, _ := filepath.Glob("testdata/*.json")
	shipped, _ := filepath.Glob("../scenarios/*.yaml")
	files = append(append(files, js...), shipped...)
	if len(files) < 4 {
		t.Fatalf("found only %v", files)
	}
	return files
}

func TestExamplesValidate(t *testing.T) {
	for _, f := range examples(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			// What Marshal writes, Parse reads back the same.
			b, err := s.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			s2, err := Parse(b)
			if err != nil {
				t.Fatalf("%v\n%s", err, b)
			}
			s.lines, s2.lines = nil, nil
			if !reflect.DeepEqual(s, s2) {
				t.Fatalf("round trip differs:\n%+v\n%+v\n%s", s, s2, b)
			}
		})
	}
}

func TestShippedScenario(t *testing.T) {
	s, err := Load("../scenarios/four-node-50ms.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.Hosts()
	if len(hs) != 5 || hs[0].Name != "n0" || hs[3].Name != "n3" || hs[4].Name != "c" || !hs[4].Client {
		t.Fatalf("hosts %+v", hs)
	}
	for i := range hs {
		for j := range hs {
			want := LinkParams{Delay: 50 * time.Millisecond, Rate: 100e6 / 8}
			if i == j {
				want = LinkParams{}
			}
			if got := s.Link(i, j); got != want {
				t.Errorf("link %d→%d = %v, want %v", i, j, got, want)
			}
		}
	}
	ls, err := s.Layouts(KnownShapes["stories15M"], nil)
	if err != nil || len(ls) != 1 || FormatLayout(ls[0]) != "0:3,3:6/0:3200,6:6/3200:17600,6:6/17600:32000" {
		t.Fatalf("layouts %v, %v", ls, err)
	}
	if len(s.Clients[0].InFlight) != 2 || s.Bounds.MaxTraffic != 1e9 {
		t.Fatalf("clients %+v bounds %+v", s.Clients, s.Bounds)
	}
}

func TestLinkRules(t *testing.T) {
	s, err := Load("testdata/churn-spare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// Hosts: n0 n1 n2 spare c.
	idx := map[string]int{}
	for _, h := range s.Hosts() {
		idx[h.Name] = h.Index
	}
	ms := time.Millisecond
	tests := []struct {
		from, to string
		want     LinkParams
	}{
		{"n0", "n1", LinkParams{Delay: 5 * ms, Jitter: 2 * ms, Loss: 0.001, Rate: 125e6}}, // eu↔eu: 10 ms RTT
		{"n1", "c", LinkParams{Delay: 40 * ms, Jitter: 2 * ms, Loss: 0.001, Rate: 125e6}}, // eu→us: 80 ms RTT
		{"c", "n1", LinkParams{Delay: 40 * ms, Jitter: 2 * ms, Loss: 0.001, Rate: 2.5e6}}, // the client's uplink
		{"c", "n0", LinkParams{Delay: 30 * ms, Jitter: 2 * ms, Loss: 0.001, Rate: 2.5e6}}, // the between rule
		{"n0", "c", LinkParams{Delay: 30 * ms, Jitter: 2 * ms, Loss: 0.001, Rate: 125e6}}, // both ways
		{"spare", "n2", LinkParams{Delay: 5 * ms, Jitter: 2 * ms, Loss: 0.001, Rate: 125e6}},
	}
	for _, tt := range tests {
		if got := s.Link(idx[tt.from], idx[tt.to]); got != tt.want {
			t.Errorf("%s→%s: %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
	m, err := Load("testdata/matrix.json")
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Link(1, 0); got.Delay != 25*ms || got.Rate != 10e6 {
		t.Errorf("matrix link 1→0: %v", got)
	}
	if got := m.Link(0, 2); got.Delay != 5*ms {
		t.Errorf("matrix link 0→2: %v", got)
	}
	spec := m.NetSpec("delayline", nil)
	if spec.Hosts != 3 || spec.Link(1, 2).Delay != 40*ms || spec.MaxDuration != DefaultMaxDuration.D() || spec.Backend != "delayline" {
		t.Errorf("spec %+v", spec)
	}
}

func TestStrictParse(t *testing.T) {
	tests := []struct {
		name, file, want string
	}{
		{"unknown field", "name: x\nnodes:\n  - name: a\n    coers: 2\n", "line 4: field coers not found"},
		{"unknown top-level field", "name: x\nnode: []\n", "line 2: field node not found"},
		{"duplicate key", "name: x\nname: y\n", `"name" already defined`},
		{"wrong type", "name: x\nnodes:\n  - count: many\n", "line 3"},
		{"bad duration", "name: x\nnetwork:\n  delay: fast\n", `line 3: duration "fast"`},
		{"bad rate", "name: x\nnetwork:\n  bandwidth: 10 furlongs\n", `unknown unit "furlongs"`},
		{"bad size", "name: x\nbounds:\n  max_traffic: lots\n", `line 3: size "lots"`},
		{"bad in_flight", "name: x\nclients:\n  - in_flight: {a: 1}\n", "line 3"},
		{"two documents", "name: x\n---\nname: y\n", "more than one document"},
		{"empty", "", "empty file"},
		{"json unknown field", `{"name": "x", "nodez": []}`, "field nodez not found"},
		{"not yaml", "name: [x\n", "line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file))
			if !errors.Is(err, ErrParse) {
				t.Fatalf("error %v is not ErrParse", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q lacks %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "scenario: parse: ") {
				t.Fatalf("error %q lacks the package prefix", err)
			}
		})
	}
}

// base is a small valid scenario the Validate tests change.
const base = `name: base
nodes:
  - name: n
    count: 3
    layers: "0:2,2:4,4:6"
  - name: s
    layers: "2:4"
    standby: true
network:
  delay: 10ms
  regions:
    eu: {eu: 10ms}
clients:
  - name: c
    requests: 2
    prompt: hi
bounds:
  max_duration: 2m
`

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(s *Scenario)
		want   string
	}{
		{"ok", func(s *Scenario) {}, ""},
		{"no name", func(s *Scenario) { s.Name = "" }, "name: required"},
		{"bad quant", func(s *Scenario) { s.Model.Quant = "q5" }, `quant "q5"`},
		{"no nodes", func(s *Scenario) { s.Nodes = nil }, "nodes: none"},
		{"too many hosts", func(s *Scenario) { s.Nodes[0].Count = 200; s.Nodes[0].Layers = "0:6" }, "at most 128"},
		{"cores", func(s *Scenario) { s.Nodes[0].Cores = 0 }, "nodes[0] n (line 3): cores 0"},
		{"ranges per node", func(s *Scenario) { s.Nodes[0].Layers = "0:2,2:6" }, "2 ranges for 3 nodes"},
		{"range syntax", func(s *Scenario) { s.Nodes[1].Layers = "2-4" }, `range "2-4"`},
		{"range past the model", func(s *Scenario) { s.Nodes[1].Layers = "2:9" }, "the model has 6 layers"},
		{"head rows mid-model", func(s *Scenario) { s.Nodes[1].Layers = "2:4/0:100" }, "only a range ending at the last layer"},
		{"unchainable range", func(s *Scenario) { s.Nodes[1].Layers = "1:3" }, "range 1:3: no chain"},
		{"bad layout", func(s *Scenario) { s.Model.Layouts = []string{"0:2,3:6"} }, "layouts[0]"},
		{"unknown synthetic shape", func(s *Scenario) { s.Model.Name = "synth:llama9" }, `unknown shape "llama9"`},
		{"range past a synthetic model", func(s *Scenario) { s.Model.Name = "synth:tiny"; s.Nodes[1].Layers = "2:6" }, "the model has 4 layers"},
		{"auto with nothing to choose", func(s *Scenario) {
			s.Nodes = []Node{{Name: "a", Count: 2, Cores: 1, Layers: "auto"}}
		}, "no layouts to choose from"},
		{"nobody holds the model", func(s *Scenario) { s.Nodes[0].Fetch = true }, "at least one must start holding the model"},
		{"unknown region", func(s *Scenario) { s.Nodes[0].Region = "mars" }, `region "mars" is not in network.regions`},
		{"missing RTT", func(s *Scenario) {
			s.Network.Regions["us"] = map[string]Duration{}
			s.Nodes[0].Region, s.Clients[0].Region = "eu", "us"
		}, "no RTT between eu and us"},
		{"RTT to nowhere", func(s *Scenario) { s.Network.Regions["eu"]["us"] = 1 }, `RTT to "us", which is not a region`},
		{"name clash", func(s *Scenario) { s.Clients[0].Name = "n0" }, `name "n0" is also node n0`},
		{"region name clash", func(s *Scenario) { s.Network.Regions["c"] = map[string]Duration{} }, `name "c" is also client group c`},
		{"no clients", func(s *Scenario) { s.Clients = nil }, "clients: none"},
		{"no stop", func(s *Scenario) { s.Clients[0].Requests = 0 }, "when does the client stop"},
		{"in flight", func(s *Scenario) { s.Clients[0].InFlight = Ints{0} }, "in_flight 0"},
		{"uneven sweep", func(s *Scenario) {
			s.Clients[0].InFlight = Ints{1, 2}
			s.Clients = append(s.Clients, Client{Name: "d", Count: 1, InFlight: Ints{1, 2, 3}, Requests: 1, Prompt: "x", Tokens: 1, Timeout: 1})
		}, "a sweep's lists must be as long"},
		{"two prompts", func(s *Scenario) { s.Clients[0].PromptIDs = []int{1} }, "not both"},
		{"no prompt", func(s *Scenario) { s.Clients[0].Prompt = "" }, "give a prompt"},
		{"prompt id", func(s *Scenario) { s.Clients[0].Prompt, s.Clients[0].PromptIDs = "", []int{32000} }, "prompt id 32000"},
		{"context", func(s *Scenario) { s.Clients[0].Tokens = 300 }, "context of 256"},
		{"sampling", func(s *Scenario) { s.Clients[0].Sampling.TopP = 2 }, "top_p in [0, 1]"},
		{"delay as a bare number", func(s *Scenario) { s.Network.Delay = Duration(50 * time.Second) }, "a bare number is seconds"},
		{"loss", func(s *Scenario) { s.Network.Loss = 1 }, "loss 1"},
		{"bandwidth without a unit", func(s *Scenario) { s.Network.Bandwidth = 100 }, `write a unit`},
		{"transport", func(s *Scenario) { s.Network.Transport = "udp" }, `transport "udp"`},
		{"tcp congestion control", func(s *Scenario) { s.Network.TCP = "cubic; rm -rf" }, `tcp "cubic; rm -rf"`},
		{"latency rows", func(s *Scenario) { s.Network.Latency = [][]Duration{{0}} }, "latency has 1 rows for 5 hosts"},
		{"link names", func(s *Scenario) { s.Network.Links = []LinkRule{{From: "n0", To: "zz"}} }, `"zz" is no host, group or region`},
		{"link both forms", func(s *Scenario) { s.Network.Links = []LinkRule{{From: "n0", To: "c", Between: []string{"a", "b"}}} }, "not both"},
		{"link loss", func(s *Scenario) { l := 2.0; s.Network.Links = []LinkRule{{Between: []string{"n", "c"}, Loss: &l}} }, "loss 2"},
		{"churn two actions", func(s *Scenario) { s.Churn = []Event{{At: 1, Kill: "n0", Start: "s"}} }, "exactly one of"},
		{"churn unknown node", func(s *Scenario) { s.Churn = []Event{{At: 1, Kill: "c"}} }, `"c" is not a node`},
		{"churn start a running node", func(s *Scenario) { s.Churn = []Event{{At: 1, Start: "n0"}} }, "already running"},
		{"churn kill a standby", func(s *Scenario) { s.Churn = []Event{{At: 1, Kill: "s"}} }, "not running"},
		{"churn in order", func(s *Scenario) {
			s.Churn = []Event{{At: Duration(9e9), Start: "n1"}, {At: Duration(3e9), Kill: "n1"}}
		}, ""},
		{"churn after the end", func(s *Scenario) { s.Churn = []Event{{At: Duration(time.Hour), Kill: "n0"}} }, "max_duration"},
		{"max duration", func(s *Scenario) { s.Bounds.MaxDuration = Duration(48 * time.Hour) }, "max_duration"},
		{"client longer than the bound", func(s *Scenario) { s.Clients[0].Duration = Duration(time.Hour) }, "not within bounds.max_duration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Parse([]byte(base))
			if err != nil {
				t.Fatal(err)
			}
			tt.change(s)
			err = s.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tt.want)
			}
		})
	}
}

func TestLayouts(t *testing.T) {
	sh := KnownShapes["stories15M"]
	tests := []struct {
		name    string
		layers  []string
		layouts []string
		have    []string
		want    []string
	}{
		{"one chain", []string{"0:2,2:4,4:6"}, nil, nil, []string{"0:2,2:4,4:6"}},
		{"a spare in the chain", []string{"0:2,2:4,4:6", "2:4"}, nil, nil, []string{"0:2,2:4,4:6"}},
		{"two cuts", []string{"0:3", "3:6", "0:2", "2:6"}, nil, nil, []string{"0:2,2:6", "0:3,3:6"}},
		{"a replica borrows the rest", []string{"0:3,3:6", "0:1", "1:3"}, nil, nil, []string{"0:1,1:3,3:6", "0:3,3:6"}},
		{"head rows", []string{"0:6/0:16000", "6:6/16000:32000"}, nil, nil, []string{"0:6/0:16000,6:6/16000:32000"}},
		{"whole head written out", []string{"0:6/0:32000"}, nil, nil, []string{"0:6"}},
		{"explicit layout covers it", []string{"2:4"}, []string{"0:2,2:4,4:6"}, nil, []string{"0:2,2:4,4:6"}},
		{"a balanced cut covers it", []string{"0:3"}, nil, []string{"0:3,3:6"}, nil},
		{"auto only", []string{"auto"}, []string{"0:6"}, nil, []string{"0:6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Scenario{Model: Model{Layouts: tt.layouts}}
			for _, l := range tt.layers {
				s.Nodes = append(s.Nodes, Node{Name: "n", Count: max(1, strings.Count(l, ",")+1), Layers: l})
			}
			var have [][]shards.Stage
			for _, h := range tt.have {
				st, err := shards.ParseRanges(h, ovrtConfig(sh))
				if err != nil {
					t.Fatal(err)
				}
				have = append(have, st)
			}
			ls, err := s.Layouts(sh, have)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, l := range ls {
				got = append(got, FormatLayout(l))
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("layouts %q, want %q", got, tt.want)
			}
			for _, g := range got {
				if _, err := shards.ParseRanges(g, ovrtConfig(sh)); err != nil {
					t.Errorf("layout %s: %v", g, err)
				}
			}
		})
	}
}

func TestUnits(t *testing.T) {
	rates := map[string]int64{"100Mbit": 12_500_000, "1Gbit/s": 125_000_000, "512kbit": 64_000, "10MB/s": 10_000_000,
		"1MiB": 1 << 20, "2000": 2000, "1.5Gbps": 187_500_000, "0": 0, "1e6": 1_000_000}
	for in, want := range rates {
		got, err := parseRate(in)
		if err != nil || got != want {
			t.Errorf("rate %q = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"-1Mbit", "fast", "10 Mbits", "1e99Gbit", "NaN"} {
		if _, err := parseRate(in); err == nil {
			t.Errorf("rate %q: no error", in)
		}
	}
	durs := map[string]time.Duration{"50ms": 50 * time.Millisecond, "1.5": 1500 * time.Millisecond, "2m": 2 * time.Minute, "0": 0}
	for in, want := range durs {
		got, err := parseDuration(in)
		if err != nil || got != want {
			t.Errorf("duration %q = %v, %v; want %v", in, got, err, want)
		}
	}
	s, err := Parse([]byte("name: x\nbounds: {max_traffic: 1.5GiB}\nnodes: [{memory: 512MiB}]\n"))
	if err != nil || s.Bounds.MaxTraffic != 3<<29 || s.Nodes[0].Memory != 512<<20 {
		t.Fatalf("%+v %v", s, err)
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("name: x\nbogus: 1\n"), 0o644)
	_, err := Load(p)
	if !errors.Is(err, ErrParse) || !strings.Contains(err.Error(), "bad.yaml") || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("got %v", err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, ErrParse) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}
