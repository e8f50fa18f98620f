package node

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	lpswarm "github.com/libp2p/go-libp2p/p2p/net/swarm"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/pipeshard/pipeshard/internal/sched"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// StageOptions bound what a stage accepts.
type StageOptions struct {
	MaxSessions int           // concurrent sessions (default 64)
	MaxKVBytes  int64         // KV cache budget; the least recently used session is evicted past it (0: 1 GiB)
	IdleTimeout time.Duration // a session unused this long is closed (default 5 min)
	MaxFrame    int           // largest frame accepted (default wire.DefaultMaxFrame)
	IOTimeout   time.Duration // deadline for opening the next hop and for each write (default 20 s)
	// Credit is how many forwards of one session may be queued or running
	// here (default sched.DefaultCredit). The stage holds at most
	// MaxSessions × Credit forwards, each at most MaxFrame bytes.
	Credit int
	// BatchTokens is the token budget of one batch (default
	// sched.DefaultBatchTokens); MaxWindow caps the gathering window
	// (default sched.DefaultMaxWindow). See internal/sched.
	BatchTokens int
	MaxWindow   time.Duration

	// Per-peer limits (ErrLimit). A session is accounted to its client,
	// which the first hop requires to be the peer that sent the Open;
	// later hops count (previous hop, client) pairs.
	MaxSessionsPerPeer int     // concurrent sessions of one peer (default 16; negative: no limit)
	MaxKVBytesPerPeer  int64   // KV bytes one peer's sessions may grow to, each reserved at its whole context (0: no limit)
	RatePerPeer        float64 // Opens and Forwards a second from one peer (0: no limit)
	BurstPerPeer       int     // requests one peer may send at once above the rate (default: one second's worth)
	// Allowed, if set, must allow the peer that sent an Open, its client
	// and every hop of its route; otherwise the Open is refused
	// (ErrForbidden). A node sets it from its allow list.
	Allowed func(peer.ID) bool

	// Tamper is for tests only: a lying node. If set, it may change each
	// row of the stage's output before it is emitted: a hidden state
	// (dim floats) before the last stage, a row of the head's logits (of
	// this stage's head rows) at the last stage. pos is the row's
	// position in the sequence. Clients verify nodes (swarm.Verify);
	// this is how their tests make a node lie.
	Tamper func(pos int, out []float32)

	// Observer, if set, is told of the stage's batches, ended sessions
	// and error frames (internal/metrics implements it).
	Observer StageObserver
}

// StageObserver is told what a Stage does, as it happens, so that a
// metrics package can count it without the stage importing one. Its
// methods are called on the stage's goroutines and must not block.
type StageObserver interface {
	// Batch: one batched forward of forwards forwards and tokens tokens
	// ran, its runtime call taking compute.
	Batch(forwards, tokens int, compute time.Duration)
	// SessionEnded: an admitted session ended, for reason: "closed" (by
	// its client or upstream, or the stage stopping), "idle", "evicted"
	// (the KV budget) or "error" (its next hop or upstream failed).
	SessionEnded(reason string)
	// ErrorSent: the stage sent an error frame of code upstream.
	ErrorSent(code wire.ErrorCode)
}

func (o *StageOptions) defaults() {
	if o.MaxSessions == 0 {
		o.MaxSessions = 64
	}
	if o.MaxKVBytes == 0 {
		o.MaxKVBytes = 1 << 30
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 5 * time.Minute
	}
	if o.MaxFrame == 0 {
		o.MaxFrame = wire.DefaultMaxFrame
	}
	if o.IOTimeout == 0 {
		o.IOTimeout = 20 * time.Second
	}
	if o.Credit == 0 {
		o.Credit = sched.DefaultCredit
	}
	if o.MaxSessionsPerPeer == 0 {
		o.MaxSessionsPerPeer = 16
	}
	if o.RatePerPeer > 0 && o.BurstPerPeer <= 0 {
		o.BurstPerPeer = int(math.Ceil(o.RatePerPeer))
	}
}

// Stage serves one shard over the stage protocol. It reads Forwards from
// every session's upstream stream, runs the ones that are waiting as one
// batched forward (continuous batching across sessions), and passes each
// result on: hidden states to the session's next hop, or the client's
// answer straight to the client. Which forwards run together, and when,
// is decided by an internal/sched scheduler: batches fair across clients
// under a token budget, a short gathering window when more forwards are
// expected soon, and credits that bound what each session may queue here.
//
// Goroutines: per session one reader of its upstream stream (which reads
// only while the session has credit), one writer of the credits it
// returns upstream, and, before the last hop, one relay of what comes back
// from the next hop (errors, and its credits); one executor and one
// janitor. All exit when the context given to Run ends or their session
// or stream closes.
type Stage struct {
	h       host.Host
	model   *ovrt.Model
	modelID string
	shard   string
	last    bool
	lo, hi  int // head rows held
	opts    StageOptions
	log     *slog.Logger

	kick  chan struct{} // wakes the executor after an input to the scheduler
	epoch time.Time     // the scheduler's clock counts from here

	// mu guards sessions and draining, and the scheduler: core, the
	// payloads of its jobs, the next scheduler session number and every
	// session's owed credit.
	mu       sync.Mutex
	sessions map[wire.SessionID]*session
	draining bool
	core     *sched.Sched
	jobs     map[sched.JobID]*job
	nextSID  sched.SessionID
	peers    peerLimits // per-peer admission (limits.go)

	statsMu sync.Mutex
	stats   Stats
}

// Stats are a stage's counters, read with Snapshot.
type Stats struct {
	// DecodeMicros is a moving average of one forward of one token at
	// batch 1: the stage's latency, reported in its status.
	DecodeMicros float64
	Forwards     int64
	Tokens       int64
	Batches      int64
	ComputeNanos int64
	// QueuedTokens, QueuedJobs and QueuedBytes count the forwards the
	// stage holds, waiting or running, their tokens and their payload
	// bytes: at most sessions × Credit forwards.
	QueuedTokens int64
	QueuedJobs   int64
	QueuedBytes  int64
	// WindowMicros is the last gathering window the scheduler chose.
	WindowMicros   float64
	Errors         int64
	SessionsOpened int64
	// Walks counts the forwards answered along their walk (wire.Walk),
	// and WalkRows the head rows those computed, of WalkOf in all.
	Walks, WalkRows, WalkOf int64
}

// job is one Forward waiting for the executor.
type job struct {
	s    *session
	f    *wire.Forward
	at   time.Time
	ntok int

	walked []uint32 // the walk's output ids (NoID off the walk), when it walked
}

// session is one sequence's state on this stage.
type session struct {
	id    wire.SessionID
	sid   sched.SessionID // the scheduler's name for it
	open  *wire.Open
	req   *ovrt.Request
	smp   *sample.Sampler
	up    *conn // from the previous hop or the client
	down  *conn // to the next hop, or to the client's result handler
	mu    sync.Mutex
	used  time.Time
	done  chan struct{}
	close sync.Once

	room   chan struct{} // signalled when credit returns: the reader may read again
	credit chan struct{} // signalled when owed > 0: the credit writer sends it
	owed   int           // credit to return upstream; guarded by Stage.mu
}

// signal wakes whoever waits on ch (a channel of capacity 1).
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// conn is a stream with serialized writes.
type conn struct {
	s       network.Stream
	wmu     sync.Mutex
	timeout time.Duration
}

func (c *conn) send(m wire.Message) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.s.SetWriteDeadline(time.Now().Add(c.timeout))
	err := wire.Write(c.s, m)
	c.s.SetWriteDeadline(time.Time{})
	return err
}

// NewStage serves model (the shard shardCID of model modelID) on h.
// Scheduler options out of range fall back to their defaults.
func NewStage(h host.Host, model *ovrt.Model, modelID, shardCID string, opts StageOptions, log *slog.Logger) *Stage {
	opts.defaults()
	if log == nil {
		log = slog.Default()
	}
	core, err := sched.New(sched.Config{Credit: opts.Credit, BatchTokens: opts.BatchTokens, MaxWindow: opts.MaxWindow})
	if err != nil {
		log.Warn("stage scheduler options", "err", err)
		core, _ = sched.New(sched.Config{})
	}
	opts.Credit = core.Config().Credit
	w := model.Weights()
	lo, hi := w.HeadRange()
	return &Stage{h: h, model: model, modelID: modelID, shard: shardCID, last: w.IsLast(), lo: lo, hi: hi,
		opts: opts, log: log.With("shard", shardCID), kick: make(chan struct{}, 1), epoch: time.Now(),
		sessions: map[wire.SessionID]*session{}, core: core, jobs: map[sched.JobID]*job{}}
}

// now is the scheduler's clock.
func (st *Stage) now() time.Duration { return time.Since(st.epoch) }

// Calibrate measures one forward of one token at batch 1 (the median of
// reps), so the node reports a real decode time before its first session.
func (st *Stage) Calibrate(reps int) time.Duration {
	c := st.model.Config()
	req := st.model.NewRequest()
	step := ovrt.Step{Req: req, Want: ovrt.WantLast}
	if st.model.Weights().HasEmbed() {
		step.Tokens = []int32{int32(c.BOS)}
	} else {
		step.Hidden = make([]float32, c.Dim)
	}
	var ds []time.Duration
	for range reps {
		t0 := time.Now()
		st.model.Forward([]ovrt.Step{step})
		ds = append(ds, time.Since(t0))
	}
	slices.Sort(ds)
	d := ds[len(ds)/2]
	st.statsMu.Lock()
	st.stats.DecodeMicros = float64(d.Microseconds()) + float64(d.Nanoseconds()%1000)/1000
	st.statsMu.Unlock()
	return d
}

// Run registers the stream handler and runs the executor until ctx ends.
func (st *Stage) Run(ctx context.Context) {
	st.h.SetStreamHandler(wire.StageProtocol, func(s network.Stream) { st.serve(ctx, s) })
	defer st.h.RemoveStreamHandler(wire.StageProtocol)
	go st.janitor(ctx)
	st.execute(ctx)
	// drop takes st.mu itself: collect the sessions under it, drop them
	// after.
	st.mu.Lock()
	open := make([]*session, 0, len(st.sessions))
	for _, s := range st.sessions {
		open = append(open, s)
	}
	st.mu.Unlock()
	for _, s := range open {
		st.drop(s, nil)
	}
}

// Drain stops admitting sessions; active ones go on.
func (st *Stage) Drain() {
	st.mu.Lock()
	st.draining = true
	st.mu.Unlock()
}

// Draining reports whether Drain was called.
func (st *Stage) Draining() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.draining
}

// Sessions returns the number of open sessions.
func (st *Stage) Sessions() int {
	st.mu.Lock()
	defer st.mu.Unlock()
	return len(st.sessions)
}

// Snapshot returns a copy of the counters.
func (st *Stage) Snapshot() Stats {
	st.statsMu.Lock()
	out := st.stats
	st.statsMu.Unlock()
	st.mu.Lock()
	c := st.core.Stats()
	st.mu.Unlock()
	out.QueuedTokens, out.QueuedJobs, out.QueuedBytes = int64(c.QueuedTokens), int64(c.QueuedJobs), int64(c.QueuedBytes)
	out.WindowMicros = float64(c.Window.Nanoseconds()) / 1e3
	return out
}

// KVBytes returns the KV cache memory held by all sessions.
func (st *Stage) KVBytes() int64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var n int64
	for _, s := range st.sessions {
		n += s.req.KVBytes()
	}
	return n
}

func (st *Stage) fail(c *conn, sess wire.SessionID, seq uint64, hop uint8, err error) {
	st.statsMu.Lock()
	st.stats.Errors++
	st.statsMu.Unlock()
	st.log.Debug("stage error", "session", sess, "err", err)
	e := wire.NewError(sess, seq, hop, err)
	if o := st.opts.Observer; o != nil {
		o.ErrorSent(e.Code)
	}
	c.send(e)
}

// serve handles one upstream stream: an Open, then Forwards and a Close.
func (st *Stage) serve(ctx context.Context, s network.Stream) {
	up := &conn{s: s, timeout: st.opts.IOTimeout}
	r := wire.NewReader(s, st.opts.MaxFrame)
	s.SetReadDeadline(time.Now().Add(st.opts.IOTimeout))
	m, err := r.Read()
	if err != nil {
		st.fail(up, wire.SessionID{}, 0, 0, readError(err))
		s.Close()
		return
	}
	open, ok := m.(*wire.Open)
	if !ok {
		st.fail(up, wire.SessionID{}, 0, 0, fmt.Errorf("%w: first message is %v, not open", wire.ErrProtocol, m.Type()))
		s.Close()
		return
	}
	sess, err := st.admit(ctx, open, up)
	if err != nil {
		st.fail(up, open.Session, 0, open.Hop, err)
		s.Close()
		return
	}
	defer st.drop(sess, nil)
	s.SetReadDeadline(time.Time{})
	for {
		// Out of credit, read nothing: the transport's flow control stops
		// a sender that ignores its credit.
		if !st.waitRoom(ctx, sess) {
			return
		}
		m, err := r.Read()
		if err != nil {
			if !errors.Is(err, network.ErrReset) && !errors.Is(err, io.EOF) {
				st.fail(up, sess.id, 0, open.Hop, readError(err))
			}
			return
		}
		switch m := m.(type) {
		case *wire.Forward:
			if m.Session != sess.id {
				st.fail(up, m.Session, m.Seq, open.Hop, fmt.Errorf("%w: %s on the stream of %s", wire.ErrUnknownSession, m.Session, sess.id))
				st.refund(sess)
				continue
			}
			if err := st.rateLimit(open, s.Conn().RemotePeer()); err != nil {
				st.fail(up, m.Session, m.Seq, open.Hop, err)
				st.refund(sess)
				continue
			}
			if err := st.check(m, open); err != nil {
				st.fail(up, m.Session, m.Seq, open.Hop, err)
				st.refund(sess)
				continue
			}
			sess.mu.Lock()
			sess.used = time.Now()
			sess.mu.Unlock()
			if !st.enqueue(sess, m) {
				return
			}
		case *wire.Close:
			if sess.down != nil && !st.last {
				sess.down.send(m)
			}
			return
		default:
			st.fail(up, sess.id, 0, open.Hop, fmt.Errorf("%w: unexpected %v", wire.ErrProtocol, m.Type()))
			return
		}
	}
}

// waitRoom waits until sess may send another forward; false when the
// session or the stage ends first.
func (st *Stage) waitRoom(ctx context.Context, sess *session) bool {
	for {
		st.mu.Lock()
		room := st.core.Room(sess.sid)
		st.mu.Unlock()
		if room > 0 {
			return true
		}
		select {
		case <-sess.room:
		case <-sess.done:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// enqueue hands a checked forward to the scheduler; false when the
// session has closed meanwhile.
func (st *Stage) enqueue(sess *session, f *wire.Forward) bool {
	st.mu.Lock()
	j, err := st.core.Arrive(st.now(), sess.sid, int(f.NTok), payloadBytes(f))
	if err == nil {
		st.jobs[j.ID] = &job{s: sess, f: f, at: time.Now(), ntok: int(f.NTok)}
	}
	st.mu.Unlock()
	if err != nil {
		// Closed (ErrUnknownSession); out of credit cannot happen, as the
		// reader waited for room.
		return false
	}
	signal(st.kick)
	return true
}

// refund gives back the credit of a forward that was read but refused.
func (st *Stage) refund(sess *session) {
	st.mu.Lock()
	sess.owed++
	st.mu.Unlock()
	signal(sess.credit)
}

// payloadBytes is what a queued forward holds beyond its fixed fields: no
// more than its frame's length.
func payloadBytes(f *wire.Forward) int {
	n := len(f.Data) + 8*len(f.Partial) + 8*len(f.Uniform) + 9*len(f.Trace) + 4*len(f.Tree)
	if f.Walk != nil {
		n += 4 * len(f.Walk.IDs)
	}
	return n
}

// readError classifies a failed frame read for the wire.
func readError(err error) error {
	if errors.Is(err, wire.ErrFrameTooLarge) {
		return fmt.Errorf("%w: %v", wire.ErrTooLarge, err)
	}
	if errors.Is(err, wire.ErrBadFrame) {
		return err
	}
	return fmt.Errorf("%w: %v", wire.ErrBadFrame, err)
}

// check validates a Forward's shape against the shard before it queues.
func (st *Stage) check(f *wire.Forward, open *wire.Open) error {
	c := st.model.Config()
	w := st.model.Weights()
	switch {
	case w.HasEmbed() && f.Kind != wire.KindTokens:
		return fmt.Errorf("%w: the first stage takes token ids", wire.ErrShape)
	case !w.HasEmbed() && f.Kind == wire.KindTokens:
		return fmt.Errorf("%w: stage [%d, %d) takes hidden states", wire.ErrShape, w.Start, w.End)
	case f.Kind == wire.KindHiddenF16 && len(f.Data) != 2*c.Dim*int(f.NTok):
		return fmt.Errorf("%w: %d bytes for %d fp16 rows of %d", wire.ErrShape, len(f.Data), f.NTok, c.Dim)
	case f.Kind == wire.KindHiddenF32 && len(f.Data) != 4*c.Dim*int(f.NTok):
		return fmt.Errorf("%w: %d bytes for %d fp32 rows of %d", wire.ErrShape, len(f.Data), f.NTok, c.Dim)
	case int(f.Pos)+int(f.NTok) > c.Context:
		return fmt.Errorf("%w: positions %d..%d, context %d", wire.ErrContextFull, f.Pos, int(f.Pos)+int(f.NTok)-1, c.Context)
	case f.PartialK > 0 && st.lo == 0:
		return fmt.Errorf("%w: partial results for a stage whose head starts at row 0", wire.ErrShape)
	case open.Output == wire.OutSample && len(f.Uniform) != f.Rows() && st.last:
		return fmt.Errorf("%w: sampling needs %d uniforms, got %d", wire.ErrShape, f.Rows(), len(f.Uniform))
	}
	return nil
}

// admit checks an Open, builds the chain behind this hop, and registers
// the session.
func (st *Stage) admit(ctx context.Context, o *wire.Open, up *conn) (*session, error) {
	key, err := st.openKey(o, up.s.Conn().RemotePeer())
	if err != nil {
		return nil, err
	}
	if err := st.rateLimit(o, key.from); err != nil {
		return nil, err
	}
	hop := o.Route[o.Hop]
	w := st.model.Weights()
	lo, hi := w.HeadLo, w.HeadHi
	switch {
	case o.ModelID != st.modelID:
		return nil, fmt.Errorf("%w: model %s, this node serves %s", wire.ErrWrongShard, o.ModelID, st.modelID)
	case hop.Shard != st.shard || int(hop.Start) != w.Start || int(hop.End) != w.End || int(hop.HeadLo) != lo || int(hop.HeadHi) != hi:
		return nil, fmt.Errorf("%w: asked for %s [%d, %d), this node serves %s [%d, %d)", wire.ErrWrongShard, hop.Shard, hop.Start, hop.End, st.shard, w.Start, w.End)
	case st.last != (int(o.Hop) == len(o.Route)-1):
		return nil, fmt.Errorf("%w: hop %d of %d, but this stage is last=%v", wire.ErrProtocol, o.Hop, len(o.Route), st.last)
	case o.Output == wire.OutLogits && st.last && st.lo != 0:
		return nil, fmt.Errorf("%w: full logits need a route whose head is not split", wire.ErrShape)
	}
	st.mu.Lock()
	switch {
	case st.draining:
		st.mu.Unlock()
		return nil, wire.ErrDraining
	case len(st.sessions) >= st.opts.MaxSessions:
		st.mu.Unlock()
		return nil, fmt.Errorf("%w: %d sessions", wire.ErrOverloaded, len(st.sessions))
	case st.sessions[o.Session] != nil:
		st.mu.Unlock()
		return nil, fmt.Errorf("%w: session %s exists", wire.ErrProtocol, o.Session)
	}
	if err := st.reserve(key); err != nil {
		st.mu.Unlock()
		return nil, err
	}
	st.mu.Unlock()
	// The reservation holds the peer's place until the session is
	// registered, which takes it over in the same critical section: a
	// session is never counted twice (its Opened reaches the peer before
	// this function returns).
	registered := false
	defer func() {
		if !registered {
			st.release(key)
		}
	}()

	smp, err := sample.New(sample.Params{Temp: float64(o.Temp), TopP: float64(o.TopP), TopK: int(o.TopK)})
	if o.Output != wire.OutSample {
		smp, err = sample.New(sample.Params{})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", wire.ErrProtocol, err)
	}
	s := &session{id: o.Session, open: o, req: st.model.NewRequest(), smp: smp, up: up, used: time.Now(), done: make(chan struct{}),
		room: make(chan struct{}, 1), credit: make(chan struct{}, 1)}
	// Batches are fair across clients. The first hop knows its client:
	// the stream's peer. Later hops take the Open's word for it.
	client := peer.ID(o.Client).String()
	if o.Hop == 0 {
		client = up.s.Conn().RemotePeer().String()
	}
	var relayFrom *wire.Reader

	// Build the rest of the chain: the next hop, or the client.
	dctx, cancel := context.WithTimeout(ctx, st.opts.IOTimeout)
	defer cancel()
	if st.last {
		ds, err := st.dial(dctx, o.Client, o.Addrs, wire.ResultProtocol)
		if err != nil {
			return nil, fmt.Errorf("%w: client: %v", wire.ErrNextHop, err)
		}
		s.down = &conn{s: ds, timeout: st.opts.IOTimeout}
	} else {
		next := o.Route[o.Hop+1]
		ds, err := st.dial(dctx, next.Peer, next.Addrs, wire.StageProtocol)
		if err != nil {
			return nil, fmt.Errorf("%w: hop %d: %v", wire.ErrNextHop, o.Hop+1, err)
		}
		down := &conn{s: ds, timeout: st.opts.IOTimeout}
		fwd := *o
		fwd.Hop++
		if err := down.send(&fwd); err != nil {
			ds.Reset()
			return nil, fmt.Errorf("%w: hop %d: %v", wire.ErrNextHop, o.Hop+1, err)
		}
		// Wait for the chain behind to stand.
		r := wire.NewReader(ds, st.opts.MaxFrame)
		ds.SetReadDeadline(time.Now().Add(st.opts.IOTimeout))
		m, err := r.Read()
		ds.SetReadDeadline(time.Time{})
		if err != nil {
			ds.Reset()
			return nil, fmt.Errorf("%w: hop %d: %v", wire.ErrNextHop, o.Hop+1, err)
		}
		if e, ok := m.(*wire.Error); ok {
			ds.Close()
			return nil, e // keeps the failing hop's number and code
		}
		if _, ok := m.(*wire.Opened); !ok {
			ds.Reset()
			return nil, fmt.Errorf("%w: hop %d answered open with %v", wire.ErrProtocol, o.Hop+1, m.Type())
		}
		s.down = down
		relayFrom = r
	}
	st.mu.Lock()
	st.nextSID++
	s.sid = st.nextSID
	st.core.Open(s.sid, client, !st.last) // cannot fail: a fresh number
	st.sessions[s.id] = s
	st.releaseLocked(key)
	registered = true
	st.mu.Unlock()
	if relayFrom != nil {
		go st.relay(s, relayFrom) // now that the scheduler knows the session its credit is for
	}
	go st.credits(s)
	st.statsMu.Lock()
	st.stats.SessionsOpened++
	st.statsMu.Unlock()
	if err := up.send(&wire.Opened{Session: s.id, Hop: o.Hop}); err != nil {
		st.drop(s, nil)
		return nil, err
	}
	if err := up.send(&wire.Credit{Session: s.id, N: uint32(st.opts.Credit)}); err != nil {
		st.drop(s, nil)
		return nil, err
	}
	return s, nil
}

// credits sends upstream the credit the session is owed, as forwards
// leave, until the session ends. A write that blocks (an upstream that
// does not read) holds up only this session.
func (st *Stage) credits(s *session) {
	for {
		select {
		case <-s.credit:
		case <-s.done:
			return
		}
		st.mu.Lock()
		n := s.owed
		s.owed = 0
		st.mu.Unlock()
		if n > 0 {
			if err := s.up.send(&wire.Credit{Session: s.id, N: uint32(n)}); err != nil {
				return // the upstream is gone: its reader ends the session
			}
		}
	}
}

// relay passes what comes back from the next hop on: errors upstream,
// its credit to the scheduler.
func (st *Stage) relay(s *session, r *wire.Reader) {
	for {
		m, err := r.Read()
		if err != nil {
			select {
			case <-s.done:
			default:
				st.drop(s, fmt.Errorf("%w: hop %d: %v", wire.ErrNextHop, s.open.Hop+1, err))
			}
			return
		}
		switch m := m.(type) {
		case *wire.Error:
			s.up.send(m)
		case *wire.Credit:
			if m.Session != s.id {
				continue
			}
			st.mu.Lock()
			st.core.Grant(s.sid, int(m.N))
			st.mu.Unlock()
			signal(st.kick)
		}
	}
}

// drop forgets a session, telling upstream why when err is set.
func (st *Stage) drop(s *session, err error) {
	s.close.Do(func() {
		close(s.done)
		st.mu.Lock()
		delete(st.sessions, s.id)
		admitted := s.sid != 0
		if admitted {
			for _, j := range st.core.Close(s.sid) {
				delete(st.jobs, j.ID) // waiting forwards will not run
			}
		}
		st.mu.Unlock()
		if o := st.opts.Observer; o != nil && admitted {
			o.SessionEnded(endReason(err))
		}
		if err != nil {
			st.fail(s.up, s.id, 0, s.open.Hop, err)
		}
		if s.down != nil {
			if !st.last {
				s.down.send(&wire.Close{Session: s.id})
			}
			s.down.s.Close()
		}
		s.up.s.Close()
	})
}

// endReason names why a session ended, for StageObserver.SessionEnded.
func endReason(err error) string {
	switch {
	case err == nil:
		return "closed"
	case errors.Is(err, wire.ErrIdle):
		return "idle"
	case errors.Is(err, wire.ErrEvicted):
		return "evicted"
	}
	return "error"
}

func (st *Stage) dial(ctx context.Context, id []byte, addrs []string, proto string) (network.Stream, error) {
	p, err := peer.IDFromBytes(id)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			st.h.Peerstore().AddAddr(p, m, peerstore.TempAddrTTL)
		}
	}
	// A handshake that fails once (two hosts dialing each other at the
	// same moment, a busy peer) leaves the peer in the dial backoff, where
	// every retry fails at once without trying: clear it and try again.
	var s network.Stream
	for attempt := range 3 {
		if s, err = st.h.NewStream(ctx, p, protocolID(proto)); err == nil || ctx.Err() != nil {
			break
		}
		if b, ok := st.h.Network().(interface{ Backoff() *lpswarm.DialBackoff }); ok {
			b.Backoff().Clear(p)
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt+1) * 50 * time.Millisecond):
		}
	}
	return s, err
}

// janitor closes idle sessions and evicts the least recently used past
// the KV budget.
func (st *Stage) janitor(ctx context.Context) {
	t := time.NewTicker(max(st.opts.IdleTimeout/10, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		st.mu.Lock()
		var all []*session
		var kv int64
		for _, s := range st.sessions {
			all = append(all, s)
			kv += s.req.KVBytes()
		}
		st.mu.Unlock()
		slices.SortFunc(all, func(a, b *session) int { return a.lastUsed().Compare(b.lastUsed()) })
		for _, s := range all {
			switch {
			case now.Sub(s.lastUsed()) > st.opts.IdleTimeout:
				kv -= s.req.KVBytes()
				st.drop(s, wire.ErrIdle)
			case kv > st.opts.MaxKVBytes:
				kv -= s.req.KVBytes()
				st.drop(s, wire.ErrEvicted)
			}
		}
	}
}

func (s *session) lastUsed() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// execute runs what the scheduler decides until ctx ends: a batch as one
// ovrt call, whose results it sends on and whose credit it returns; or,
// for a gathering window, a wait for the window's end or the next input.
func (st *Stage) execute(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		st.mu.Lock()
		st.core.SetMaxBatch(st.batchCap())
		rd := st.core.Next(st.now())
		batch := make([]*job, 0, len(rd.Batch))
		for _, sj := range rd.Batch {
			batch = append(batch, st.jobs[sj.ID])
			delete(st.jobs, sj.ID)
		}
		st.mu.Unlock()
		if len(batch) > 0 {
			compute := st.runBatch(batch)
			st.mu.Lock()
			for _, c := range st.core.Done(st.now(), compute) {
				for _, j := range batch {
					if j.s.sid == c.Session {
						j.s.owed += c.N
						signal(j.s.credit)
						signal(j.s.room)
						break
					}
				}
			}
			st.mu.Unlock()
			// The batch's outputs and credits are only queued: the
			// stream multiplexer (yamux) writes them from its own
			// goroutine. On a node with one P (GOMAXPROCS=1) a batch that
			// starts right away would keep them off the wire until the
			// runtime preempts it, 10 ms later, while the next stage idles
			// waiting for them (2 streams on 2 stages lost ~10 ms a hop).
			// Let the writers run first.
			runtime.Gosched()
			continue
		}
		var wake <-chan time.Time
		if rd.Wait > 0 {
			timer.Reset(rd.Wait)
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-st.kick:
			// A reader's forward woke us; other readers may be runnable
			// with forwards of their own, already arrived. Let them enqueue
			// first: on a node with one P (GOMAXPROCS=1) the woken executor
			// runs next and would otherwise take one forward at a time,
			// leaving the rest unread in the socket buffers while it
			// computes.
			runtime.Gosched()
		case <-wake:
		}
		timer.Stop()
	}
}

// batchCap is the most forwards one batch should take: the open sessions
// over the hops of their routes (the shortest), rounded up. Sessions in a
// tight loop around a route of S stages pipeline best as S groups, one at
// each stage; a stage that batched every waiting forward would gather
// them into one convoy that then travels together, every other stage idle
// while one computes (2 streams on 2 stages ran at 1.44× one stream, not
// 2×). 0 (no cap) on a one-hop route. Called with st.mu held.
func (st *Stage) batchCap() int {
	hops := 0
	for _, s := range st.sessions {
		if h := len(s.open.Route); hops == 0 || h < hops {
			hops = h
		}
	}
	if hops <= 1 {
		return 0
	}
	return (len(st.sessions) + hops - 1) / hops
}

// runBatch runs one batch, at most one forward per session, and sends
// each result on. It returns the time of the ovrt call.
func (st *Stage) runBatch(batch []*job) time.Duration {
	c := st.model.Config()
	start := time.Now()
	steps := make([]ovrt.Step, 0, len(batch))
	live := make([]*job, 0, len(batch))
	for _, j := range batch {
		select {
		case <-j.s.done:
			continue // closed while queued
		default:
		}
		step := ovrt.Step{Req: j.s.req, Pos: int(j.f.Pos), Want: ovrt.WantLast, Tree: j.f.Tree}
		if j.f.All {
			step.Want = ovrt.WantAll
		}
		if st.walks(j) {
			step.Want = ovrt.WantDeferred
		}
		switch j.f.Kind {
		case wire.KindTokens:
			step.Tokens = j.f.Tokens()
		case wire.KindHiddenF16:
			step.Hidden = make([]float32, int(j.f.NTok)*c.Dim)
			ovrt.DecodeF16(step.Hidden, j.f.Data)
		case wire.KindHiddenF32:
			step.Hidden = make([]float32, int(j.f.NTok)*c.Dim)
			for i := range step.Hidden {
				step.Hidden[i] = math.Float32frombits(binary.LittleEndian.Uint32(j.f.Data[4*i:]))
			}
		}
		steps = append(steps, step)
		live = append(live, j)
	}
	t0 := time.Now()
	res := st.model.Forward(steps)
	var walks, walkRows, walkOf int64
	for i, j := range live {
		if res[i].Err == nil && steps[i].Want == ovrt.WantDeferred {
			j.walked, res[i].Err = st.walk(j)
			walks++
			walkOf += int64(len(j.walked))
			for _, id := range j.walked {
				if id != wire.NoID {
					walkRows++
				}
			}
		}
	}
	compute := time.Since(t0)
	ntok := 0
	for i, j := range live {
		ntok += j.ntok
		timing := wire.Timing{Hop: j.s.open.Hop, Queue: uint32(t0.Sub(j.at).Microseconds()), Compute: uint32(compute.Microseconds())}
		if res[i].Err != nil {
			st.fail(j.s.up, j.s.id, j.f.Seq, j.s.open.Hop, stageError(res[i].Err))
			continue
		}
		if err := st.emit(j, res[i], timing); err != nil {
			st.drop(j.s, fmt.Errorf("%w: %v", wire.ErrNextHop, err))
		}
	}
	st.statsMu.Lock()
	if len(live) == 1 && ntok == 1 {
		us := float64(compute.Microseconds())
		if st.stats.DecodeMicros == 0 {
			st.stats.DecodeMicros = us
		} else {
			st.stats.DecodeMicros += 0.1 * (us - st.stats.DecodeMicros)
		}
	}
	st.stats.Walks += walks
	st.stats.WalkRows += walkRows
	st.stats.WalkOf += walkOf
	st.stats.Forwards += int64(len(live))
	st.stats.Tokens += int64(ntok)
	if len(live) > 0 {
		st.stats.Batches++
	}
	st.stats.ComputeNanos += time.Since(start).Nanoseconds()
	st.statsMu.Unlock()
	if o := st.opts.Observer; o != nil && len(live) > 0 {
		o.Batch(len(live), ntok, compute)
	}
	return compute
}

// stageError maps a runtime error to its wire sentinel.
func stageError(err error) error {
	var code error
	switch {
	case errors.Is(err, ovrt.ErrPosition):
		code = wire.ErrPosition
	case errors.Is(err, ovrt.ErrContextFull):
		code = wire.ErrContextFull
	case errors.Is(err, ovrt.ErrTokenRange):
		code = wire.ErrTokenRange
	case errors.Is(err, ovrt.ErrBadInput):
		code = wire.ErrShape
	default:
		code = wire.ErrInternal
	}
	return fmt.Errorf("%w: %v", code, err)
}

// emit sends one job's output on: to the next hop, or to the client.
func (st *Stage) emit(j *job, r ovrt.Result, t wire.Timing) error {
	o := j.s.open
	f := j.f
	trace := append(slices.Clone(f.Trace), t)
	rows := f.Rows()
	if st.opts.Tamper != nil {
		st.tamper(f, r)
	}
	if !st.last {
		next := &wire.Forward{Session: f.Session, Seq: f.Seq, Pos: f.Pos, NTok: f.NTok, All: f.All,
			Uniform: f.Uniform, Trace: trace, Tree: f.Tree, Walk: f.Walk}
		if o.DType == wire.F16 {
			next.Kind = wire.KindHiddenF16
			next.Data = make([]byte, 2*len(r.Hidden))
			ovrt.EncodeF16(next.Data, r.Hidden)
		} else {
			next.Kind = wire.KindHiddenF32
			next.Data = make([]byte, 4*len(r.Hidden))
			for i, v := range r.Hidden {
				binary.LittleEndian.PutUint32(next.Data[4*i:], math.Float32bits(v))
			}
		}
		if st.hi > st.lo { // a head part: pass on this part's candidates
			width := st.hi - st.lo
			k := partialK(o)
			if o.Output == wire.OutSample {
				// Sampling needs every logit: pass all of them on.
				k = int(f.PartialK) + width
			}
			next.PartialK = uint16(k)
			for row := range rows {
				var in []wire.Cand
				if f.PartialK > 0 {
					in = f.Partial[row*int(f.PartialK) : (row+1)*int(f.PartialK)]
				}
				if o.Output == wire.OutSample {
					next.Partial = append(next.Partial, in...)
					for i, v := range r.Logits[row*width : (row+1)*width] {
						next.Partial = append(next.Partial, wire.Cand{ID: uint32(st.lo + i), Logit: v})
					}
					continue
				}
				cands := topCands(r.Logits[row*width:(row+1)*width], st.lo, k)
				if in != nil {
					cands = mergeCands(cands, in, k)
				}
				next.Partial = append(next.Partial, cands...)
			}
		}
		return j.s.down.send(next)
	}
	res := &wire.Result{Session: f.Session, Seq: f.Seq, Pos: f.Pos, Rows: uint32(rows), Trace: trace}
	width := st.hi - st.lo
	if j.walked != nil {
		res.Kind, res.IDs = wire.ResultIDs, j.walked
		return j.s.down.send(res)
	}
	switch o.Output {
	case wire.OutTopK:
		k := int(o.TopK)
		res.Kind, res.K = wire.ResultTopK, o.TopK
		for row := range rows {
			cands := topCands(r.Logits[row*width:(row+1)*width], st.lo, k)
			if f.PartialK > 0 {
				cands = mergeCands(cands, f.Partial[row*int(f.PartialK):(row+1)*int(f.PartialK)], k)
			}
			res.Cands = append(res.Cands, cands...)
		}
	case wire.OutArgmax, wire.OutSample:
		res.Kind = wire.ResultIDs
		var full []float32
		for row := range rows {
			res.IDs = append(res.IDs, st.choose(j, row, r.Logits[row*width:(row+1)*width], &full))
		}
	case wire.OutLogits:
		res.Kind = wire.ResultLogits
		res.Logits = slices.Clone(r.Logits)
	}
	return j.s.down.send(res)
}

// walks reports whether the job's output rows are computed along its
// walk only (wire.Walk): on the last hop, when the client wants ids
// (argmax or sampled), not logits or top-k. A last hop holding only the
// end of a split head walks too: the earlier parts computed their rows
// for every node and sent each row's candidates (Partial), which the walk
// merges with this part's rows as emit would; only this part's rows are
// spared off the walk.
func (st *Stage) walks(j *job) bool {
	o := j.s.open.Output
	if j.f.Walk == nil || !st.last || st.hi != st.model.Config().Vocab || st.opts.Tamper != nil {
		return false
	}
	switch o {
	case wire.OutArgmax:
		return (st.lo == 0) == (j.f.PartialK == 0)
	case wire.OutSample:
		return int(j.f.PartialK) == st.lo // every earlier logit came
	}
	return false
}

// walk computes the head's rows along the job's walk, after its deferred
// forward, and returns each row's id, wire.NoID off the walk. A row's id
// is what emit would have sent for it.
func (st *Stage) walk(j *job) ([]uint32, error) {
	f := j.f
	ids := make([]int32, len(f.Walk.IDs))
	for i, id := range f.Walk.IDs {
		ids[i] = int32(min(id, math.MaxInt32))
	}
	var full []float32
	next, err := j.s.req.WalkHead(ids, f.Tree, int(f.Walk.From), func(row int, logits []float32) (int, error) {
		return int(st.choose(j, row, logits, &full)), nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]uint32, len(next))
	for i, id := range next {
		out[i] = wire.NoID
		if id >= 0 {
			out[i] = uint32(id)
		}
	}
	return out, nil
}

// choose returns the id a last hop answers for output row row of job j,
// given the row's logits over this part's head rows: the argmax, or a
// draw with the row's uniform, over the whole vocabulary: with a split
// head, merged with the candidates the earlier parts sent (for a draw,
// all their logits, assembled in *full, which choose allocates once).
func (st *Stage) choose(j *job, row int, logits []float32, full *[]float32) uint32 {
	f := j.f
	var in []wire.Cand
	if f.PartialK > 0 {
		in = f.Partial[row*int(f.PartialK) : (row+1)*int(f.PartialK)]
	}
	if j.s.open.Output != wire.OutSample {
		cands := topCands(logits, st.lo, 1)
		if in != nil {
			cands = mergeCands(cands, in, 1)
		}
		return cands[0].ID
	}
	if st.lo != 0 {
		if *full == nil {
			*full = make([]float32, st.model.Config().Vocab)
		}
		copy((*full)[st.lo:], logits)
		for _, cd := range in {
			(*full)[cd.ID] = cd.Logit
		}
		logits = *full
	}
	return uint32(sample.DrawWith(j.s.smp.Dist(logits), f.Uniform[row]))
}

// tamper applies StageOptions.Tamper to every output row of r (tests).
func (st *Stage) tamper(f *wire.Forward, r ovrt.Result) {
	if !st.last {
		dim := st.model.Config().Dim
		for i := range int(f.NTok) {
			st.opts.Tamper(int(f.Pos)+i, r.Hidden[i*dim:(i+1)*dim])
		}
		return
	}
	rows, width := f.Rows(), st.hi-st.lo
	for row := range rows {
		st.opts.Tamper(int(f.Pos)+int(f.NTok)-rows+row, r.Logits[row*width:(row+1)*width])
	}
}

// partialK is how many candidates a head part passes on per row when
// only the best matter (argmax, top-k).
func partialK(o *wire.Open) int {
	if o.Output == wire.OutTopK {
		return int(o.TopK)
	}
	return 1
}

// candLess orders candidates by logit, descending, then id: the order
// under which argmax ties break to the lowest id.
func candLess(a, b wire.Cand) bool {
	if a.Logit != b.Logit {
		return a.Logit > b.Logit
	}
	return a.ID < b.ID
}

// topCands returns the k best of logits, whose first entry is row base.
func topCands(logits []float32, base, k int) []wire.Cand {
	k = min(k, len(logits))
	out := make([]wire.Cand, 0, k+1)
	for i, v := range logits {
		c := wire.Cand{ID: uint32(base + i), Logit: v}
		if len(out) == k && !candLess(c, out[k-1]) {
			continue
		}
		at, _ := slices.BinarySearchFunc(out, c, func(a, b wire.Cand) int {
			if candLess(a, b) {
				return -1
			}
			return 1
		})
		out = slices.Insert(out, at, c)
		if len(out) > k {
			out = out[:k]
		}
	}
	return out
}

func mergeCands(a, b []wire.Cand, k int) []wire.Cand {
	all := append(slices.Clone(a), b...)
	slices.SortFunc(all, func(x, y wire.Cand) int {
		if candLess(x, y) {
			return -1
		}
		if candLess(y, x) {
			return 1
		}
		return 0
	})
	return all[:min(k, len(all))]
}
