// Package plot writes small, dependency-free SVG charts: line charts of
// one or more series and bar charts of labelled values. It is what the
// simulators use to draw their results (tokens/s over time, throughput
// per setting) next to the JSON they write.
//
// # Use
//
//	l := plot.Line{Title: "tokens/s over time", XLabel: "s", YLabel: "tokens/s"}
//	l.Series = append(l.Series, plot.Series{Name: "c0", X: xs, Y: ys})
//	err := l.WriteSVG(w)
//
//	b := plot.Bar{Title: "aggregate tokens/s", YLabel: "tokens/s",
//		Labels: []string{"1 in flight", "4 in flight"}, Values: []float64{41, 97}}
//	err = b.WriteSVG(w)
//
// Axes start at zero unless the data go below it, ticks fall on 1, 2 and
// 5 times a power of ten, and series take colours from a fixed palette in
// order, so the same data always give the same bytes. Points whose X or
// Y is NaN or infinite are skipped (a line breaks there). Text is
// XML-escaped. The output is a standalone SVG 1.1 document that browsers
// and image viewers open directly.
package plot
