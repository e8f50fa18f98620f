package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/sim/scale"
	"github.com/pipeshard/pipeshard/sim/scenario"
)

func TestParsePolicies(t *testing.T) {
	tests := []struct {
		in   string
		want string
		err  bool
	}{
		{"all", "9 policies", false},
		{"random", "random/even", false},
		{"min-latency/dynamic,throughput-aware", "min-latency/dynamic throughput-aware/even", false},
		{"fastest", "", true},
		{"random/scattered", "", true},
		{",", "", true},
	}
	for _, tt := range tests {
		ps, err := parsePolicies(tt.in, scale.Even)
		if (err != nil) != tt.err {
			t.Errorf("%q: error %v", tt.in, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrUsage) {
				t.Errorf("%q: %v is not a usage error", tt.in, err)
			}
			continue
		}
		var names []string
		for _, p := range ps {
			names = append(names, p.String())
		}
		got := strings.Join(names, " ")
		if tt.in == "all" && len(ps) == 9 {
			got = "9 policies"
		}
		if got != tt.want {
			t.Errorf("%q: %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSimCommands(t *testing.T) {
	// No emulator here: sim run must stop before it starts processes
	// (this test binary is not pipeshard).
	old := startNetwork
	startNetwork = nil
	defer func() { startNetwork = old }()
	dir := t.TempDir()
	scen := filepath.Join(dir, "s.yaml")
	os.WriteFile(scen, []byte("name: s\nnodes: [{layers: \"0:6\"}]\nclients: [{requests: 1, prompt: hi}]\nnetwork: {delay: 20ms}\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: s\nnodes: [{layerz: \"0:6\"}]\n"), 0o644)
	invalid := filepath.Join(dir, "invalid.yaml")
	os.WriteFile(invalid, []byte("name: s\nnodes: [{layers: \"0:9\"}]\nclients: [{requests: 1, prompt: hi}]\n"), 0o644)
	cfg := filepath.Join(dir, "c.json")
	os.WriteFile(cfg, []byte(`{"swarm": {"mean_lifetime": "0s"}, "bogus": 1}`), 0o644)
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"sim", "run"}, ExitUsage, "one scenario file"},
		{[]string{"sim", "run", scen, "--backend", "ns3"}, ExitUsage, `--backend "ns3"`},
		{[]string{"sim", "run", filepath.Join(dir, "none.yaml")}, ExitFailure, "none.yaml"},
		{[]string{"sim", "run", bad}, ExitFailure, "bad.yaml: scenario: parse: line 2: field layerz not found"},
		{[]string{"sim", "run", invalid}, ExitFailure, "the model has 6 layers"},
		{[]string{"sim", "run", scen}, ExitFailure, "WAN emulator not built"},
		{[]string{"sim", "run", scen, "--dry-run"}, ExitOK, "node0 -> client0: delay 20ms"},
		{[]string{"sim", "scale", "--nodes", "0"}, ExitUsage, "--nodes 0"},
		{[]string{"sim", "scale", "--policy", "fastest"}, ExitUsage, `routing "fastest"`},
		{[]string{"sim", "scale", "--config", cfg}, ExitFailure, `unknown field "bogus"`},
		{[]string{"sim", "scale", "extra"}, ExitUsage, "unexpected argument"},
		{[]string{"sim", "client", "--bootstrap", "/ip4/127.0.0.1/tcp/1"}, ExitUsage, "--requests N, --duration D"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(t.Context(), tt.args, &out, &errb)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tt.code, errb.String())
			}
			if !strings.Contains(out.String()+errb.String(), tt.out) {
				t.Errorf("output %q lacks %q", out.String()+errb.String(), tt.out)
			}
		})
	}
}

// TestSimRunHook checks that sim run hands the emulator the scenario's
// spec and reports its failure.
func TestSimRunHook(t *testing.T) {
	scen := filepath.Join(t.TempDir(), "s.yaml")
	os.WriteFile(scen, []byte("name: s\nseed: 7\nnodes: [{name: a, layers: \"0:6\"}, {name: b, layers: auto}]\nclients: [{requests: 1, prompt: hi}]\nnetwork: {delay: 20ms, bandwidth: 8Mbit}\nbounds: {max_duration: 1m, max_traffic: 1MB}\nmodel: {stages: [2]}\n"), 0o644)
	var got scenario.NetSpec
	old := startNetwork
	defer func() { startNetwork = old }()
	startNetwork = func(ctx context.Context, spec scenario.NetSpec) (scenario.Network, error) {
		got = spec
		return nil, errors.New("no namespaces here")
	}
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"sim", "run", scen, "--backend", "delayline"}, &out, &errb)
	if code != ExitFailure || !strings.Contains(errb.String(), "starting the emulated network: no namespaces here") {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if got.Hosts != 3 || got.Backend != "delayline" || got.Seed != 7 || got.MaxDuration.Seconds() != 60 || got.MaxBytes != 1e6 ||
		got.Link(0, 2) != (scenario.LinkParams{Delay: 20e6, Rate: 1e6}) || got.Link(1, 1) != (scenario.LinkParams{}) {
		t.Fatalf("spec %+v, link %v", got, got.Link(0, 2))
	}
}

func TestSimScale(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := Main(t.Context(), []string{"sim", "scale", "--nodes", "60", "--minutes", "2", "--seed", "3", "--policy", "random,throughput-aware/dynamic", "--out", dir}, &out, &errb)
	if code != ExitOK {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.HasPrefix(out.String(), "seed 3\n| routing |") || !strings.Contains(out.String(), "| random | even |") ||
		!strings.Contains(out.String(), "| throughput-aware | dynamic |") || strings.Count(out.String(), "\n") != 5 {
		t.Errorf("table:\n%s", out.String())
	}
	for _, f := range []string{"results.json", "tokens.svg", "coverage.svg"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	// --json gives the same runs as the table, as data.
	out.Reset()
	if code := Main(t.Context(), []string{"sim", "scale", "--nodes", "60", "--minutes", "2", "--seed", "3", "--policy", "random", "--json"}, &out, &errb); code != ExitOK {
		t.Fatalf("--json: exit %d", code)
	}
	var v struct {
		Seed    uint64
		Results []scale.Results
	}
	if err := json.Unmarshal(out.Bytes(), &v); err != nil || v.Seed != 3 || len(v.Results) != 1 || v.Results[0].Nodes != 60 || v.Results[0].Sessions == 0 {
		t.Fatalf("%v: %s", err, out.String())
	}
}
