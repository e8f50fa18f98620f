package swarm

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pipeshard/pipeshard/internal/wire"
)

// Observer is told what a Client's sessions do, as it happens, so that a
// metrics package can count it without swarm importing one
// (internal/metrics implements it). Its methods are called on the
// goroutines that use the sessions and must not block.
type Observer interface {
	// SessionOpened and SessionClosed bracket every session the client
	// opens, shadow routes of verification included.
	SessionOpened()
	SessionClosed()
	// Step: a step's result came back after rtt; trace holds what each
	// hop reported of it (queue and compute).
	Step(rtt time.Duration, trace []wire.Timing)
	// Tokens: a Resilient sequence's step chose n new tokens.
	Tokens(n int)
	// RouteChanged: a Resilient sequence failed over to a new route.
	RouteChanged()
	// Verified: verification checked a step against a shadow route;
	// mismatches is how many times the routes disagreed doing so.
	Verified(mismatches int)
}

// Observe makes o the client's observer (see Config.Observer). Call it
// before the client opens sessions: sessions already open keep the
// observer they had.
func (c *Client) Observe(o Observer) {
	if o == nil {
		o = nopObserver{}
	}
	c.obs = o
}

// LiveSession is one open session of a Client and its route.
type LiveSession struct {
	ID     string // session ID, hex
	Route  []Hop
	Opened time.Time
}

// live is the registry of a Client's open sessions.
type live struct {
	mu sync.Mutex
	m  map[wire.SessionID]LiveSession
}

func (l *live) add(s *Session) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = map[wire.SessionID]LiveSession{}
	}
	l.m[s.ID] = LiveSession{ID: s.ID.String(), Route: s.Route, Opened: time.Now()}
}

func (l *live) remove(id wire.SessionID) {
	l.mu.Lock()
	delete(l.m, id)
	l.mu.Unlock()
}

// Sessions returns the client's open sessions, oldest first.
func (c *Client) Sessions() []LiveSession {
	c.live.mu.Lock()
	out := make([]LiveSession, 0, len(c.live.m))
	for _, s := range c.live.m {
		out = append(out, s)
	}
	c.live.mu.Unlock()
	slices.SortFunc(out, func(a, b LiveSession) int {
		if c := a.Opened.Compare(b.Opened); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// nopObserver observes nothing.
type nopObserver struct{}

func (nopObserver) SessionOpened()                    {}
func (nopObserver) SessionClosed()                    {}
func (nopObserver) Step(time.Duration, []wire.Timing) {}
func (nopObserver) Tokens(int)                        {}
func (nopObserver) RouteChanged()                     {}
func (nopObserver) Verified(int)                      {}
