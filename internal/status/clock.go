package status

import "time"

// Clock is the time source of Publisher and Tracker. Tests run the real
// one inside a testing/synctest bubble, or supply their own.
type Clock interface {
	Now() time.Time
	NewTicker(d time.Duration) Ticker
	NewTimer(d time.Duration) Timer
}

// Ticker is the part of *time.Ticker that Publisher uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// Timer is the part of *time.Timer that Tracker uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
}

// RealClock is the Clock of package time.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (RealClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// NewTimer returns a time.Timer.
func (RealClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

type realTimer struct{ t *time.Timer }

func (t realTimer) C() <-chan time.Time { return t.t.C }
func (t realTimer) Stop() bool          { return t.t.Stop() }

func clockOr(c Clock) Clock {
	if c == nil {
		return RealClock{}
	}
	return c
}
