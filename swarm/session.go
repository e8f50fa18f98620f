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
// generate.Backend. It is not safe for concurrent use.
type Session struct {
	ID      wire.SessionID
	Route   []Hop
	stream  network.Stream
	in      chan wire.Message // results and errors from the last hop
	up      chan wire.Message // errors from the first hop's stream
	res     *results
	seq     uint64
	output  wire.Output
	timeout time.Duration
	vocab   int
	smp     *sample.Sampler

	// Trace of the last step, per hop.
	Trace []wire.Timing
	// StepRTT is the wall time of the last step.
	StepRTT time.Duration
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
}

// openSession opens a session along route from h.
func openSession(ctx context.Context, h host.Host, res *results, route []Hop, o SessionOptions) (*Session, error) {
	if len(route) == 0 {
		return nil, ErrNoRoute
	}
	if o.Timeout == 0 {
		o.Timeout = 60 * time.Second
	}
	s := &Session{Route: route, res: res, timeout: o.Timeout, vocab: o.Vocab, up: make(chan wire.Message, 4)}
	rand.Read(s.ID[:])
	open := &wire.Open{Session: s.ID, ModelID: o.ModelID, Client: []byte(h.ID()), DType: wire.F32, Output: wire.OutArgmax, MaxLen: uint32(o.MaxLen)}
	if o.F16 {
		open.DType = wire.F16
	}
	switch {
	case o.Logits:
		open.Output = wire.OutLogits
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
		return nil, fmt.Errorf("%w: hop 0 (%s): %w", ErrSession, route[0].Peer.ID.ShortString(), err)
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
	go func() {
		for {
			m, err := r.Read()
			if err != nil {
				if !errors.Is(err, io.EOF) {
					s.up <- &wire.Error{Session: s.ID, Code: wire.CodeOf(wire.ErrNextHop), Msg: "stream to hop 0: " + err.Error()}
				} else {
					s.up <- &wire.Error{Session: s.ID, Code: wire.CodeOf(wire.ErrClosed), Msg: "hop 0 closed the session"}
				}
				close(s.up)
				return
			}
			if e, ok := m.(*wire.Error); ok {
				s.up <- e
			}
		}
	}()
	return s, nil
}

// Step implements generate.Backend.
func (s *Session) Step(ctx context.Context, st generate.Step) (generate.StepResult, error) {
	s.seq++
	f := &wire.Forward{Session: s.ID, Seq: s.seq, Pos: uint32(st.Pos), All: st.All}
	f.SetTokens(st.IDs)
	if s.output == wire.OutSample {
		f.Uniform = st.Uniform
	}
	t0 := time.Now()
	s.stream.SetWriteDeadline(t0.Add(s.timeout))
	if err := wire.Write(s.stream, f); err != nil {
		return generate.StepResult{}, fmt.Errorf("%w: send to hop 0: %w", ErrSession, err)
	}
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return generate.StepResult{}, ctx.Err()
		case <-timer.C:
			return generate.StepResult{}, fmt.Errorf("%w: no result for step %d within %v", ErrSession, s.seq, s.timeout)
		case m, ok := <-s.up:
			if !ok {
				return generate.StepResult{}, fmt.Errorf("%w: hop 0 stream closed", ErrSession)
			}
			return generate.StepResult{}, fmt.Errorf("%w: %w", ErrSession, m.(*wire.Error))
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
			out.Next = append(out.Next, int(id))
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
	default:
		return out, fmt.Errorf("%w: unexpected result kind %d", ErrSession, m.Kind)
	}
	if want := len(st.IDs); st.All && len(out.Next) != want || !st.All && len(out.Next) != 1 {
		return out, fmt.Errorf("%w: %d ids for %d rows", ErrSession, len(out.Next), want)
	}
	return out, nil
}

// Close ends the session on every hop.
func (s *Session) Close() error {
	s.res.remove(s.ID)
	if s.stream == nil {
		return nil
	}
	wire.Write(s.stream, &wire.Close{Session: s.ID})
	return s.stream.Close()
}
