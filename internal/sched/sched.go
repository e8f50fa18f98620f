package sched

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors.
var (
	ErrUnknownSession = errors.New("sched: unknown session")
	ErrSessionExists  = errors.New("sched: session exists")
	ErrNoCredit       = errors.New("sched: session out of credit")
	ErrBadJob         = errors.New("sched: bad job")
	ErrBadConfig      = errors.New("sched: bad config")
)

// SessionID names a session; the driver assigns them (the node numbers
// its sessions, a simulator uses its own indices).
type SessionID uint64

// JobID names one queued forward; Arrive assigns them in order.
type JobID uint64

// Job is one forward of one session waiting at the stage, or running.
type Job struct {
	ID      JobID
	Session SessionID
	Tokens  int           // tokens the forward advances (1 for a decode step)
	Bytes   int           // bytes the driver holds for it (its payload)
	At      time.Duration // arrival time
}

// Credit returns N forwards of credit to a session's upstream.
type Credit struct {
	Session SessionID
	N       int
}

// Ready is what Next decided.
type Ready struct {
	// Batch, if not empty, is to run now as one forward: at most one job
	// per session, in batch order. Call Done when it has run.
	Batch []Job
	// Wait, when Batch is empty and Wait > 0, is the rest of the
	// gathering window: call Next again after Wait, or sooner when an
	// input arrives. Wait == 0 and no batch: nothing to do until an input
	// (or Done) arrives.
	Wait time.Duration
	// Window is the gathering window the decision used (for stats).
	Window time.Duration
}

// Config tunes a scheduler. The zero value of a field takes its default.
type Config struct {
	// Credit is C: how many forwards each session may have at the stage,
	// waiting or running (default DefaultCredit).
	Credit int
	// BatchTokens is the per-batch token budget (default
	// DefaultBatchTokens). A single forward larger than the budget runs,
	// alone, when its client leads a batch.
	BatchTokens int
	// MaxWindow caps the gathering window (default DefaultMaxWindow); it
	// is also capped at a quarter of one batch's compute time.
	MaxWindow time.Duration
	// Compute is the initial estimate of one decode batch's compute time
	// (0: unknown; no window is used until a batch has been measured).
	Compute time.Duration
}

// Defaults.
const (
	DefaultCredit      = 4
	DefaultBatchTokens = 256
	DefaultMaxWindow   = 5 * time.Millisecond
	maxCredit          = 1 << 20 // bound on one session's downstream credit
)

// Validate checks c after defaults are applied.
func (c *Config) Validate() error {
	switch {
	case c.Credit < 0 || c.Credit > maxCredit:
		return fmt.Errorf("%w: credit %d", ErrBadConfig, c.Credit)
	case c.BatchTokens < 0:
		return fmt.Errorf("%w: batch tokens %d", ErrBadConfig, c.BatchTokens)
	case c.MaxWindow < 0 || c.Compute < 0:
		return fmt.Errorf("%w: negative duration", ErrBadConfig)
	}
	return nil
}

func (c *Config) defaults() {
	if c.Credit == 0 {
		c.Credit = DefaultCredit
	}
	if c.BatchTokens == 0 {
		c.BatchTokens = DefaultBatchTokens
	}
	if c.MaxWindow == 0 {
		c.MaxWindow = DefaultMaxWindow
	}
}

// Stats describe the scheduler's state.
type Stats struct {
	Sessions, Clients int
	QueuedJobs        int // waiting or running: held by the driver
	QueuedTokens      int
	QueuedBytes       int
	Running           int           // jobs of the batch in flight
	Window            time.Duration // the last gathering window chosen
	Compute           time.Duration // estimated compute of one decode batch
	Gap               time.Duration // estimated gap between arrivals
	Batches           int64
	Waits             int64 // decisions to wait for a gathering window
}

type session struct {
	id      SessionID
	client  *client
	queue   []Job // waiting, in arrival order
	running int   // jobs in the batch in flight (0 or 1)
	limited bool  // down applies: the session has a next hop
	down    int   // downstream credit: forwards the next hop will take
	taken   bool  // in the batch being formed
}

// eligible reports whether the session's first waiting job may run.
func (s *session) eligible() bool {
	return len(s.queue) > 0 && (!s.limited || s.down > 0) && !s.taken
}

type client struct {
	name     string
	sessions []*session // round-robin order: order of opening
	cursor   int        // index of the session to consider first
	blocked  bool       // its next job did not fit the batch being formed
}

// Sched is one stage's scheduler. It is not safe for concurrent use: the
// driver serializes calls (the node holds a mutex).
type Sched struct {
	cfg      Config
	sessions map[SessionID]*session // lookup only: never iterated
	clients  []*client              // round-robin order: order of first session
	byName   map[string]*client
	lead     int // index in clients of the client that leads the next batch

	busy    bool
	running []Job
	nextJob JobID

	// Estimates.
	compute   time.Duration // EWMA of decode batches' compute
	gap       time.Duration // EWMA of the gap between arrivals
	lastArr   time.Duration
	arrivals  int64
	idleSince time.Duration // when the last batch ended

	queuedJobs, queuedTokens, queuedBytes int
	window                                time.Duration
	maxBatch                              int // SetMaxBatch
	batches, waits                        int64
}

// New returns a scheduler for cfg.
func New(cfg Config) (*Sched, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sched{cfg: cfg, sessions: map[SessionID]*session{}, byName: map[string]*client{}, compute: cfg.Compute}, nil
}

// Config returns the configuration in use, defaults applied.
func (s *Sched) Config() Config { return s.cfg }

// SetMaxBatch caps the forwards of the next batches (0: no cap; the token
// budget still applies). A stage uses it to keep sessions that share a
// route from travelling as one convoy (see doc.go).
func (s *Sched) SetMaxBatch(n int) { s.maxBatch = max(n, 0) }

// Open registers a session of client. limited says that its results go
// to a next hop that grants credit (Grant); a last hop's results go to
// the client, which grants none, and are not limited.
func (s *Sched) Open(id SessionID, clientName string, limited bool) error {
	if s.sessions[id] != nil {
		return fmt.Errorf("%w: %d", ErrSessionExists, id)
	}
	c := s.byName[clientName]
	if c == nil {
		c = &client{name: clientName}
		s.byName[clientName] = c
		s.clients = append(s.clients, c)
	}
	ss := &session{id: id, client: c, limited: limited}
	c.sessions = append(c.sessions, ss)
	s.sessions[id] = ss
	return nil
}

// Close forgets a session. It returns the session's waiting jobs, which
// will not run (the driver frees them); a job of it that is running is
// still reported by Done, with no credit.
func (s *Sched) Close(id SessionID) []Job {
	ss := s.sessions[id]
	if ss == nil {
		return nil
	}
	delete(s.sessions, id)
	for _, j := range ss.queue {
		s.count(j, -1)
	}
	dropped := ss.queue
	ss.queue = nil
	c := ss.client
	i := index(c.sessions, ss)
	c.sessions = append(c.sessions[:i], c.sessions[i+1:]...)
	if i < c.cursor {
		c.cursor--
	}
	if c.cursor >= len(c.sessions) {
		c.cursor = 0
	}
	if len(c.sessions) == 0 {
		delete(s.byName, c.name)
		k := index(s.clients, c)
		s.clients = append(s.clients[:k], s.clients[k+1:]...)
		if k < s.lead {
			s.lead--
		}
		if s.lead >= len(s.clients) {
			s.lead = 0
		}
	}
	return dropped
}

func index[T comparable](xs []T, x T) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	panic("sched: internal inconsistency")
}

// Room returns how many more forwards session id may send now: its
// credit. The driver reads a session's next forward only while Room > 0.
func (s *Sched) Room(id SessionID) int {
	ss := s.sessions[id]
	if ss == nil {
		return 0
	}
	return s.cfg.Credit - len(ss.queue) - ss.running
}

// Arrive queues a forward of tokens tokens (bytes of payload) of session
// id at time now. It fails with ErrNoCredit when the session has Credit
// forwards at the stage already: a driver that reads only while Room > 0
// never sees that.
func (s *Sched) Arrive(now time.Duration, id SessionID, tokens, bytes int) (Job, error) {
	ss := s.sessions[id]
	switch {
	case ss == nil:
		return Job{}, fmt.Errorf("%w: %d", ErrUnknownSession, id)
	case tokens < 1 || bytes < 0:
		return Job{}, fmt.Errorf("%w: %d tokens, %d bytes", ErrBadJob, tokens, bytes)
	case s.Room(id) <= 0:
		return Job{}, fmt.Errorf("%w: %d has %d forwards here", ErrNoCredit, id, len(ss.queue)+ss.running)
	}
	if s.arrivals > 0 {
		g := max(now-s.lastArr, 0)
		s.gap += (g - s.gap) / 8
		if s.arrivals == 1 {
			s.gap = g
		}
	}
	s.lastArr = now
	s.arrivals++
	s.nextJob++
	j := Job{ID: s.nextJob, Session: id, Tokens: tokens, Bytes: bytes, At: now}
	ss.queue = append(ss.queue, j)
	s.count(j, 1)
	return j, nil
}

func (s *Sched) count(j Job, sign int) {
	s.queuedJobs += sign
	s.queuedTokens += sign * j.Tokens
	s.queuedBytes += sign * j.Bytes
}

// Grant adds n forwards of downstream credit to session id: its next hop
// will take n more.
func (s *Sched) Grant(id SessionID, n int) error {
	ss := s.sessions[id]
	if ss == nil {
		return fmt.Errorf("%w: %d", ErrUnknownSession, id)
	}
	ss.down = min(ss.down+max(n, 0), maxCredit)
	return nil
}

// Next decides, at time now, whether to run a batch, wait for the rest
// of the gathering window, or do nothing. It returns no batch while one
// is running (until Done).
func (s *Sched) Next(now time.Duration) Ready {
	if s.busy {
		return Ready{}
	}
	// What could run, and since when.
	k, tokens, free := 0, 0, 0
	since := time.Duration(-1)
	for _, c := range s.clients {
		for _, ss := range c.sessions {
			switch {
			case len(ss.queue) == 0:
				free++
			case ss.eligible():
				k++
				tokens += ss.queue[0].Tokens
				if at := max(ss.queue[0].At, s.idleSince); since < 0 || at < since {
					since = at
				}
			}
		}
	}
	if k == 0 {
		return Ready{}
	}
	w := s.windowFor(now, k, tokens, free)
	s.window = w
	if now < since+w {
		s.waits++
		return Ready{Wait: since + w - now, Window: w}
	}
	b := s.form()
	if len(b) == 0 { // cannot happen: the leader's first job always fits
		return Ready{}
	}
	s.busy = true
	s.running = b
	s.batches++
	return Ready{Batch: b, Window: w}
}

// windowFor is the gathering window for k ready jobs holding tokens
// tokens, with free sessions that have nothing queued (see doc.go).
func (s *Sched) windowFor(now time.Duration, k, tokens, free int) time.Duration {
	c := s.compute
	if tokens >= s.cfg.BatchTokens || free == 0 || c <= 0 || s.arrivals < 2 {
		return 0
	}
	gap := max(s.gap, now-s.lastArr, 1) // a quiet spell makes the estimate stale
	if c <= time.Duration(k)*gap {
		return 0 // fewer than k arrivals expected in one compute: waiting costs more than it gains
	}
	w := (c - time.Duration(k)*gap) / 2
	return max(min(w, time.Duration(free)*gap, c/4, s.cfg.MaxWindow), 0)
}

// form takes the next batch: clients round robin from the leader, each
// giving its next eligible session's first job per pass, sessions of a
// client round robin, until the token budget is spent or nothing more
// fits.
func (s *Sched) form() []Job {
	n := len(s.clients)
	budget := s.cfg.BatchTokens
	var b []Job
	first := -1 // index of the client that led
	for _, c := range s.clients {
		c.blocked = false
	}
	full := func() bool { return budget <= 0 || s.maxBatch > 0 && len(b) >= s.maxBatch }
	for progress := true; progress && !full(); {
		progress = false
		for i := 0; i < n && !full(); i++ {
			c := s.clients[(s.lead+i)%n]
			if c.blocked {
				continue
			}
			ss, at := c.pick()
			if ss == nil {
				continue
			}
			j := ss.queue[0]
			if len(b) > 0 && j.Tokens > budget {
				c.blocked = true // keeps its turn: this session goes first next time
				continue
			}
			ss.queue = ss.queue[1:]
			ss.running++
			ss.taken = true
			if ss.limited {
				ss.down--
			}
			c.cursor = (at + 1) % len(c.sessions)
			if first < 0 {
				first = (s.lead + i) % n
			}
			b = append(b, j)
			budget -= j.Tokens
			progress = true
		}
	}
	for _, j := range b {
		s.sessions[j.Session].taken = false
	}
	if first >= 0 {
		s.lead = (first + 1) % n // the next client leads the next batch
	}
	return b
}

// pick returns the client's next eligible session in round-robin order.
func (c *client) pick() (*session, int) {
	m := len(c.sessions)
	for i := range m {
		at := (c.cursor + i) % m
		if ss := c.sessions[at]; ss.eligible() {
			return ss, at
		}
	}
	return nil, 0
}

// Done reports that the running batch ended at time now after compute
// of computing. It returns the credit to send upstream: one forward per
// job of a session still open, in batch order.
func (s *Sched) Done(now, compute time.Duration) []Credit {
	if !s.busy {
		return nil
	}
	var out []Credit
	decode := true
	for _, j := range s.running {
		s.count(j, -1)
		decode = decode && j.Tokens == 1
		if ss := s.sessions[j.Session]; ss != nil {
			ss.running--
			out = append(out, Credit{Session: j.Session, N: 1})
		}
	}
	if decode && compute > 0 {
		if s.compute == 0 {
			s.compute = compute
		} else {
			s.compute += (compute - s.compute) / 4
		}
	}
	s.busy = false
	s.running = nil
	s.idleSince = now
	return out
}

// Busy reports whether a batch is running.
func (s *Sched) Busy() bool { return s.busy }

// Stats returns the scheduler's counters and estimates.
func (s *Sched) Stats() Stats {
	return Stats{Sessions: len(s.sessions), Clients: len(s.clients),
		QueuedJobs: s.queuedJobs, QueuedTokens: s.queuedTokens, QueuedBytes: s.queuedBytes,
		Running: len(s.running), Window: s.window, Compute: s.compute, Gap: s.gap,
		Batches: s.batches, Waits: s.waits}
}
