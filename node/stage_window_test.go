package node

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/pipeshard/pipeshard/internal/sched"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/wire"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// memStream is a stream that keeps what is written to it.
type memStream struct {
	network.Stream // nil: only the methods below are called
	mu             sync.Mutex
	buf            bytes.Buffer
}

func (m *memStream) Write(b []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.Write(b)
}
func (m *memStream) SetWriteDeadline(time.Time) error { return nil }
func (m *memStream) Close() error                     { return nil }
func (m *memStream) Reset() error                     { return nil }

// results decodes the Results written so far.
func (m *memStream) results(t *testing.T) []*wire.Result {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	r := wire.NewReader(bytes.NewReader(m.buf.Bytes()), 0)
	var out []*wire.Result
	for {
		msg, err := r.Read()
		if err != nil {
			return out
		}
		if res, ok := msg.(*wire.Result); ok {
			out = append(out, res)
		}
	}
}

// TestExecutorWindow runs the stage's executor in a synctest bubble: the
// gathering window's timer fires at exactly the time internal/sched
// decides, and a rider that arrives within it runs in the same batch.
func TestExecutorWindow(t *testing.T) {
	path, _ := testmodel.Stories15M(t)
	w, err := checkpoint.LoadLlama2C(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	// One thread: Forward runs on the calling goroutine, inside the bubble.
	model, err := ovrt.Compile(w, ovrt.WithThreads(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(model.Close)
	synctest.Test(t, func(t *testing.T) {
		st := NewStage(nil, model, "model", "shard", StageOptions{}, nil)
		// In the bubble a forward takes no time: start from an estimate.
		st.core, _ = sched.New(sched.Config{Compute: 4 * time.Millisecond})
		downs := map[byte]*memStream{}
		sessions := map[byte]*session{}
		for _, id := range []byte{1, 2, 3} {
			smp, _ := sample.New(sample.Params{})
			downs[id] = &memStream{}
			s := &session{id: wire.SessionID{id}, open: &wire.Open{Output: wire.OutArgmax}, req: model.NewRequest(), smp: smp,
				up: &conn{s: &memStream{}}, down: &conn{s: downs[id]}, done: make(chan struct{}),
				room: make(chan struct{}, 1), credit: make(chan struct{}, 1)}
			st.mu.Lock()
			st.nextSID++
			s.sid = st.nextSID
			st.core.Open(s.sid, "client", false)
			st.sessions[s.id] = s
			st.mu.Unlock()
			sessions[id] = s
		}
		send := func(id byte) {
			f := &wire.Forward{Session: wire.SessionID{id}, Seq: 1}
			f.SetTokens([]int32{1})
			if !st.enqueue(sessions[id], f) {
				t.Fatalf("session %d refused", id)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer synctest.Wait()
		defer cancel()
		go st.execute(ctx)

		// A first forward, with no arrival history, runs at once.
		send(1)
		synctest.Wait()
		// 100 µs later another: the gap (100 µs) is short beside a 4 ms
		// forward, so the stage waits min(c/4, free/λ) = 200 µs for riders.
		time.Sleep(100 * time.Microsecond)
		send(2)
		synctest.Wait()
		if got := st.Snapshot(); got.Batches != 1 || got.WindowMicros != 200 {
			t.Fatalf("after the second forward: %d batches, window %v µs; want 1 and a 200 µs window", got.Batches, got.WindowMicros)
		}
		// A rider 50 µs later shortens the window to 93.75 µs (k = 2, one
		// free session, gap 93.75 µs) from the second forward's arrival.
		time.Sleep(50 * time.Microsecond)
		send(3)
		synctest.Wait()
		if got := st.Snapshot().Batches; got != 1 {
			t.Fatalf("the window closed early: %d batches", got)
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		got := st.Snapshot()
		if got.Batches != 2 || got.Forwards != 3 || got.QueuedJobs != 0 {
			t.Fatalf("%d batches of %d forwards, %d queued; want 2, 3, 0", got.Batches, got.Forwards, got.QueuedJobs)
		}
		for id, want := range map[byte]uint32{1: 0, 2: 93, 3: 43} {
			rs := downs[id].results(t)
			if len(rs) != 1 || len(rs[0].Trace) != 1 || rs[0].Trace[0].Queue != want {
				t.Fatalf("session %d: results %+v, want one queued %d µs", id, rs, want)
			}
		}
	})
}
