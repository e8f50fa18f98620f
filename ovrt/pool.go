package ovrt

import "sync"

// pool runs row-partitioned work on a fixed set of goroutines. The calling
// goroutine takes the first part itself, so a pool of n threads starts n-1
// workers. Workers exit when close is called.
type pool struct {
	n     int
	tasks chan func()
	wg    sync.WaitGroup
}

func newPool(n int) *pool {
	p := &pool{n: n, tasks: make(chan func(), n)}
	tasks := p.tasks
	for i := 1; i < n; i++ {
		go func() {
			for f := range tasks {
				f()
				p.wg.Done()
			}
		}()
	}
	return p
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
	lo := chunk
	for lo < total {
		hi := min(lo+chunk, total)
		a, b := lo, hi
		p.wg.Add(1)
		p.tasks <- func() { f(a, b) }
		lo = hi
	}
	f(0, min(chunk, total))
	p.wg.Wait()
}

func (p *pool) close() {
	if p.tasks != nil {
		close(p.tasks)
		p.tasks = nil
	}
}
