package shards

import (
	"testing"

	"github.com/pipeshard/pipeshard/ovrt"
)

var stories = ovrt.Config{Dim: 288, HiddenDim: 768, Layers: 6, Heads: 6, KVHeads: 6, Vocab: 32000, Context: 256, NormEps: 1e-5, RopeTheta: 10000, TiedHead: true}

var llama8b = ovrt.Config{Dim: 4096, HiddenDim: 14336, Layers: 32, Heads: 32, KVHeads: 8, Vocab: 128256, Context: 8192, NormEps: 1e-5, RopeTheta: 500000}

// The cost-balanced split's largest stage must cost at most 1.15x its
// ideal share (total/n), where the paper's even split by layer count is
// far off because of the output head.
func TestBalancedSplitWithinBound(t *testing.T) {
	tests := []struct {
		name  string
		cfg   ovrt.Config
		quant ovrt.DType
		n     int
	}{
		{"stories f32 1", stories, ovrt.F32, 1},
		{"stories f32 2", stories, ovrt.F32, 2},
		{"stories f32 3", stories, ovrt.F32, 3},
		{"stories q8 2", stories, ovrt.Q8_0, 2},
		{"stories q8 3", stories, ovrt.Q8_0, 3},
		{"stories q4 4", stories, ovrt.Q4_0, 4},
		{"llama8b q4 4", llama8b, ovrt.Q4_0, 4},
		{"llama8b f32 7", llama8b, ovrt.F32, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			head := tt.quant
			if head == ovrt.Q4_0 {
				head = ovrt.Q8_0
			}
			cs := CostsOf(tt.cfg, tt.quant, head)
			stages, err := BalancedSplit(cs, DefaultProfile, tt.n)
			if err != nil {
				t.Fatal(err)
			}
			if len(stages) != tt.n {
				t.Fatalf("%d stages, want %d: %v", len(stages), tt.n, stages)
			}
			// The plan covers every layer and head row, in order.
			var spec []string
			for _, s := range stages {
				spec = append(spec, s.String())
			}
			if _, err := ParseRanges(join(spec), tt.cfg); err != nil {
				t.Fatalf("plan %v is not a valid cut: %v", stages, err)
			}
			imb := Imbalance(cs, DefaultProfile, stages)
			even, _ := EvenSplit(tt.cfg.Layers, tt.n)
			t.Logf("%v: largest stage %.3f x ideal (even split by layers: %.3f x)", stages, imb, Imbalance(cs, DefaultProfile, even))
			if imb > 1.15 {
				t.Errorf("largest stage is %.3f x its ideal share, want <= 1.15", imb)
			}
		})
	}
}

func join(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

func TestParseRanges(t *testing.T) {
	good := []string{"0:6", "0:4,4:6", "0:6/0:16000,6:6/16000:32000", "0:3,3:6/0:64,6:6/64:32000"}
	for _, s := range good {
		if _, err := ParseRanges(s, stories); err != nil {
			t.Errorf("ParseRanges(%q): %v", s, err)
		}
	}
	bad := []string{"", "0:4", "0:4,5:6", "0:4,4:7", "1:6", "0:6/0:100", "0:6/0:16000,6:6/16001:32000", "a:b", "0:6/5:3", "0:3,3:3,3:6"}
	for _, s := range bad {
		if _, err := ParseRanges(s, stories); err == nil {
			t.Errorf("ParseRanges(%q) succeeded", s)
		}
	}
}

func TestEvenSplitIsThePapersRule(t *testing.T) {
	got, err := EvenSplit(80, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []Stage{{0, 27, 0, 0}, {27, 54, 0, 0}, {54, 80, 0, 0}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("EvenSplit(80, 3) = %v, want %v", got, want)
		}
	}
}
