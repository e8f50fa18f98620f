package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/swarm"
)

// stepTrace is one traversal of a generation as --trace writes it: one
// JSON object a line.
type stepTrace struct {
	Request int   `json:"request"` // the request's index (sim client); 0 for swarm generate
	UnixMs  int64 `json:"unix_ms"` // when the answer arrived
	Step    int   `json:"step"`    // traversals of this request before it
	Pos     int   `json:"pos"`     // position of the first row
	Rows    int   `json:"rows"`    // tokens or tree nodes sent
	Tree    bool  `json:"tree,omitempty"`
	Walk    bool  `json:"walk,omitempty"`
	// WallMs is the step from the client's send to its answer; OtherMs
	// what of it no hop accounts for as queue or compute: the links,
	// (de)serialization and the client's own scheduling.
	WallMs  float64    `json:"wall_ms"`
	OtherMs float64    `json:"other_ms"`
	Hops    []hopTrace `json:"hops"`
}

// hopTrace is one hop's share of a step, from the frames' trace.
type hopTrace struct {
	Hop       int     `json:"hop"`
	Peer      string  `json:"peer,omitempty"`
	QueueMs   float64 `json:"queue_ms"`
	ComputeMs float64 `json:"compute_ms"`
}

// traceFile appends step traces to a file; safe for concurrent use by
// the requests of one process.
type traceFile struct {
	mu  sync.Mutex
	f   *os.File
	enc *json.Encoder
	err error // the first write error
}

// openTrace opens path for appending ("" → nil: no trace).
func openTrace(path string) (*traceFile, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	return &traceFile{f: f, enc: json.NewEncoder(f)}, nil
}

func (t *traceFile) write(s *stepTrace) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.enc.Encode(s)
	}
}

// Close closes the file and reports the first write error.
func (t *traceFile) Close() error {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.f.Close()
	if t.err != nil {
		return fmt.Errorf("--trace: %w", t.err)
	}
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	return nil
}

// newStepTrace describes the step st that session s just answered, the
// step-th of request.
func newStepTrace(request, step int, st generate.Step, s *swarm.Session) *stepTrace {
	tr := &stepTrace{Request: request, UnixMs: time.Now().UnixMilli(), Step: step, Pos: st.Pos, Rows: len(st.IDs),
		Tree: st.Tree != nil, Walk: st.Walk, WallMs: ms(s.StepRTT), Hops: []hopTrace{}}
	other := s.StepRTT
	for _, h := range s.Trace {
		ht := hopTrace{Hop: int(h.Hop), QueueMs: float64(h.Queue) / 1e3, ComputeMs: float64(h.Compute) / 1e3}
		if int(h.Hop) < len(s.Route) {
			ht.Peer = s.Route[h.Hop].Peer.ID.String()
		}
		tr.Hops = append(tr.Hops, ht)
		other -= time.Duration(h.Queue)*time.Microsecond + time.Duration(h.Compute)*time.Microsecond
	}
	tr.OtherMs = ms(other)
	return tr
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }
