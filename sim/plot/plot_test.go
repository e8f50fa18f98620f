package plot

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"strings"
	"testing"
)

// wellFormed parses an SVG document and counts its elements by name.
func wellFormed(t *testing.T, b []byte) map[string]int {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(b))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, b)
		}
		if s, ok := tok.(xml.StartElement); ok {
			n[s.Name.Local]++
		}
	}
	if n["svg"] != 1 {
		t.Fatalf("want one svg element, got %v", n)
	}
	return n
}

func TestLine(t *testing.T) {
	tests := []struct {
		name      string
		line      Line
		polylines int
		err       error
	}{
		{"two series", Line{Title: "tokens/s <over> time", XLabel: "s", YLabel: "tokens/s", Series: []Series{
			{Name: "c0", X: []float64{0, 1, 2}, Y: []float64{10, 20, 15}},
			{Name: "c&1", X: []float64{0, 1, 2}, Y: []float64{5, 7, 9}},
		}}, 2, nil},
		{"a NaN breaks the line", Line{Series: []Series{{X: []float64{0, 1, 2, 3}, Y: []float64{1, math.NaN(), 2, 3}}}}, 2, nil},
		{"one point", Line{Series: []Series{{X: []float64{5}, Y: []float64{5}}}}, 1, nil},
		{"negative values", Line{Series: []Series{{X: []float64{-3, 3}, Y: []float64{-1e6, 2e6}}}}, 1, nil},
		{"empty", Line{}, 0, ErrNoData},
		{"only NaN", Line{Series: []Series{{X: []float64{math.NaN()}, Y: []float64{1}}}}, 0, ErrNoData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			err := tt.line.WriteSVG(&b)
			if !errors.Is(err, tt.err) {
				t.Fatalf("err %v, want %v", err, tt.err)
			}
			if err != nil {
				return
			}
			n := wellFormed(t, b.Bytes())
			if n["polyline"] != tt.polylines {
				t.Errorf("%d polylines, want %d", n["polyline"], tt.polylines)
			}
			if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
				t.Errorf("non-finite coordinates in output")
			}
		})
	}
}

func TestLineMismatch(t *testing.T) {
	err := Line{Series: []Series{{X: []float64{1, 2}, Y: []float64{1}}}}.WriteSVG(io.Discard)
	if err == nil || !strings.Contains(err.Error(), "2 x and 1 y") {
		t.Fatalf("got %v", err)
	}
}

func TestBar(t *testing.T) {
	var b bytes.Buffer
	if err := (Bar{Title: "aggregate", YLabel: "tokens/s", Labels: []string{"1", "4", "bad"}, Values: []float64{41.5, 97, math.Inf(1)}}).WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	n := wellFormed(t, b.Bytes())
	if n["rect"] != 3 { // background + two finite bars
		t.Errorf("%d rects, want 3", n["rect"])
	}
	if !strings.Contains(b.String(), ">n/a<") {
		t.Errorf("the infinite bar is not marked n/a")
	}
	if err := (Bar{}).WriteSVG(io.Discard); !errors.Is(err, ErrNoData) {
		t.Errorf("empty bar chart: %v", err)
	}
	if err := (Bar{Labels: []string{"a"}}).WriteSVG(io.Discard); err == nil {
		t.Errorf("labels without values: no error")
	}
}

func TestDeterministic(t *testing.T) {
	l := Line{Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{0, 1}}}}
	var a, b bytes.Buffer
	l.WriteSVG(&a)
	l.WriteSVG(&b)
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("the same chart gave different bytes")
	}
}

func TestTicks(t *testing.T) {
	tests := []struct {
		lo, hi        float64
		a, b, step    float64
		firstLabel    string
		labelOfSecond string
	}{
		{0, 97, 0, 100, 20, "0", "20"},
		{0, 1, 0, 1, 0.2, "0", "0.2"},
		{0, 0, 0, 1, 0.2, "0", "0.2"},
		{0, 35000, 0, 40000, 10000, "0", "10k"},
		{-3, 3, -3, 3, 1, "-3", "-2"},
	}
	for _, tt := range tests {
		vals, a, b, step := ticks(tt.lo, tt.hi, 6)
		if math.Abs(a-tt.a) > 1e-9 || math.Abs(b-tt.b) > 1e-9 || math.Abs(step-tt.step) > 1e-9 {
			t.Errorf("ticks(%v, %v) = [%v, %v] step %v, want [%v, %v] step %v", tt.lo, tt.hi, a, b, step, tt.a, tt.b, tt.step)
			continue
		}
		if got := label(vals[0], step); got != tt.firstLabel {
			t.Errorf("ticks(%v, %v): first label %q, want %q", tt.lo, tt.hi, got, tt.firstLabel)
		}
		if got := label(vals[1], step); got != tt.labelOfSecond {
			t.Errorf("ticks(%v, %v): second label %q, want %q", tt.lo, tt.hi, got, tt.labelOfSecond)
		}
	}
}
