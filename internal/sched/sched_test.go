package sched

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  error
		want Config
	}{
		{"defaults", Config{}, nil, Config{Credit: DefaultCredit, BatchTokens: DefaultBatchTokens, MaxWindow: DefaultMaxWindow}},
		{"kept", Config{Credit: 1, BatchTokens: 8, MaxWindow: time.Millisecond, Compute: time.Second}, nil, Config{Credit: 1, BatchTokens: 8, MaxWindow: time.Millisecond, Compute: time.Second}},
		{"negative credit", Config{Credit: -1}, ErrBadConfig, Config{}},
		{"huge credit", Config{Credit: maxCredit + 1}, ErrBadConfig, Config{}},
		{"negative budget", Config{BatchTokens: -1}, ErrBadConfig, Config{}},
		{"negative window", Config{MaxWindow: -1}, ErrBadConfig, Config{}},
		{"negative compute", Config{Compute: -1}, ErrBadConfig, Config{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg)
			if !errors.Is(err, tt.err) {
				t.Fatalf("New: %v, want %v", err, tt.err)
			}
			if err == nil && s.Config() != tt.want {
				t.Fatalf("config %+v, want %+v", s.Config(), tt.want)
			}
		})
	}
}

// TestWindowRule checks the gathering window's formula and its caps.
func TestWindowRule(t *testing.T) {
	const us = time.Microsecond
	tests := []struct {
		name                string
		compute, gap, quiet time.Duration // quiet: time since the last arrival
		k, tokens, free     int
		maxWindow           time.Duration
		want                time.Duration
	}{
		{"unmeasured compute", 0, 10 * us, 0, 1, 1, 3, 0, 0},
		{"rare arrivals", 1000 * us, 2000 * us, 0, 1, 1, 3, 0, 0},
		{"one arrival per forward, one ready", 1000 * us, 1000 * us, 0, 1, 1, 3, 0, 0},
		{"a few arrivals per forward", 1000 * us, 600 * us, 0, 1, 1, 3, 0, 200 * us}, // (1000-600)/2
		{"many arrivals: c/4", 1000 * us, 100 * us, 0, 1, 1, 8, 0, 250 * us},
		{"more ready, shorter wait", 1000 * us, 300 * us, 0, 2, 2, 8, 0, 200 * us}, // (1000-600)/2
		{"as many ready as expected", 1000 * us, 250 * us, 0, 4, 4, 8, 0, 0},
		{"few free sessions: free/lambda", 1000 * us, 100 * us, 0, 1, 1, 1, 0, 100 * us},
		{"nobody left to come", 1000 * us, 10 * us, 0, 5, 5, 0, 0, 0},
		{"budget full", 1000 * us, 10 * us, 0, 1, 256, 3, 0, 0},
		{"quiet spell", 1000 * us, 100 * us, 1500 * us, 1, 1, 3, 0, 0},
		{"short quiet spell", 1000 * us, 100 * us, 600 * us, 1, 1, 3, 0, 200 * us},
		{"MaxWindow", 100 * time.Millisecond, 1000 * us, 0, 1, 1, 100, 2 * time.Millisecond, 2 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(Config{MaxWindow: tt.maxWindow, Compute: tt.compute})
			if err != nil {
				t.Fatal(err)
			}
			s.gap, s.arrivals, s.lastArr = tt.gap, 10, time.Second
			got := s.windowFor(time.Second+tt.quiet, tt.k, tt.tokens, tt.free)
			if got != tt.want {
				t.Fatalf("window %v, want %v", got, tt.want)
			}
		})
	}
}

// backlogged runs batches of compute each with every session of
// sessions (client name → per-session forward sizes) keeping its credit
// full, and returns the tokens each client got.
func backlogged(t *testing.T, cfg Config, clients []string, sizes map[string][]int, batches int, compute time.Duration) map[string]int {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	owner := map[SessionID]string{}
	size := map[SessionID]int{}
	var now time.Duration
	id := SessionID(0)
	for _, c := range clients {
		for _, tok := range sizes[c] {
			id++
			if err := s.Open(id, c, false); err != nil {
				t.Fatal(err)
			}
			owner[id], size[id] = c, tok
			for s.Room(id) > 0 {
				if _, err := s.Arrive(now, id, tok, 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	got := map[string]int{}
	for range batches {
		rd := s.Next(now)
		if len(rd.Batch) == 0 {
			t.Fatalf("backlogged sessions, no batch: %+v", rd)
		}
		for _, j := range rd.Batch {
			got[owner[j.Session]] += j.Tokens
		}
		now += compute
		for _, c := range s.Done(now, compute) {
			for range c.N {
				if _, err := s.Arrive(now, c.Session, size[c.Session], 0); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	return got
}

// TestFairShare: clients that keep more queued than a batch takes get
// the same tokens per batch, whatever their sessions and forward sizes.
// Counts of service decisions, so the 20% bound of the real-network test
// is exact here.
func TestFairShare(t *testing.T) {
	tests := []struct {
		name   string
		budget int
		sizes  map[string][]int
	}{
		{"4 decoders vs 1, budget binds", 2, map[string][]int{"a": {1, 1, 1, 1}, "b": {1}}},
		{"4 chunked prefills vs 1", 256, map[string][]int{"a": {64, 64, 64, 64}, "b": {128}}},
		{"8 sessions vs 2", 64, map[string][]int{"a": {16, 16, 16, 16, 16, 16, 16, 16}, "b": {32, 32}}},
		{"three clients", 96, map[string][]int{"a": {16, 16, 16, 16}, "b": {32, 32}, "c": {32}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var clients []string
			for c := range tt.sizes {
				clients = append(clients, c)
			}
			got := backlogged(t, Config{BatchTokens: tt.budget}, sorted(clients), tt.sizes, 600, time.Millisecond)
			lo, hi := -1, 0
			for _, n := range got {
				if lo < 0 || n < lo {
					lo = n
				}
				hi = max(hi, n)
			}
			if len(got) != len(tt.sizes) || float64(hi) > 1.2*float64(lo) {
				t.Fatalf("tokens per client %v: more than 20%% apart", got)
			}
			t.Logf("tokens per client over 600 batches: %v", got)
		})
	}
}

func sorted(xs []string) []string {
	for i := range xs {
		for j := i + 1; j < len(xs); j++ {
			if xs[j] < xs[i] {
				xs[i], xs[j] = xs[j], xs[i]
			}
		}
	}
	return xs
}

// TestRandomRuns drives the scheduler with seeded random inputs and
// checks its invariants after every step: credits are never exceeded, a
// batch holds one forward per session within the budget (or one forward
// alone), forwards run in arrival order, a limited session never runs
// without credit, each forward runs or is dropped exactly once, the
// counters match, and a client with a ready forward is served within as
// many batches as there are clients.
func TestRandomRuns(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { randomRun(t, seed) })
	}
}

func randomRun(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	cfg := Config{Credit: 1 + r.IntN(4), BatchTokens: 1 + r.IntN(64), MaxWindow: time.Duration(r.IntN(3)) * time.Millisecond}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg = s.Config()
	type sess struct {
		client  string
		limited bool
		down    int
		queued  []JobID
	}
	open := map[SessionID]*sess{}
	fate := map[JobID]string{} // "queued", "ran", "dropped"
	var order []SessionID      // sessions in opening order, to pick from deterministically
	var now time.Duration
	next := SessionID(0)
	var running []Job
	starved := map[string]int{} // batches a client with a ready forward went without service
	const clients = 4           // client names; each leads at most once before a ready one does
	for step := range 3000 {
		now += time.Duration(r.IntN(300)) * time.Microsecond
		switch op := r.IntN(10); {
		case op == 0 && len(open) < 12:
			next++
			c := fmt.Sprint("c", r.IntN(clients))
			lim := r.IntN(3) == 0
			if err := s.Open(next, c, lim); err != nil {
				t.Fatal(err)
			}
			open[next] = &sess{client: c, limited: lim}
			order = append(order, next)
		case op == 1 && len(order) > 0 && r.IntN(4) == 0:
			i := r.IntN(len(order))
			id := order[i]
			order = append(order[:i], order[i+1:]...)
			for _, j := range s.Close(id) {
				if fate[j.ID] != "queued" {
					t.Fatalf("step %d: close dropped j%d, which is %s", step, j.ID, fate[j.ID])
				}
				fate[j.ID] = "dropped"
			}
			for _, j := range open[id].queued {
				if fate[j] == "queued" {
					t.Fatalf("step %d: close kept j%d", step, j)
				}
			}
			delete(open, id)
		case op <= 5 && len(order) > 0:
			id := order[r.IntN(len(order))]
			room := s.Room(id)
			j, err := s.Arrive(now, id, 1+r.IntN(40), r.IntN(1000))
			if room <= 0 {
				if !errors.Is(err, ErrNoCredit) {
					t.Fatalf("step %d: arrive without room: %v", step, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			fate[j.ID] = "queued"
			open[id].queued = append(open[id].queued, j.ID)
		case op == 6 && len(order) > 0:
			id := order[r.IntN(len(order))]
			n := r.IntN(3)
			s.Grant(id, n)
			open[id].down += n
		case op >= 7:
			if len(running) > 0 {
				credits := s.Done(now, time.Duration(1+r.IntN(2000))*time.Microsecond)
				want := 0
				for _, j := range running {
					if open[j.Session] != nil {
						want++
					}
				}
				if len(credits) != want {
					t.Fatalf("step %d: %d credits for %d finished forwards of open sessions", step, len(credits), want)
				}
				running = nil
				continue
			}
			// Who has a ready forward before the decision.
			ready := map[string]bool{}
			for _, id := range order {
				ss := open[id]
				if len(ss.queued) > 0 && (!ss.limited || ss.down > 0) {
					ready[ss.client] = true
				}
			}
			rd := s.Next(now)
			if len(rd.Batch) == 0 {
				continue
			}
			running = rd.Batch
			seen := map[SessionID]bool{}
			tokens := 0
			served := map[string]bool{}
			for _, j := range rd.Batch {
				ss := open[j.Session]
				switch {
				case ss == nil:
					t.Fatalf("step %d: j%d of closed session %d runs", step, j.ID, j.Session)
				case seen[j.Session]:
					t.Fatalf("step %d: session %d twice in a batch", step, j.Session)
				case len(ss.queued) == 0 || ss.queued[0] != j.ID:
					t.Fatalf("step %d: j%d runs out of order (queue %v)", step, j.ID, ss.queued)
				case ss.limited && ss.down <= 0:
					t.Fatalf("step %d: j%d runs without the next hop's credit", step, j.ID)
				case fate[j.ID] != "queued":
					t.Fatalf("step %d: j%d runs, but is %s", step, j.ID, fate[j.ID])
				}
				seen[j.Session] = true
				ss.queued = ss.queued[1:]
				if ss.limited {
					ss.down--
				}
				fate[j.ID] = "ran"
				tokens += j.Tokens
				served[ss.client] = true
			}
			if len(rd.Batch) > 1 && tokens > cfg.BatchTokens {
				t.Fatalf("step %d: batch of %d tokens over the budget of %d", step, tokens, cfg.BatchTokens)
			}
			for c := range starved {
				if !ready[c] {
					delete(starved, c) // the streak ends when it has nothing ready
				}
			}
			for c := range ready {
				if served[c] {
					starved[c] = 0
					continue
				}
				starved[c]++
				if starved[c] > clients {
					t.Fatalf("step %d: client %s had a ready forward for %d batches among %d clients", step, c, starved[c], clients)
				}
			}
		}
		// Counters.
		st := s.Stats()
		jobs := len(running) // a forward closed while running is held until Done
		for _, id := range order {
			jobs += len(open[id].queued)
			if room := s.Room(id); room < 0 || room > cfg.Credit {
				t.Fatalf("step %d: room %d of %d", step, room, cfg.Credit)
			}
		}
		if st.QueuedJobs != jobs {
			t.Fatalf("step %d: %d jobs counted, %d held", step, st.QueuedJobs, jobs)
		}
	}
}

// TestMaxBatch: a cap on the forwards of a batch leaves the rest for the
// next batches, in the fair order, and 0 lifts it.
func TestMaxBatch(t *testing.T) {
	s, err := New(Config{BatchTokens: 64, Credit: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := s.Open(SessionID(i+1), "c", false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Arrive(0, SessionID(i+1), 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	var sizes []int
	for _, limit := range []int{2, 2, 0} {
		s.SetMaxBatch(limit)
		rd := s.Next(time.Second)
		if len(rd.Batch) == 0 {
			t.Fatalf("no batch with %d forwards waiting", 5-sum(sizes))
		}
		sizes = append(sizes, len(rd.Batch))
		s.Done(time.Second, time.Millisecond)
	}
	if fmt.Sprint(sizes) != "[2 2 1]" {
		t.Fatalf("batches of %v, want [2 2 1]", sizes)
	}
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}
