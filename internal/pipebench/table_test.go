package pipebench

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/sim/scenario"
)

func TestParseTables(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{"a", []string{"a"}, false},
		{"d, a,c,a", []string{"a", "c", "d"}, false},
		{"A,B", []string{"a", "b"}, false},
		{"", nil, true},
		{"a,x", nil, true},
	} {
		got, err := ParseTables(tc.in)
		if tc.err {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("ParseTables(%q) = %v, %v; want ErrConfig", tc.in, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseTables(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestMarkdown(t *testing.T) {
	tb := &Table{ID: "x", Title: "a title", Header: []string{"h1", "h2"}, Rows: [][]string{{"1", "2"}, {"3", "4"}}, Notes: []string{"note"}}
	var b strings.Builder
	tb.Markdown(&b, "img/pipeline-x.svg")
	want := "### x. a title\n\n| h1 | h2 |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nnote\n\n![table x](img/pipeline-x.svg)\n\n"
	if b.String() != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", b.String(), want)
	}
}

func TestMedianAndRatios(t *testing.T) {
	if m := median([]float64{3, 1, math.NaN(), 2}); m != 2 {
		t.Errorf("median = %v, want 2", m)
	}
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	ph := []phase{{key: "naive", rep: 0}, {key: "full", rep: 0}, {key: "naive", rep: 1}, {key: "full", rep: 1}}
	ss := []stat{{agg: 2}, {agg: 10}, {agg: 4}, {agg: 12}}
	r := ratios(ph, ss, "full", "naive", agg)
	slices.Sort(r)
	if !slices.Equal(r, []float64{3, 5}) {
		t.Errorf("ratios = %v, want [3 5]", r)
	}
}

func TestPhaseStat(t *testing.T) {
	res := &scenario.Results{Requests: []scenario.RequestResult{
		{Phase: 0, TokenTimes: []float64{1, 2, 3}, TokensPerSec: 1, IDs: []int{5, 6, 7}, Traversals: 2, Drafted: 4, Accepted: 1},
		{Phase: 0, TokenTimes: []float64{1.5, 2.5, 5}, TokensPerSec: 2 / 3.5, IDs: []int{5, 6, 7}, Traversals: 3, Drafted: 4, Accepted: 0},
		{Phase: 1, TokenTimes: []float64{0, 1}, IDs: []int{5, 6}},
	}}
	s := phaseStat(res, 0)
	// 4 tokens after the first over [1, 5].
	if s.agg != 1 || s.failed != 0 || s.accept != 1.0/8 || s.perTrav != 4.0/3 {
		t.Errorf("phaseStat = %+v", s)
	}
	if !sameOutput(s) || sameOutput(s, stat{ids: [][]int{{5, 6, 8}}}) {
		t.Error("sameOutput is wrong")
	}
}
