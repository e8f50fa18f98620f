package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/term"
)

// progress shows byte progress on w: a redrawn bar on a terminal, and a
// plain line every 10% otherwise (logs and CI stay readable).
type progress struct {
	w     io.Writer
	label string
	tty   bool
	start time.Time
	last  int64 // last percent (plain) or last redraw (tty, ns)
}

func newProgress(w io.Writer, label string) *progress {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &progress{w: w, label: label, tty: tty, start: time.Now(), last: -1}
}

func (p *progress) update(done, total int64) {
	if total <= 0 {
		return
	}
	pct := done * 100 / total
	if p.tty {
		now := time.Since(p.start).Nanoseconds()
		if done < total && now-p.last < int64(100*time.Millisecond) {
			return
		}
		p.last = now
		const width = 30
		fill := int(pct * width / 100)
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if i < fill {
				bar[i] = '='
			}
		}
		fmt.Fprintf(p.w, "\r%s [%s] %3d%% %s/%s", p.label, bar, pct, size(done), size(total))
		if done >= total {
			fmt.Fprintln(p.w)
		}
		return
	}
	if step := pct / 10 * 10; step > p.last {
		p.last = step
		fmt.Fprintf(p.w, "%s: %d%% (%s of %s)\n", p.label, step, size(done), size(total))
	}
}

func size(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
