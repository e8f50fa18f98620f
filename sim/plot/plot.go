package plot

import (
	"bufio"
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// ErrNoData means a chart with nothing to draw.
var ErrNoData = errors.New("plot: no data")

// Series is one line: points (X[i], Y[i]).
type Series struct {
	Name string
	X, Y []float64
}

// Line is a line chart. Width and Height default to 720 × 400.
type Line struct {
	Title, XLabel, YLabel string
	Series                []Series
	Width, Height         int
	// Points also marks every point with a dot.
	Points bool
}

// Bar is a bar chart: one bar per label. Width and Height default to
// 720 × 400.
type Bar struct {
	Title, YLabel string
	Labels        []string
	Values        []float64
	Width, Height int
}

// Palette is the colours series and bars take, in order.
var Palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}

const (
	marginLeft   = 70
	marginRight  = 20
	marginTop    = 40
	marginBottom = 55
	legendRow    = 16
	charWidth    = 7 // a rough width of one character at font size 12
)

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// num formats a coordinate compactly.
func num(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// label formats a tick value.
func label(v, step float64) string {
	if v == 0 {
		return "0"
	}
	digits := 0
	if step < 1 {
		digits = int(math.Ceil(-math.Log10(step) - 1e-9))
	}
	a := math.Abs(v)
	switch {
	case a >= 1e6 && step >= 1e5:
		return strconv.FormatFloat(v/1e6, 'f', max(digits-6, 0), 64) + "M"
	case a >= 1e4 && step >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', max(digits-3, 0), 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}

// ticks returns about n round tick values covering [lo, hi], and the
// axis range they span.
func ticks(lo, hi float64, n int) (vals []float64, a, b, step float64) {
	if hi <= lo {
		if hi == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)/2, hi+math.Abs(hi)/2
		}
	}
	raw := (hi - lo) / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * p
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	a, b = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	for i := 0; ; i++ {
		v := a + float64(i)*step
		if v > b+step/2 {
			break
		}
		vals = append(vals, v)
	}
	return vals, a, b, step
}

type canvas struct {
	w          *bufio.Writer
	width, hgt int
}

func newCanvas(w io.Writer, width, height int, title string) *canvas {
	c := &canvas{w: bufio.NewWriter(w), width: width, hgt: height}
	fmt.Fprintf(c.w, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">
<rect width="100%%" height="100%%" fill="white"/>
`, width, height, width, height)
	if title != "" {
		c.text(float64(width)/2, 22, "middle", "font-size=\"15\" font-weight=\"bold\"", title)
	}
	return c
}

func (c *canvas) text(x, y float64, anchor, attrs, s string) {
	fmt.Fprintf(c.w, `<text x="%s" y="%s" text-anchor="%s" %s>%s</text>`+"\n", num(x), num(y), anchor, attrs, html.EscapeString(s))
}

func (c *canvas) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(c.w, `<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`+"\n", num(x1), num(y1), num(x2), num(y2), attrs)
}

func (c *canvas) close() error {
	c.w.WriteString("</svg>\n")
	return c.w.Flush()
}

// frame is the plotting area and the data ranges it maps.
type frame struct {
	x0, y0, x1, y1     float64 // pixels: left, top, right, bottom
	xlo, xhi, ylo, yhi float64
	xticks, yticks     []float64
	xstep, ystep       float64
	xlabel, ylabel     string
}

func (f *frame) px(x float64) float64 { return f.x0 + (x-f.xlo)/(f.xhi-f.xlo)*(f.x1-f.x0) }
func (f *frame) py(y float64) float64 { return f.y1 - (y-f.ylo)/(f.yhi-f.ylo)*(f.y1-f.y0) }

// axes draws the grid, the ticks and the axis labels; xTicks is false for
// bar charts, which label their bars instead.
func (c *canvas) axes(f *frame, xTicks bool) {
	for _, v := range f.yticks {
		y := f.py(v)
		c.line(f.x0, y, f.x1, y, `stroke="#e0e0e0"`)
		c.text(f.x0-6, y+4, "end", "", label(v, f.ystep))
	}
	if xTicks {
		for _, v := range f.xticks {
			x := f.px(v)
			c.line(x, f.y0, x, f.y1, `stroke="#f0f0f0"`)
			c.text(x, f.y1+16, "middle", "", label(v, f.xstep))
		}
	}
	c.line(f.x0, f.y1, f.x1, f.y1, `stroke="black"`)
	c.line(f.x0, f.y0, f.x0, f.y1, `stroke="black"`)
	if f.xlabel != "" {
		c.text((f.x0+f.x1)/2, float64(c.hgt)-10, "middle", "", f.xlabel)
	}
	if f.ylabel != "" {
		fmt.Fprintf(c.w, `<text x="16" y="%s" text-anchor="middle" transform="rotate(-90 16 %s)">%s</text>`+"\n",
			num((f.y0+f.y1)/2), num((f.y0+f.y1)/2), html.EscapeString(f.ylabel))
	}
}

func size(w, h int) (int, int) {
	if w <= 0 {
		w = 720
	}
	if h <= 0 {
		h = 400
	}
	return max(w, marginLeft+marginRight+40), max(h, marginTop+marginBottom+40)
}

// WriteSVG draws the chart. It returns ErrNoData when no series has a
// finite point.
func (l Line) WriteSVG(w io.Writer) error {
	xlo, xhi, ylo, yhi := math.Inf(1), math.Inf(-1), 0.0, math.Inf(-1)
	points := 0
	for _, s := range l.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot: series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		for i := range s.X {
			if !finite(s.X[i]) || !finite(s.Y[i]) {
				continue
			}
			points++
			xlo, xhi = min(xlo, s.X[i]), max(xhi, s.X[i])
			ylo, yhi = min(ylo, s.Y[i]), max(yhi, s.Y[i])
		}
	}
	if points == 0 {
		return ErrNoData
	}
	width, height := size(l.Width, l.Height)
	named := 0
	for _, s := range l.Series {
		if s.Name != "" {
			named++
		}
	}
	longest := 0
	for _, s := range l.Series {
		longest = max(longest, len([]rune(s.Name)))
	}
	colW := max(100, longest*charWidth+34)
	legendCols := max(1, (width-marginLeft-marginRight)/colW)
	legendH := 0
	if named > 0 {
		legendH = (named + legendCols - 1) / legendCols * legendRow
	}
	f := &frame{x0: marginLeft, y0: marginTop + float64(legendH), x1: float64(width - marginRight), y1: float64(height - marginBottom),
		xlabel: l.XLabel, ylabel: l.YLabel}
	f.xticks, f.xlo, f.xhi, f.xstep = ticks(xlo, xhi, 8)
	f.yticks, f.ylo, f.yhi, f.ystep = ticks(ylo, yhi, 6)
	c := newCanvas(w, width, height, l.Title)
	c.axes(f, true)
	k := 0
	for i, s := range l.Series {
		color := Palette[i%len(Palette)]
		var pts []string
		flush := func() {
			if len(pts) > 0 {
				fmt.Fprintf(c.w, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`+"\n", color, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				flush()
				continue
			}
			x, y := f.px(s.X[j]), f.py(s.Y[j])
			pts = append(pts, num(x)+","+num(y))
			if l.Points {
				fmt.Fprintf(c.w, `<circle cx="%s" cy="%s" r="2.5" fill="%s"/>`+"\n", num(x), num(y), color)
			}
		}
		flush()
		if s.Name != "" {
			lx := float64(marginLeft + (k%legendCols)*colW)
			ly := float64(marginTop + (k/legendCols)*legendRow)
			c.line(lx, ly-4, lx+18, ly-4, `stroke="`+color+`" stroke-width="3"`)
			c.text(lx+22, ly, "start", "", s.Name)
			k++
		}
	}
	return c.close()
}

// WriteSVG draws the chart. It returns ErrNoData when there are no bars.
func (b Bar) WriteSVG(w io.Writer) error {
	if len(b.Labels) != len(b.Values) {
		return fmt.Errorf("plot: %d labels and %d values", len(b.Labels), len(b.Values))
	}
	if len(b.Values) == 0 {
		return ErrNoData
	}
	ylo, yhi := 0.0, 0.0
	for _, v := range b.Values {
		if finite(v) {
			ylo, yhi = min(ylo, v), max(yhi, v)
		}
	}
	width, height := size(b.Width, b.Height)
	// Labels wider than their bar's slot are drawn slanted, with room
	// below for them.
	slot := float64(width-marginLeft-marginRight) / float64(len(b.Values))
	longest := 0
	for _, l := range b.Labels {
		longest = max(longest, len([]rune(l)))
	}
	slant := float64(longest*charWidth) > slot*0.95
	bottom := float64(marginBottom)
	if slant {
		bottom = max(bottom, 24+float64(longest*charWidth)*0.6)
		height += int(bottom) - marginBottom
	}
	f := &frame{x0: marginLeft, y0: marginTop, x1: float64(width - marginRight), y1: float64(height) - bottom, ylabel: b.YLabel}
	f.yticks, f.ylo, f.yhi, f.ystep = ticks(ylo, yhi, 6)
	f.xlo, f.xhi = 0, 1
	c := newCanvas(w, width, height, b.Title)
	c.axes(f, false)
	for i, v := range b.Values {
		cx := f.x0 + slot*(float64(i)+0.5)
		if slant {
			y := f.y1 + 14
			fmt.Fprintf(c.w, `<text x="%s" y="%s" text-anchor="end" transform="rotate(-35 %s %s)">%s</text>`+"\n",
				num(cx+4), num(y), num(cx+4), num(y), html.EscapeString(b.Labels[i]))
		} else {
			c.text(cx, f.y1+16, "middle", "", b.Labels[i])
		}
		if !finite(v) {
			c.text(cx, f.y1-6, "middle", `fill="#999"`, "n/a")
			continue
		}
		top, bottom := f.py(max(v, 0)), f.py(min(v, 0))
		fmt.Fprintf(c.w, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n",
			num(cx-slot*0.35), num(top), num(slot*0.7), num(bottom-top), Palette[i%len(Palette)])
		c.text(cx, top-4, "middle", "", strconv.FormatFloat(v, 'g', 4, 64))
	}
	return c.close()
}
