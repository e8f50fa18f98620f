package scale

import (
	"runtime"
	"sync"
	"time"
)

// Run plays cfg out with seed and returns what it measured. The results
// depend on cfg and seed only.
//
// progress, if not nil, is called about once per simulated minute with
// the simulated time and the wall time since Run started; it is the only
// use of the wall clock, and does not affect the results.
func Run(cfg Config, seed uint64, progress func(simTime, wall time.Duration)) (Results, error) {
	s, err := newSim(cfg, seed)
	if err != nil {
		return Results{}, err
	}
	if progress != nil {
		start := time.Now()
		s.progress = func(t time.Duration) { progress(t, time.Since(start)) }
	}
	return s.run(), nil
}

// Compare runs cfg with seed under each policy (nil: Matrix(), every
// routing × placement), one run per policy, and returns their results
// in the same order. The runs share the seed, so they see the same swarm,
// churn and clients, and each returns what Run would. They run in
// parallel, on up to GOMAXPROCS goroutines.
func Compare(cfg Config, seed uint64, policies []Policy) ([]Results, error) {
	if policies == nil {
		policies = Matrix()
	}
	out := make([]Results, len(policies))
	errs := make([]error, len(policies))
	var wg sync.WaitGroup
	sem := make(chan struct{}, maxProcs())
	for i, p := range policies {
		c := cfg
		c.Routing, c.Placement = p.Routing, p.Placement
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i], errs[i] = Run(c, seed, nil)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

func maxProcs() int { return runtime.GOMAXPROCS(0) }
