package sched

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"
)

// pipeline is a deterministic discrete-event model of decode sessions
// going round a route of stages, each stage driven by a Sched: what
// sim/scale would do with it. A batch of n forwards computes for
// base + perTok·n; a hop costs hop, plus up to jitter at random; each
// session's next forward leaves the client think after its result.
type pipeline struct {
	stages            []*Sched
	base, perTok, hop time.Duration
	jitter, think     time.Duration
	r                 *rand.Rand
	// shared: the stages share one processor (as on a small machine that
	// runs the whole route): a batch starts computing only when the
	// processor is free.
	shared  bool
	cpuFree time.Duration
	// thinkMean, if set, draws each think time from an exponential
	// distribution of this mean: independent users rather than a tight
	// loop.
	thinkMean time.Duration

	now     time.Duration
	events  eventQueue
	seq     int
	busy    []bool
	running [][]Job
	took    []time.Duration // the wall time of each stage's running batch
	wake    []time.Duration // a pending wake-up per stage (0: none)
	tokens  int
	batches int
	fwds    int
}

type event struct {
	at    time.Duration
	seq   int
	kind  int // 0 arrival, 1 batch done, 2 wake
	stage int
	sess  SessionID
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (p *pipeline) at(d time.Duration, e event) {
	p.seq++
	e.at, e.seq = p.now+d, p.seq
	heap.Push(&p.events, e)
}

func (p *pipeline) delay() time.Duration {
	return p.hop + time.Duration(p.r.Int64N(int64(p.jitter)+1))
}

// decide asks stage i what to do now.
func (p *pipeline) decide(i int) {
	if p.busy[i] {
		return
	}
	rd := p.stages[i].Next(p.now)
	switch {
	case len(rd.Batch) > 0:
		p.busy[i] = true
		p.running[i] = rd.Batch
		p.batches++
		p.fwds += len(rd.Batch)
		cost := p.base + p.perTok*time.Duration(len(rd.Batch))
		if p.shared {
			end := max(p.now, p.cpuFree) + cost
			p.cpuFree = end
			cost = end - p.now
		}
		p.took[i] = cost
		p.at(cost, event{kind: 1, stage: i})
	case rd.Wait > 0:
		if w := p.now + rd.Wait; p.wake[i] == 0 || w < p.wake[i] {
			p.wake[i] = w
			p.at(rd.Wait, event{kind: 2, stage: i})
		}
	}
}

// run starts sessions decoding and runs for d; it returns tokens per
// second and forwards per batch.
func (p *pipeline) run(t *testing.T, sessions int, d time.Duration) (float64, float64) {
	t.Helper()
	p.busy = make([]bool, len(p.stages))
	p.running = make([][]Job, len(p.stages))
	p.took = make([]time.Duration, len(p.stages))
	p.wake = make([]time.Duration, len(p.stages))
	for id := range SessionID(sessions) {
		for i, s := range p.stages {
			if err := s.Open(id+1, "c", i < len(p.stages)-1); err != nil {
				t.Fatal(err)
			}
			if i < len(p.stages)-1 {
				s.Grant(id+1, 1<<20)
			}
		}
		p.at(time.Duration(p.r.Int64N(int64(p.base))), event{kind: 0, stage: 0, sess: id + 1})
	}
	for p.events.Len() > 0 {
		e := heap.Pop(&p.events).(event)
		if e.at > d {
			break
		}
		p.now = e.at
		switch e.kind {
		case 0:
			if _, err := p.stages[e.stage].Arrive(p.now, e.sess, 1, 4); err != nil {
				t.Fatal(err)
			}
			p.decide(e.stage)
		case 1:
			p.busy[e.stage] = false
			p.stages[e.stage].Done(p.now, p.took[e.stage]) // wall time, as the node measures it
			for _, j := range p.running[e.stage] {
				if next := e.stage + 1; next < len(p.stages) {
					p.at(p.delay(), event{kind: 0, stage: next, sess: j.Session})
				} else {
					p.tokens++
					think := p.think
					if p.thinkMean > 0 {
						think = time.Duration(p.r.ExpFloat64() * float64(p.thinkMean))
					}
					p.at(p.delay()+think+p.delay(), event{kind: 0, stage: 0, sess: j.Session})
				}
			}
			p.decide(e.stage)
		case 2:
			if p.wake[e.stage] == p.now {
				p.wake[e.stage] = 0
			}
			p.decide(e.stage)
		}
	}
	return float64(p.tokens) / d.Seconds(), float64(p.fwds) / float64(max(p.batches, 1))
}

func newPipeline(t *testing.T, stages int, seed uint64) *pipeline {
	t.Helper()
	p := &pipeline{base: 2 * time.Millisecond, perTok: 100 * time.Microsecond, hop: 300 * time.Microsecond,
		jitter: 400 * time.Microsecond, think: 100 * time.Microsecond, r: rand.New(rand.NewPCG(seed, 7))}
	for range stages {
		s, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		p.stages = append(p.stages, s)
	}
	return p
}

func newPipelineWith(t *testing.T, stages int, seed uint64, cfg Config) *pipeline {
	t.Helper()
	p := newPipeline(t, stages, seed)
	for i := range p.stages {
		s, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		p.stages[i] = s
	}
	return p
}

// TestRouteModel drives a 2-stage route of decode sessions in virtual
// time, each stage by a Sched, with and without the gathering window:
// sessions in a tight loop (each sends its next token as soon as its
// result is back) or independent users (think times drawn at random,
// 20 ms on average); stages on their own processors, or sharing one (a
// small machine running the whole route). Deterministic for the seed.
//
// What the window buys is small, and so is what it can cost: in a tight
// loop it fills batches a little more but, when the route is latency-
// bound, costs a few per cent of throughput (a wait that no rider
// rewards: 3-5% here); with independent users it fills batches and gains
// up to 2%.
// The bounds below hold those findings.
func TestRouteModel(t *testing.T) {
	tests := []struct {
		name      string
		shared    bool
		thinkMean time.Duration
		sessions  int
		minRatio  float64 // tokens/s with the window ÷ without, at least
		minFill   float64 // forwards per batch with the window, at least
	}{
		{"loop/own processors/1", false, 0, 1, 1, 1},
		{"loop/own processors/4", false, 0, 4, 0.95, 1.3},
		{"loop/own processors/8", false, 0, 8, 0.93, 2.5},
		{"loop/shared processor/4", true, 0, 4, 1, 1.99},
		{"loop/shared processor/8", true, 0, 8, 1, 3.99},
		{"users/own processors/32", false, 20 * time.Millisecond, 32, 0.99, 2.7},
		{"users/own processors/64", false, 20 * time.Millisecond, 64, 1, 5.8},
		{"users/shared processor/64", true, 20 * time.Millisecond, 64, 1, 9.8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(cfg Config) (float64, float64) {
				p := newPipelineWith(t, 2, 1, cfg)
				p.shared, p.thinkMean = tt.shared, tt.thinkMean
				return p.run(t, tt.sessions, 10*time.Second)
			}
			rate, fill := run(Config{})
			rate0, fill0 := run(Config{MaxWindow: 1}) // a window of 1 ns: none
			t.Logf("%.0f tok/s at %.2f forwards per batch; without the window %.0f tok/s at %.2f (ratio %.3f)",
				rate, fill, rate0, fill0, rate/rate0)
			if rate < tt.minRatio*rate0 || fill < tt.minFill {
				t.Fatalf("%.0f tok/s (%.3f of %.0f without the window), %.2f forwards per batch; want a ratio >= %v and >= %v forwards",
					rate, rate/rate0, rate0, fill, tt.minRatio, tt.minFill)
			}
		})
	}
}
