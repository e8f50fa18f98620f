package idle

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrSample means a sample could not be read.
var ErrSample = errors.New("idle: cannot read the machine's load")

// Sample is a reading of cumulative counters at one time.
type Sample struct {
	At        time.Time
	Total     uint64 // CPU time of all cores, busy or not, in ticks
	Busy      uint64 // CPU time spent not idle, all processes, in ticks
	Self      uint64 // CPU time of the node's own process, in ticks
	OnBattery bool
}

// State is what the watcher advises.
type State int

const (
	Serve State = iota // the machine is idle: host sessions
	Yield              // the owner needs it: drain
)

func (s State) String() string {
	if s == Yield {
		return "yield"
	}
	return "serve"
}

// Config sets the thresholds. Zero values take the defaults.
type Config struct {
	BusyAbove     float64       // others' share of all cores that makes the machine busy (default 0.5)
	IdleBelow     float64       // others' share under which it is idle again (default 0.2)
	BusyFor       time.Duration // how long busy before yielding (default 10 s)
	IdleFor       time.Duration // how long idle before serving again (default 60 s)
	IgnoreBattery bool          // serve on battery too
}

func (c *Config) defaults() {
	if c.BusyAbove == 0 {
		c.BusyAbove = 0.5
	}
	if c.IdleBelow == 0 {
		c.IdleBelow = 0.2
	}
	if c.BusyFor == 0 {
		c.BusyFor = 10 * time.Second
	}
	if c.IdleFor == 0 {
		c.IdleFor = 60 * time.Second
	}
}

// Validate checks c.
func (c Config) Validate() error {
	c.defaults()
	if c.IdleBelow > c.BusyAbove || c.BusyAbove > 1 || c.IdleBelow < 0 {
		return fmt.Errorf("idle: thresholds want 0 <= idle-below (%v) <= busy-above (%v) <= 1", c.IdleBelow, c.BusyAbove)
	}
	return nil
}

// Watcher turns samples into advice. The zero State is Serve.
type Watcher struct {
	cfg   Config
	state State
	last  *Sample
	since time.Time // when the load first crossed toward the other state; zero if it has not
	Load  float64   // others' share of all cores over the last interval
	Why   string    // why the state is what it is
}

// NewWatcher returns a watcher that starts in Serve.
func NewWatcher(cfg Config) *Watcher {
	cfg.defaults()
	return &Watcher{cfg: cfg, Why: "starting"}
}

// State returns the current advice.
func (w *Watcher) State() State { return w.state }

// Observe takes a sample and returns the advice and whether it changed.
func (w *Watcher) Observe(s Sample) (State, bool) {
	prev := w.last
	w.last = &s
	if s.OnBattery && !w.cfg.IgnoreBattery {
		return w.set(Yield, "on battery")
	}
	if prev == nil || s.Total <= prev.Total {
		return w.state, false
	}
	others := float64(s.Busy-prev.Busy) - float64(s.Self-prev.Self)
	w.Load = max(others, 0) / float64(s.Total-prev.Total)
	toward := w.state == Serve && w.Load > w.cfg.BusyAbove || w.state == Yield && w.Load < w.cfg.IdleBelow
	if !toward {
		w.since = time.Time{}
		return w.state, false
	}
	if w.since.IsZero() {
		w.since = prev.At
	}
	held := s.At.Sub(w.since)
	if w.state == Serve && held >= w.cfg.BusyFor {
		return w.set(Yield, fmt.Sprintf("other processes use %.0f%% of the CPUs", 100*w.Load))
	}
	if w.state == Yield && held >= w.cfg.IdleFor {
		return w.set(Serve, fmt.Sprintf("idle: other processes use %.0f%% of the CPUs", 100*w.Load))
	}
	return w.state, false
}

func (w *Watcher) set(s State, why string) (State, bool) {
	changed := s != w.state
	w.state, w.Why = s, why
	if changed {
		w.since = time.Time{}
	}
	return s, changed
}

// Source reads samples.
type Source interface {
	Sample() (Sample, error)
}

// Run samples src every period until ctx ends and calls onChange with
// each new state and its reason. A failed sample is skipped. It returns
// ctx's error.
func Run(ctx context.Context, src Source, cfg Config, period time.Duration, onChange func(State, string)) error {
	w := NewWatcher(cfg)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		if s, err := src.Sample(); err == nil {
			if st, changed := w.Observe(s); changed {
				onChange(st, w.Why)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
