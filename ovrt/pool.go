package ovrt

import (
	"runtime"
	"sync/atomic"
	"time"
)

// spinFor is how long an idle worker spins waiting for the next parallel
// region before it parks. Decoding runs dozens of regions per token with
// short gaps between them; waking a parked OS thread costs tens of
// microseconds on a virtual machine, more than a small matrix takes, while
// a spinning worker starts at once. Past spinFor (between tokens, or when
// the node is idle) workers park and cost nothing.
const spinFor = 200 * time.Microsecond

// maxSpins also ends a spin, whatever the clock says: under
// testing/synctest time stands still while goroutines run, so a spin
// bounded only by time would never end.
const maxSpins = 1 << 16

// pool runs row-partitioned work on a fixed set of goroutines. The calling
// goroutine takes the first part itself, so a pool of n threads starts n-1
// workers. Workers spin briefly between regions, then park; they exit when
// close is called. One region runs at a time (Model serializes Forward).
type pool struct {
	n      int
	gen    atomic.Uint64 // bumped to start a region
	work   func(lo, hi int)
	parts  [][2]int     // part i runs on worker i (part 0 on the caller)
	left   atomic.Int32 // parts not yet finished
	closed atomic.Bool
	ws     []*worker
}

type worker struct {
	parked atomic.Bool
	wake   chan struct{}
}

func newPool(n int) *pool {
	p := &pool{n: n}
	for i := 1; i < n; i++ {
		w := &worker{wake: make(chan struct{}, 1)}
		p.ws = append(p.ws, w)
		go p.run(i, w)
	}
	return p
}

func (p *pool) run(i int, w *worker) {
	var seen uint64 // gen starts at 0: a region may begin before this goroutine runs
	for {
		// Wait for the next region: spin, then park.
		start := time.Now()
		for spins := 0; p.gen.Load() == seen; spins++ {
			if p.closed.Load() {
				return
			}
			if spins%64 == 63 && (time.Since(start) > spinFor || spins >= maxSpins) {
				w.parked.Store(true)
				if p.gen.Load() != seen || p.closed.Load() {
					// A region started (or the pool closed) meanwhile:
					// unpark ourselves, unless the starter already did
					// and sent a wake to drain.
					if !w.parked.CompareAndSwap(true, false) {
						<-w.wake
					}
					continue
				}
				<-w.wake
				start, spins = time.Now(), 0
			}
			if spins%16 == 15 {
				runtime.Gosched()
			}
		}
		seen = p.gen.Load()
		if p.closed.Load() {
			return
		}
		if i < len(p.parts) {
			part := p.parts[i]
			if part[0] < part[1] {
				p.work(part[0], part[1])
			}
		}
		p.left.Add(-1)
	}
}

// parallel splits [0, total) into at most p.n contiguous parts whose
// starts are multiples of align, and calls f(lo, hi) for each, in parallel.
// It returns when all calls have returned.
func (p *pool) parallel(total, align int, f func(lo, hi int)) {
	parts := p.n
	if parts <= 1 || total <= align {
		f(0, total)
		return
	}
	chunk := (total + parts - 1) / parts
	chunk = (chunk + align - 1) / align * align
	p.parts = p.parts[:0]
	for i := range parts {
		lo, hi := min(i*chunk, total), min((i+1)*chunk, total)
		p.parts = append(p.parts, [2]int{lo, hi})
	}
	p.work = f
	p.left.Store(int32(parts - 1))
	p.gen.Add(1)
	for _, w := range p.ws {
		if w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
	f(p.parts[0][0], p.parts[0][1])
	for spins := 0; p.left.Load() > 0; spins++ {
		if spins%16 == 15 {
			runtime.Gosched()
		}
	}
	p.work = nil
}

func (p *pool) close() {
	if p.closed.Swap(true) {
		return
	}
	for _, w := range p.ws {
		if w.parked.CompareAndSwap(true, false) {
			w.wake <- struct{}{}
		}
	}
}
