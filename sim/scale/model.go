package scale

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/pipeshard/pipeshard/internal/route"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

// model is the served model as the simulator prices it: the cost model
// of shards, and the stages the layouts define.
type model struct {
	conf   ovrt.Config
	rm     route.Model
	costs  shards.Costs
	hidden float64 // bytes of one token's hidden state on a link
	// stages are the distinct stages of every layout, largest shard
	// first (then by start): the order of preference route.Choose's ties
	// go by, so that a node serves as much as it can hold when that
	// helps as much as serving less.
	stages []stage
	// layout is how many of stages the layouts define; any after them
	// are scripted nodes' own.
	layout int
	// kvRead is the KV bytes CostsOf counts per layer and token;
	// kvReserve what the node keeps per layer for one full-context
	// float32 cache.
	kvRead, kvReserve float64
}

// stage is one shard a node may serve, and what a forward pass over it
// costs.
type stage struct {
	shards.Stage
	rng route.Range
	// weightBytes are streamed once per forward pass whatever the batch;
	// kvBytes once per sequence in it (the attention reads of the
	// sequence's cache, at shards.AvgContext); macs once per token.
	weightBytes, kvBytes, macs float64
	// memory is what a node needs to serve it: the shard's bytes (the
	// whole embedding table on the first stage) and room for one
	// full-context KV cache, as the real node reserves.
	memory float64
}

// service is the roofline time of one forward pass of tokens tokens
// from seqs sequences on a node of profile p, in seconds:
// max(bytes/bandwidth, MACs/throughput), where the weights are read once
// for the whole batch. One token of one sequence costs exactly
// p.Seconds(costs.Work(stage)).
func (s *stage) service(p shards.Profile, tokens, seqs int) float64 {
	return max((s.weightBytes+s.kvBytes*float64(seqs))/p.BytesPerSec, s.macs*float64(tokens)/p.MACsPerSec)
}

// newModel prices c's model and cuts it into c's layouts.
func newModel(c Config) (*model, error) {
	conf, err := shards.SynthConfig(c.Model.Shape, c.Model.Layers)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	q, err := ovrt.ParseDType(c.Model.Quant)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
	}
	head := q
	if q == ovrt.Q4_0 {
		head = ovrt.Q8_0 // as shards.Synth and ovrt.Quantize store it
	}
	m := &model{
		conf:   conf,
		rm:     route.Model{Layers: conf.Layers, Vocab: conf.Vocab},
		costs:  shards.CostsOf(conf, q, head),
		hidden: float64(conf.Dim * 4),
	}
	if c.Model.HiddenBytes > 0 {
		m.hidden = float64(c.Model.HiddenBytes)
	}
	m.kvRead = float64(2 * 4 * conf.KVDim() * shards.AvgContext(conf))
	m.kvReserve = float64(2 * 4 * conf.KVDim() * conf.Context)
	seen := map[route.Range]bool{}
	for _, n := range c.Model.Stages {
		var cut []shards.Stage
		if c.Placement == Even {
			cut, err = shards.EvenSplit(conf.Layers, n)
		} else {
			cut, err = shards.BalancedSplit(m.costs, shards.DefaultProfile, n)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
		}
		for _, st := range cut {
			r, err := m.rm.Normalize(route.Range(st))
			if err != nil {
				return nil, fmt.Errorf("%w: layout of %d: %v", ErrBadConfig, n, err)
			}
			if seen[r] {
				continue
			}
			seen[r] = true
			m.stages = append(m.stages, m.price(st, r))
		}
	}
	slices.SortStableFunc(m.stages, func(a, b stage) int {
		if c := cmp.Compare(b.memory, a.memory); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.rng.Start, b.rng.Start), cmp.Compare(a.rng.HeadLo, b.rng.HeadLo))
	})
	m.layout = len(m.stages)
	return m, nil
}

func (m *model) price(st shards.Stage, r route.Range) stage {
	w := m.costs.Work(st)
	layers := float64(r.End - r.Start)
	s := stage{
		Stage:       st,
		rng:         r,
		weightBytes: float64(w.Bytes) - layers*m.kvRead,
		kvBytes:     layers * m.kvRead,
		macs:        float64(w.MACs),
	}
	s.memory = s.weightBytes + layers*m.kvReserve
	if r.Start == 0 {
		s.memory += float64(m.conf.Vocab-1) * float64(m.costs.Embed.Bytes) // the table, not just the row a token reads
	}
	return s
}

// stageOf returns the index of the stage with range r, adding it (for a
// scripted node's stage outside the layouts) if there is none.
func (m *model) stageOf(st shards.Stage) int {
	r, err := m.rm.Normalize(route.Range(st))
	if err != nil {
		panic(err) // validated
	}
	for i := range m.stages {
		if m.stages[i].rng == r {
			return i
		}
	}
	m.stages = append(m.stages, m.price(st, r))
	return len(m.stages) - 1
}
