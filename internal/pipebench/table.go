package pipebench

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pipeshard/pipeshard/sim/plot"
)

// ErrConfig reports a bad benchmark configuration.
var ErrConfig = errors.New("pipebench: bad configuration")

// Table is one measured table.
type Table struct {
	ID     string // "a", "b", ...
	Title  string
	Header []string
	Rows   [][]string
	Notes  []string // lines printed under the table
	// Plot, if set, is drawn as ID.svg.
	Plot interface{ WriteSVG(io.Writer) error }
}

// Markdown writes the table as a Markdown section; svgRel, if not empty,
// is the relative path of the table's SVG.
func (t *Table) Markdown(w io.Writer, svgRel string) {
	fmt.Fprintf(w, "### %s. %s\n\n", t.ID, t.Title)
	fmt.Fprintf(w, "| %s |\n|", strings.Join(t.Header, " | "))
	for range t.Header {
		fmt.Fprint(w, "---|")
	}
	fmt.Fprintln(w)
	for _, r := range t.Rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
	fmt.Fprintln(w)
	for _, n := range t.Notes {
		fmt.Fprintln(w, n)
	}
	if len(t.Notes) > 0 {
		fmt.Fprintln(w)
	}
	if svgRel != "" {
		fmt.Fprintf(w, "![table %s](%s)\n\n", t.ID, svgRel)
	}
}

// WriteSVG draws the table's plot into dir as table-ID.svg and returns the
// file's path ("" when the table has no plot).
func (t *Table) WriteSVG(dir string) (string, error) {
	if t.Plot == nil || dir == "" {
		return "", nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "pipeline-"+t.ID+".svg")
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	err = t.Plot.WriteSVG(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, plot.ErrNoData) {
		os.Remove(path)
		return "", nil
	}
	return path, err
}

// ParseTables reads a comma-separated list of table letters.
func ParseTables(s string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		switch f {
		case "":
			continue
		case "a", "b", "c", "d", "e":
		default:
			return nil, fmt.Errorf("%w: table %q: want a, b, c, d or e", ErrConfig, f)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no tables", ErrConfig)
	}
	slices.Sort(out)
	return out, nil
}

// median returns the median of v (NaN for none).
func median(v []float64) float64 {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return math.NaN()
	}
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// span returns "min–max" of v.
func span(v []float64, format string) string {
	var s []float64
	for _, x := range v {
		if !math.IsNaN(x) {
			s = append(s, x)
		}
	}
	if len(s) == 0 {
		return "–"
	}
	if len(s) == 1 {
		return fmt.Sprintf(format, s[0])
	}
	return fmt.Sprintf(format+"–"+format, slices.Min(s), slices.Max(s))
}

func f1(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

func f2(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

func ratio(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.2f×", v)
}

func pct(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.0f%%", 100*v)
}
