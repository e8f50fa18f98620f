package scenario

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards"
)

// Shape is what the scenario needs to know of a model to check ranges
// and prompts: its layers, vocabulary and context.
type Shape struct {
	Layers, Vocab, Context int
}

// KnownShapes are the shapes of the models `pipeshard` knows by name, so
// that Validate can check a scenario without loading the model.
var KnownShapes = map[string]Shape{
	"stories15M": {Layers: 6, Vocab: 32000, Context: 256},
}

// parseStage reads one range, "START:END" or "START:END/ROWLO:ROWHI".
func parseStage(s string) (shards.Stage, error) {
	var st shards.Stage
	layers, head, hasHead := strings.Cut(strings.TrimSpace(s), "/")
	a, b, ok := strings.Cut(layers, ":")
	var err1, err2 error
	st.Start, err1 = strconv.Atoi(strings.TrimSpace(a))
	st.End, err2 = strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || st.Start < 0 || st.End < st.Start {
		return st, fmt.Errorf("range %q: want START:END or START:END/ROWLO:ROWHI", s)
	}
	if hasHead {
		a, b, ok := strings.Cut(head, ":")
		st.HeadLo, err1 = strconv.Atoi(strings.TrimSpace(a))
		st.HeadHi, err2 = strconv.Atoi(strings.TrimSpace(b))
		if !ok || err1 != nil || err2 != nil || st.HeadLo < 0 || st.HeadLo >= st.HeadHi {
			return st, fmt.Errorf("range %q: head rows want ROWLO:ROWHI", s)
		}
	}
	if st.Start == st.End && !hasHead {
		return st, fmt.Errorf("range %q holds nothing", s)
	}
	return st, nil
}

// checkStage checks a stage against a model's shape and writes a whole
// head as 0, 0, as the manifests do.
func checkStage(st shards.Stage, sh Shape) (shards.Stage, error) {
	switch {
	case st.End > sh.Layers:
		return st, fmt.Errorf("range %v: the model has %d layers", st, sh.Layers)
	case st.HeadHi > 0 && st.End != sh.Layers:
		return st, fmt.Errorf("range %v: only a range ending at the last layer (%d) holds head rows", st, sh.Layers)
	case st.HeadHi > sh.Vocab:
		return st, fmt.Errorf("range %v: the head has %d rows", st, sh.Vocab)
	}
	if st.HeadLo == 0 && st.HeadHi == sh.Vocab {
		st.HeadHi = 0
	}
	return st, nil
}

// nodeStages returns the stage of every node of group g, or nil for
// "auto".
func nodeStages(g Node) ([]*shards.Stage, error) {
	out := make([]*shards.Stage, g.Count)
	if strings.TrimSpace(g.Layers) == "auto" {
		return out, nil
	}
	parts := strings.Split(g.Layers, ",")
	if len(parts) != 1 && len(parts) != g.Count {
		return nil, fmt.Errorf("layers %q: %d ranges for %d nodes (give one for all, or one per node)", g.Layers, len(parts), g.Count)
	}
	for i := range out {
		st, err := parseStage(parts[min(i, len(parts)-1)])
		if err != nil {
			return nil, err
		}
		out[i] = &st
	}
	return out, nil
}

// explicitLayouts parses Model.Layouts against a shape.
func (s *Scenario) explicitLayouts(sh Shape) ([][]shards.Stage, error) {
	var out [][]shards.Stage
	for i, l := range s.Model.Layouts {
		stages, err := shards.ParseRanges(l, ovrt.Config{Layers: sh.Layers, Vocab: sh.Vocab})
		if err != nil {
			return nil, fmt.Errorf("model: layouts[%d]: %v", i, strings.TrimPrefix(err.Error(), "shards: "))
		}
		out = append(out, stages)
	}
	return out, nil
}

// Layouts returns the cuts of the model that every node's range must
// belong to, given a model of shape sh and the layouts it already has
// (e.g. Model.Stages' balanced cuts): Model.Layouts, then, for node
// ranges in none of those, chains of the nodes' ranges (and the
// layouts' stages) that cover the model. A range no chain can complete
// is an error: add a layout that holds it.
func (s *Scenario) Layouts(sh Shape, have [][]shards.Stage) ([][]shards.Stage, error) {
	out, err := s.explicitLayouts(sh)
	if err != nil {
		return nil, err
	}
	covered := map[shards.Stage]bool{}
	var pool []shards.Stage
	add := func(st shards.Stage) {
		if !slices.Contains(pool, st) {
			pool = append(pool, st)
		}
	}
	for _, l := range append(slices.Clone(have), out...) {
		for _, st := range l {
			covered[st] = true
			add(st)
		}
	}
	var left []shards.Stage
	for _, g := range s.Nodes {
		sts, err := nodeStages(g)
		if err != nil {
			return nil, fmt.Errorf("nodes %s: %v", g.Name, err)
		}
		for _, st := range sts {
			if st == nil {
				continue
			}
			c, err := checkStage(*st, sh)
			if err != nil {
				return nil, fmt.Errorf("nodes %s: %v", g.Name, err)
			}
			add(c)
			if !covered[c] && !slices.Contains(left, c) {
				left = append(left, c)
			}
		}
	}
	less := func(a, b shards.Stage) int {
		for _, d := range []int{a.Start - b.Start, a.End - b.End, a.HeadLo - b.HeadLo, a.HeadHi - b.HeadHi} {
			if d != 0 {
				return d
			}
		}
		return 0
	}
	slices.SortFunc(pool, less)
	slices.SortFunc(left, less)
	for _, target := range left {
		if covered[target] {
			continue
		}
		chain := chainThrough(target, pool, covered, sh)
		if chain == nil {
			return nil, fmt.Errorf("range %v: no chain of the scenario's ranges covers the model with it; add a layout (model.layouts) that holds it", target)
		}
		for _, st := range chain {
			covered[st] = true
		}
		out = append(out, chain)
	}
	return out, nil
}

// rows returns a stage's head rows.
func rows(st shards.Stage, sh Shape) (int, int) {
	switch {
	case st.End != sh.Layers:
		return 0, 0
	case st.HeadHi == 0:
		return 0, sh.Vocab
	}
	return st.HeadLo, st.HeadHi
}

// chainState is how far a chain covers the model: layers up to pos,
// then head rows up to row.
type chainState struct{ pos, row int }

func (c chainState) after(st shards.Stage, sh Shape) chainState {
	if st.End < sh.Layers {
		return chainState{st.End, 0}
	}
	_, hi := rows(st, sh)
	return chainState{sh.Layers, hi}
}

func (c chainState) accepts(st shards.Stage, sh Shape) bool {
	if c.pos < sh.Layers {
		lo, _ := rows(st, sh)
		return st.Start == c.pos && st.End > st.Start && lo == 0
	}
	lo, hi := rows(st, sh)
	return st.Start == sh.Layers && st.End == sh.Layers && lo == c.row && hi > lo
}

// chainThrough finds a chain of pool's stages that covers the model and
// holds target, preferring stages not yet covered.
func chainThrough(target shards.Stage, pool []shards.Stage, covered map[shards.Stage]bool, sh Shape) []shards.Stage {
	done := chainState{sh.Layers, sh.Vocab}
	entry := chainState{target.Start, 0}
	if target.Start == sh.Layers {
		entry.row, _ = rows(target, sh)
	}
	// path finds stages leading from a to b.
	path := func(a, b chainState) []shards.Stage {
		seen := map[chainState]bool{}
		var walk func(c chainState) []shards.Stage
		walk = func(c chainState) []shards.Stage {
			if c == b {
				return []shards.Stage{}
			}
			if seen[c] || c.pos > b.pos || c.pos == b.pos && c.row > b.row {
				return nil
			}
			seen[c] = true
			for _, pass := range []bool{false, true} {
				for _, st := range pool {
					if covered[st] != pass || !c.accepts(st, sh) {
						continue
					}
					if rest := walk(c.after(st, sh)); rest != nil {
						return append([]shards.Stage{st}, rest...)
					}
				}
			}
			return nil
		}
		return walk(a)
	}
	pre := path(chainState{0, 0}, entry)
	if pre == nil || !entry.accepts(target, sh) {
		return nil
	}
	post := path(entry.after(target, sh), done)
	if post == nil {
		return nil
	}
	return append(append(pre, target), post...)
}

// FormatLayout writes a layout as `shards split --ranges` reads it.
func FormatLayout(l []shards.Stage) string {
	parts := make([]string, len(l))
	for i, st := range l {
		parts[i] = st.String()
	}
	return strings.Join(parts, ",")
}
