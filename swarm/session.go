package swarm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// Sentinel errors.
var (
	ErrNoRoute  = errors.New("swarm: no route covers the model")
	ErrSession  = errors.New("swarm: session failed")
	ErrNotFound = errors.New("swarm: not found")
)

// HopError is a failure the client itself met reaching a hop of its route
// (a stream to hop 0 that would not open: the peer is gone, or not
// serving the stage protocol, as a node still starting or stopping).
// Failover routes around the hop it names.
type HopError struct {
	Hop  int
	Peer peer.ID
	Err  error
}

func (e *HopError) Error() string {
	return fmt.Sprintf("hop %d (%s): %v", e.Hop, e.Peer.ShortString(), e.Err)
}

func (e *HopError) Unwrap() error { return e.Err }

// Hop is one stage of a route: which peer serves which part of the model.
type Hop struct {
	Peer   peer.AddrInfo
	Shard  string
	Start  int
	End    int
	HeadLo int // head rows; 0, 0 = whole head when End is the last layer
	HeadHi int
	RTT    time.Duration // measured client→peer round trip, 0 if unknown
}

// results demultiplexes what last hops send back, by session.
type results struct {
	mu       sync.Mutex
	sessions map[wire.SessionID]chan wire.Message
}

func (r *results) handler(s network.Stream) {
	defer s.Close()
	rd := wire.NewReader(s, 0)
	for {
		m, err := rd.Read()
		if err != nil {
			return
		}
		var id wire.SessionID
		switch m := m.(type) {
		case *wire.Result:
			id = m.Session
		case *wire.Error:
			id = m.Session
		default:
			continue
		}
		r.mu.Lock()
		ch := r.sessions[id]
		r.mu.Unlock()
		if ch != nil {
			select {
			case ch <- m:
			default: // the session is not waiting: drop, it will time out
			}
		}
	}
}

func (r *results) add(id wire.SessionID) chan wire.Message {
	ch := make(chan wire.Message, 16)
	r.mu.Lock()
	r.sessions[id] = ch
	r.mu.Unlock()
	return ch
}

func (r *results) remove(id wire.SessionID) {
	r.mu.Lock()
	delete(r.sessions, id)
	r.mu.Unlock()
}

// Session is one sequence open along a route. It implements
// generate.Backend. One goroutine at a time may call Step; Close may be
// called from any goroutine, also during a Step. Many Sessions of one
// Client may run at once (the stages batch them).
//
// A Session honours hop 0's credit: it sends a Forward only while hop 0
// has granted room for one (a Credit message after Opened, then one
// back per forward that has run), so it never has more than hop 0's
// credit of forwards queued there, even when Steps are abandoned.
//
// Goroutines: one reader of hop 0's stream (errors and credits), which
// ends when the stream does or the Session is closed.
type Session struct {
	ID      wire.SessionID
	Route   []Hop
	stream  network.Stream
	wmu     sync.Mutex        // serializes writes to stream
	in      chan wire.Message // results and errors from the last hop
	up      chan wire.Message // errors from the first hop's stream
	res     *results
	seq     uint64
	output  wire.Output
	timeout time.Duration
	vocab   int
	smp     *sample.Sampler
	obs     Observer // nil until Client.Open returns it
	live    *live

	mu       sync.Mutex // guards credit
	credit   int        // forwards hop 0 will take now
	credited chan struct{}
	done     chan struct{} // closed by Close
	close    sync.Once

	// Trace of the last step, per hop.
	Trace []wire.Timing
	// StepRTT is the wall time of the last step.
	StepRTT time.Duration
	// Cands are the last step's candidates, K per row, best first, with
	// SessionOptions.TopK.
	Cands []wire.Cand
}

// SessionOptions configure Open.
type SessionOptions struct {
	ModelID  string
	Sampling sample.Params
	Logits   bool // ask for full logits (for --logits-out); otherwise ids
	F16      bool // hidden states as fp16 on the wire (default fp32: exact)
	MaxLen   int
	Timeout  time.Duration // per step (default 60 s)
	Vocab    int

	// TopK > 0 asks for the top K candidates of every row with their
	// logits (Session.Cands), greedy only; the chosen id is the first.
	TopK int
}

// openSession opens a session along route from h.
func openSession(ctx context.Context, h host.Host, res *results, route []Hop, o SessionOptions) (*Session, error) {
	if len(route) == 0 {
		return nil, ErrNoRoute
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	s := &Session{Route: route, res: res, timeout: o.Timeout, vocab: o.Vocab, up: make(chan wire.Message, 4),
		credited: make(chan struct{}, 1), done: make(chan struct{})}
	rand.Read(s.ID[:])
	open := &wire.Open{Session: s.ID, ModelID: o.ModelID, Client: []byte(h.ID()), DType: wire.F32, Output: wire.OutArgmax, MaxLen: uint32(o.MaxLen)}
	if o.F16 {
		open.DType = wire.F16
	}
	switch {
	case o.Logits:
		open.Output = wire.OutLogits
	case o.TopK > 0 && o.Sampling.Greedy():
		open.Output, open.TopK = wire.OutTopK, uint16(o.TopK)
	case !o.Sampling.Greedy():
		open.Output = wire.OutSample
		open.Temp, open.TopP, open.TopK = float32(o.Sampling.Temp), float32(o.Sampling.TopP), uint16(o.Sampling.TopK)
	}
	s.output = open.Output
	smp, err := sample.New(o.Sampling)
	if err != nil {
		return nil, err
	}
	s.smp = smp
	for _, a := range h.Addrs() {
		open.Addrs = append(open.Addrs, a.String())
	}
	for _, hop := range route {
		wh := wire.Hop{Peer: []byte(hop.Peer.ID), Shard: hop.Shard, Start: uint16(hop.Start), End: uint16(hop.End), HeadLo: uint32(hop.HeadLo), HeadHi: uint32(hop.HeadHi)}
		for _, a := range hop.Peer.Addrs {
			wh.Addrs = append(wh.Addrs, a.String())
		}
		open.Route = append(open.Route, wh)
	}
	h.Peerstore().AddAddrs(route[0].Peer.ID, route[0].Peer.Addrs, peerstore.TempAddrTTL)
	s.in = res.add(s.ID)
	octx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	st, err := h.NewStream(octx, route[0].Peer.ID, protocol.ID(wire.StageProtocol))
	if err != nil {
		res.remove(s.ID)
		return nil, fmt.Errorf("%w: %w", ErrSession, &HopError{Hop: 0, Peer: route[0].Peer.ID, Err: err})
	}
	s.stream = st
	if err := wire.Write(st, open); err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: open: %w", ErrSession, err)
	}
	r := wire.NewReader(st, 0)
	st.SetReadDeadline(time.Now().Add(o.Timeout))
	m, err := r.Read()
	st.SetReadDeadline(time.Time{})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("%w: open: %w", ErrSession, err)
	}
	switch m := m.(type) {
	case *wire.Opened:
	case *wire.Error:
		s.Close()
		return nil, fmt.Errorf("%w: open: %w", ErrSession, m)
	default:
		s.Close()
		return nil, fmt.Errorf("%w: open answered with %v", ErrSession, m.Type())
	}
	go s.readHop0(r)
	return s, nil
}

// readHop0 reads what hop 0 sends on the session's stream after Opened:
// credits, and errors for Step to return.
func (s *Session) readHop0(r *wire.Reader) {
	report := func(e *wire.Error) bool {
		select {
		case s.up <- e:
			return true
		case <-s.done:
			return false
		}
	}
	for {
		m, err := r.Read()
		if err != nil {
			e := &wire.Error{Session: s.ID, Code: wire.CodeOf(wire.ErrClosed), Msg: "hop 0 closed the session"}
			if !errors.Is(err, io.EOF) {
				e = &wire.Error{Session: s.ID, Code: wire.CodeOf(wire.ErrNextHop), Msg: "stream to hop 0: " + err.Error()}
			}
			if report(e) {
				close(s.up)
			}
			return
		}
		switch m := m.(type) {
		case *wire.Error:
			if !report(m) {
				return
			}
		case *wire.Credit:
			if m.Session != s.ID {
				continue
			}
			s.mu.Lock()
			s.credit = min(s.credit+int(m.N), maxCredit)
			s.mu.Unlock()
			select {
			case s.credited <- struct{}{}:
			default:
			}
		}
	}
}

// maxCredit bounds the credit a Session keeps, whatever hop 0 grants.
const maxCredit = 1 << 20

// takeCredit spends one forward of hop 0's credit, if any.
func (s *Session) takeCredit() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.credit <= 0 {
		return false
	}
	s.credit--
	return true
}

// Credit returns how many more forwards hop 0 will take now.
func (s *Session) Credit() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.credit
}

// upError is what Step returns for a message from hop 0's stream.
func upError(m wire.Message, ok bool) error {
	if !ok {
		return fmt.Errorf("%w: hop 0 stream closed", ErrSession)
	}
	return fmt.Errorf("%w: %w", ErrSession, m.(*wire.Error))
}

// Trees implements generate.TreeBackend: every hop passes a forward's
// tree to its runtime.
func (s *Session) Trees() bool { return true }

// Step implements generate.Backend. It waits for hop 0's credit, sends
// the forward and waits for its result, all within the session's
// timeout.
func (s *Session) Step(ctx context.Context, st generate.Step) (generate.StepResult, error) {
	t0 := time.Now()
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	for !s.takeCredit() {
		select {
		case <-ctx.Done():
			return generate.StepResult{}, ctx.Err()
		case <-timer.C:
			return generate.StepResult{}, fmt.Errorf("%w: no credit from hop 0 within %v", ErrSession, s.timeout)
		case <-s.done:
			return generate.StepResult{}, fmt.Errorf("%w: closed", ErrSession)
		case m, ok := <-s.up:
			return generate.StepResult{}, upError(m, ok)
		case <-s.credited:
		}
	}
	s.seq++
	f := &wire.Forward{Session: s.ID, Seq: s.seq, Pos: uint32(st.Pos), All: st.All, Tree: st.Tree}
	f.SetTokens(st.IDs)
	if s.output == wire.OutSample {
		f.Uniform = st.Uniform
	}
	if st.Walk && st.All && (s.output == wire.OutArgmax || s.output == wire.OutSample) {
		f.Walk = &wire.Walk{From: uint32(st.From), IDs: make([]uint32, len(st.IDs))}
		for i, id := range st.IDs {
			f.Walk.IDs[i] = uint32(id)
		}
	}
	if err := s.write(f); err != nil {
		return generate.StepResult{}, fmt.Errorf("%w: send to hop 0: %w", ErrSession, err)
	}
	for {
		select {
		case <-ctx.Done():
			return generate.StepResult{}, ctx.Err()
		case <-timer.C:
			return generate.StepResult{}, fmt.Errorf("%w: no result for step %d within %v", ErrSession, s.seq, s.timeout)
		case <-s.done:
			return generate.StepResult{}, fmt.Errorf("%w: closed", ErrSession)
		case m, ok := <-s.up:
			return generate.StepResult{}, upError(m, ok)
		case m := <-s.in:
			switch m := m.(type) {
			case *wire.Error:
				return generate.StepResult{}, fmt.Errorf("%w: %w", ErrSession, m)
			case *wire.Result:
				if m.Seq != s.seq {
					continue // a late answer to an abandoned step
				}
				s.StepRTT = time.Since(t0)
				s.Trace = m.Trace
				if s.obs != nil {
					s.obs.Step(s.StepRTT, m.Trace)
				}
				return s.decode(m, st)
			}
		}
	}
}

func (s *Session) decode(m *wire.Result, st generate.Step) (generate.StepResult, error) {
	var out generate.StepResult
	switch m.Kind {
	case wire.ResultIDs:
		for _, id := range m.IDs {
			switch {
			case id == wire.NoID && st.Walk:
				out.Next = append(out.Next, -1) // off the walk
			case s.vocab > 0 && id >= uint32(s.vocab):
				return out, fmt.Errorf("%w: token %d in a result, vocabulary %d", ErrSession, id, s.vocab)
			default:
				out.Next = append(out.Next, int(id))
			}
		}
	case wire.ResultLogits:
		rows := int(m.Rows)
		if rows == 0 || len(m.Logits)%rows != 0 {
			return out, fmt.Errorf("%w: %d logits for %d rows", ErrSession, len(m.Logits), rows)
		}
		v := len(m.Logits) / rows
		for r := range rows {
			u := 0.0
			if r < len(st.Uniform) {
				u = st.Uniform[r]
			}
			out.Next = append(out.Next, generate.Choose(s.smp, m.Logits[r*v:(r+1)*v], u))
		}
		if st.Logits {
			out.Logits = m.Logits
		}
	case wire.ResultTopK:
		k := int(m.K)
		if k == 0 || len(m.Cands) != int(m.Rows)*k {
			return out, fmt.Errorf("%w: %d candidates for %d rows of %d", ErrSession, len(m.Cands), m.Rows, k)
		}
		for r := range int(m.Rows) {
			out.Next = append(out.Next, int(m.Cands[r*k].ID))
		}
		s.Cands = m.Cands
	default:
		return out, fmt.Errorf("%w: unexpected result kind %d", ErrSession, m.Kind)
	}
	if want := len(st.IDs); st.All && len(out.Next) != want || !st.All && len(out.Next) != 1 {
		return out, fmt.Errorf("%w: %d ids for %d rows", ErrSession, len(out.Next), want)
	}
	for _, h := range m.Trace {
		out.Compute += time.Duration(h.Compute) * time.Microsecond
	}
	return out, nil
}

// write sends m to hop 0 within the session's timeout.
func (s *Session) write(m wire.Message) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.stream.SetWriteDeadline(time.Now().Add(s.timeout))
	return wire.Write(s.stream, m)
}

// Close ends the session on every hop. Later calls do nothing.
func (s *Session) Close() error {
	var err error
	s.close.Do(func() {
		close(s.done)
		s.res.remove(s.ID)
		if s.live != nil {
			s.live.remove(s.ID)
			s.obs.SessionClosed()
		}
		if s.stream == nil {
			return
		}
		s.write(&wire.Close{Session: s.ID})
		err = s.stream.Close()
	})
	return err
}
