package node

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/pprof"
	"strings"
	"time"
)

// ClosePart is one thing a node or client closes when it stops.
type ClosePart struct {
	Name  string
	Close func()
}

// closeTimeout bounds each part of CloseParts.
const closeTimeout = 15 * time.Second

// CloseParts closes parts in order, giving each at most 15 s: a node or
// client asked to stop stops, even if a library it uses hangs. A part
// that does not finish is logged with the stacks of the goroutines
// closing it and left behind, and the error names it
// (ErrCloseTimeout).
func CloseParts(log *slog.Logger, parts ...ClosePart) error {
	var errs []error
	for _, p := range parts {
		done := make(chan struct{})
		go func() {
			defer close(done)
			p.Close()
		}()
		t := time.NewTimer(closeTimeout)
		select {
		case <-done:
		case <-t.C:
			log.Error("close: a part did not finish; closing the rest", "part", p.Name, "after", closeTimeout, "stacks", closeStacks())
			errs = append(errs, fmt.Errorf("%w: %s after %v", ErrCloseTimeout, p.Name, closeTimeout))
		}
		t.Stop()
	}
	return errors.Join(errs...)
}

// closeStacks returns the stacks of the goroutines CloseParts started,
// for the log of a part that hangs.
func closeStacks() string {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2) // every goroutine, as a panic prints them
	var out []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "node.CloseParts") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
