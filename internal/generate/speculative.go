package generate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

// ErrNoLogits is returned when a drafter's distributions must be verified
// and the backend returned no logits (a swarm session opened without
// SessionOptions.Logits).
var ErrNoLogits = errors.New("generate: the backend returns no logits, and drafts with distributions need them")

// SpecOptions control speculative decoding.
type SpecOptions struct {
	// K is the number of drafts per traversal; 0 chooses it as generation
	// goes (spec.Tuner).
	K int
	// MaxK bounds the automatic choice (0: spec.DefaultMaxK).
	MaxK int
	// Sampling is the target's settings, which verifying drafts with
	// distributions needs (it is unused for point-mass drafts).
	Sampling sample.Params
	// Prior is what the automatic choice may assume before it has
	// measured anything, and HopRTT a hop's round trip for the paper's
	// rule it falls back on; both may be zero.
	Prior  spec.Costs
	HopRTT time.Duration
	// Tree is the number of draft nodes per traversal when the drafter
	// drafts trees (spec.TreeDrafter, as NGram does) and the backend runs
	// them (TreeBackend): 0 chooses it from the measured costs when K is
	// automatic (spec.TreeBudget) and drafts chains when K is fixed; < 0
	// always drafts chains.
	Tree int
	// Streams, if set, says how many sequences the caller has in flight
	// now, this one included. They share the stages of their routes, so
	// an automatic tree budget (Tree 0) is divided among them: sixteen
	// sequences that each verified a tree sized for a lone user would
	// make the stages compute-bound.
	Streams func() int
}

// RunSpeculative generates from prompt like Run, but drafts tokens with d
// and verifies them with the target in one traversal each: the step runs
// the last emitted token and the drafts at once (All set) and the target's
// choice after every position decides what is kept. A rejected draft is
// dropped by starting the next step at its position.
//
// Greedy output is Run's, token for token, whatever K. So is sampled
// output with point-mass drafts (NGram, or a draft model's argmax): the
// row for the j-th generated token always draws with the j-th number of
// Uniforms(o.Seed), as Run's j-th step does. Drafts with distributions are
// verified by rejection sampling, with numbers from a second generator
// seeded from o.Seed: the output is distributed as Run's but is another
// sample of it.
//
// The prompt is run alone (as Run does), so the first token is never
// speculated. Stops (EOS, MaxTokens, the context) are Run's: no token is
// emitted after them even when more were accepted, and drafts are never
// asked for past them.
func RunSpeculative(ctx context.Context, b Backend, d spec.Drafter, prompt []int, o Options, so SpecOptions) (Result, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	var res Result
	if len(prompt) == 0 {
		return res, fmt.Errorf("generate: empty prompt")
	}
	if o.Context > 0 && len(prompt) > o.Context {
		return res, fmt.Errorf("%w: %d prompt tokens, context %d", ErrPromptTooLong, len(prompt), o.Context)
	}
	smp, err := sample.New(so.Sampling)
	if err != nil {
		return res, err
	}
	if o.MaxTokens == 0 && o.OnPromptLogits == nil {
		return res, nil
	}
	var tuner *spec.Tuner
	if so.K <= 0 {
		tuner = spec.NewTuner(so.Prior, so.HopRTT, so.MaxK)
	}
	// us[j] is the number the j-th generated token is drawn with.
	next := Uniforms(o.Seed)
	var us []float64
	uniforms := func(from, n int) []float64 {
		for len(us) < from+n {
			us = append(us, next())
		}
		return us[from : from+n]
	}
	accept := rand.New(rand.NewPCG(o.Seed^0x243f6a8885a308d3, o.Seed+0x13198a2e03707344))

	seq := make([]int, len(prompt), len(prompt)+min(o.MaxTokens, 4096))
	copy(seq, prompt)
	ids := make([]int32, len(prompt))
	for i, id := range prompt {
		ids[i] = int32(id)
	}
	t0 := now()
	step := promptStep(ids, uniforms(0, 1)[0], o.OnPromptLogits != nil)
	out, err := b.Step(ctx, step)
	if err != nil {
		return res, err
	}
	res.Traversals++
	if tuner != nil {
		tuner.ObserveStep(len(ids), now().Sub(t0))
		// The prompt's compute anchors the per-token slope at a length
		// the first rounds' short steps do not reach: fitted on lengths
		// 1 to 4 alone, a millisecond of noise could make trees look too
		// dear ever to be tried. It computes the head for one row only,
		// so it errs cheap; the first tree's own compute corrects it.
		tuner.ObserveCompute(len(ids), out.Compute)
	}
	if o.OnPromptLogits != nil {
		o.OnPromptLogits(out.Logits)
	}
	res.Stopped = "length"
	if o.MaxTokens == 0 {
		return res, nil
	}

	// emit is Run's loop body for one chosen token: it reports whether
	// generation is over.
	emit := func(id int) (bool, error) {
		res.IDs = append(res.IDs, id)
		seq = append(seq, id)
		if len(res.IDs) == 1 {
			res.Prefill = now().Sub(t0)
			t0 = now()
		}
		if o.OnToken != nil {
			o.OnToken(id)
		}
		if id == o.EOS && !o.IgnoreEOS {
			res.Stopped = "eos"
			return true, nil
		}
		if len(res.IDs) == o.MaxTokens {
			return true, nil
		}
		if o.Context > 0 && len(seq)-1 >= o.Context {
			res.Stopped = "context"
			return true, nil
		}
		return false, ctx.Err()
	}
	done, err := emit(out.Next[len(out.Next)-1])
	td, trees := d.(spec.TreeDrafter)
	trees = trees && (so.Tree > 0 || so.Tree == 0 && tuner != nil) && canTree(b)
	cached := len(prompt) // positions the backend holds as a sequence
	for !done && err == nil {
		if budget := nextTree(trees, so, tuner, cached < len(seq)-1); budget > 0 {
			done, err = treeRound(ctx, b, td, o, so, tuner, budget, &res, seq, &cached, uniforms, now, emit)
		} else {
			done, err = specRound(ctx, b, d, o, so, tuner, smp, &res, seq, uniforms, accept.Float64, now, emit)
			cached = len(seq) - 1
		}
	}
	if len(res.IDs) > 0 {
		res.Decode = now().Sub(t0)
	}
	return res, err
}

// specRound drafts, verifies in one traversal, and emits what was
// accepted.
func specRound(ctx context.Context, b Backend, d spec.Drafter, o Options, so SpecOptions, tuner *spec.Tuner, smp *sample.Sampler,
	res *Result, seq []int, uniforms func(from, n int) []float64, u func() float64, now func() time.Time,
	emit func(int) (bool, error)) (bool, error) {
	g := len(res.IDs) // index of the next generated token
	L := len(seq)     // seq[L-1], the last token emitted, is not in the caches yet
	k := so.K
	if tuner != nil {
		k = tuner.K()
	}
	// Never verify past the last token wanted or the context: the round
	// emits at most k+1 tokens and feeds positions L-1..L-1+k.
	k = min(k, o.MaxTokens-g-1)
	if o.Context > 0 {
		k = min(k, o.Context-L)
	}
	var drafts []int
	var q [][]float64
	if k > 0 {
		t := now()
		var err error
		drafts, q, err = d.Draft(ctx, seq, k)
		if err != nil {
			return true, err
		}
		if len(drafts) > k || q != nil && len(q) != len(drafts) {
			return true, fmt.Errorf("%w: %d drafts and %d distributions for k = %d", spec.ErrDraft, len(drafts), len(q), k)
		}
		if len(drafts) == 0 {
			q = nil
		}
		res.DraftTime += now().Sub(t)
		if tuner != nil {
			tuner.ObserveDraft(len(drafts), now().Sub(t))
		}
	}
	ids := make([]int32, 1+len(drafts))
	ids[0] = int32(seq[L-1])
	for i, x := range drafts {
		ids[i+1] = int32(x)
	}
	t := now()
	st := Step{Pos: L - 1, IDs: ids, All: len(drafts) > 0, Uniform: uniforms(g, len(ids)), Logits: q != nil}
	st.Walk = st.All && q == nil // point-mass acceptance reads the walk's rows only
	out, err := b.Step(ctx, st)
	if err != nil {
		return true, err
	}
	res.Traversals++
	if len(out.Next) != len(ids) {
		return true, fmt.Errorf("generate: %d rows for %d positions", len(out.Next), len(ids))
	}
	if tuner != nil {
		tuner.ObserveStep(len(ids), now().Sub(t))
		tuner.ObserveCompute(len(ids), out.Compute)
	}
	var emitted []int
	var n int
	if q == nil {
		emitted, n, err = spec.AcceptPointMass(drafts, out.Next)
		if err == nil && emitted[n] < 0 {
			err = fmt.Errorf("%w: row %d", ErrNoRow, n)
		}
	} else {
		if len(out.Logits) == 0 || len(out.Logits)%len(ids) != 0 {
			return true, ErrNoLogits
		}
		vocab := len(out.Logits) / len(ids)
		p := make([][]float64, len(drafts))
		for i := range p {
			p[i] = append([]float64(nil), smp.Dist(out.Logits[i*vocab:(i+1)*vocab])...)
		}
		emitted, n, err = spec.AcceptDistributions(drafts, q, p, out.Next[len(drafts)], u)
	}
	if err != nil {
		return true, err
	}
	res.Drafted += len(drafts)
	res.Accepted += n
	if tuner != nil {
		tuner.ObserveAcceptance(len(drafts), n)
	}
	for _, id := range emitted {
		if done, err := emit(id); done || err != nil {
			return done, err
		}
	}
	return false, nil
}

// nextTree returns the nodes of the next round's tree, or 0 for a chain
// round. A chain round needs the caches to hold all but the last token;
// after a tree left its leading chain (behind) they do not, and a tree
// round, of a chain's size at least, feeds the trunk.
func nextTree(trees bool, so SpecOptions, tuner *spec.Tuner, behind bool) int {
	if !trees {
		return 0
	}
	b := treeBudget(so, tuner)
	if behind && b == 0 {
		b = so.K
		if tuner != nil {
			b = tuner.K()
		}
	}
	return b
}

// treeBudget returns the nodes of the next round's tree: so.Tree, or with
// auto-K what spec.TreeBudget allows for the measured costs when that is
// more than a chain could use (DefaultMaxK: on a slow route), twice that
// in the rounds the tuner explores, else 0 (a chain round, whose K the
// tuner picks).
func treeBudget(so SpecOptions, tuner *spec.Tuner) int {
	if so.Tree != 0 || tuner == nil {
		return max(so.Tree, 0)
	}
	c, measured := tuner.Costs()
	b := spec.TreeBudget(c, 0, 0)
	if so.Streams != nil {
		b /= max(so.Streams(), 1)
	}
	if measured && b > spec.DefaultMaxK {
		if tuner.ExploreTree() {
			b = min(2*b, spec.DefaultMaxTree)
		}
		return b
	}
	return 0
}

// treeRound drafts a tree, verifies all of it in one traversal, and emits
// the longest path the target agrees with and the target's token after
// it. The step starts at *cached, the end of what the backend holds as a
// sequence: emitted tokens past it (the last one, and accepted nodes the
// previous tree held off its leading chain) run again as the trunk the
// tree hangs from. Every row draws with the number of the generated token
// it chooses, as in Run, so sampled output with point-mass drafts is Run's
// too.
func treeRound(ctx context.Context, b Backend, td spec.TreeDrafter, o Options, so SpecOptions, tuner *spec.Tuner, budget int,
	res *Result, seq []int, cached *int, uniforms func(from, n int) []float64, now func() time.Time,
	emit func(int) (bool, error)) (bool, error) {
	g := len(res.IDs) // index of the next generated token
	L := len(seq)
	trunk := seq[*cached:L] // the last is the tree's root
	depth := so.MaxK
	if depth <= 0 {
		depth = spec.DefaultMaxK
	}
	// Never verify past the last token wanted or the context: a node at
	// depth d is generated token g+d, in slot L-1+index.
	depth = min(depth, o.MaxTokens-g-1)
	if o.Context > 0 {
		depth = min(depth, o.Context-L)
		budget = min(budget, o.Context-L)
	}
	var tree spec.Tree
	if depth > 0 && budget > 0 {
		t := now()
		tree = td.DraftTree(seq, depth, budget)
		if tree.Len() > budget || len(tree.Parent) != tree.Len() {
			return true, fmt.Errorf("%w: a tree of %d nodes for a budget of %d", spec.ErrDraft, tree.Len(), budget)
		}
		res.DraftTime += now().Sub(t)
		if tuner != nil {
			tuner.ObserveDraft(tree.Len(), now().Sub(t))
		}
	}
	nt := len(trunk)
	root := nt - 1
	n := nt + tree.Len()
	ids := make([]int32, n)
	parents := make([]int32, n)
	us := make([]float64, n)
	for i, x := range trunk {
		ids[i], parents[i] = int32(x), int32(i-1)
		us[i] = uniforms(g-root+i, 1)[0] // trunk row i chooses generated token g-root+i
	}
	for i, x := range tree.Tokens {
		p := tree.Parent[i]
		if p < -1 || p >= i {
			return true, fmt.Errorf("%w: tree node %d's parent is %d", spec.ErrDraft, i, p)
		}
		at := nt + i
		ids[at], parents[at] = int32(x), int32(root)
		if p >= 0 {
			parents[at] = int32(nt + p)
		}
	}
	depthOf := func(i int) int {
		d := 0
		for ; i > root; i = int(parents[i]) {
			d++
		}
		return d
	}
	for i := nt; i < n; i++ {
		us[i] = uniforms(g+depthOf(i), 1)[0]
	}
	st := Step{Pos: *cached, IDs: ids, All: n > 1, Uniform: us, Tree: parents, Walk: n > 1, From: root}
	if nt == 1 && tree.Chain() {
		st.Tree = nil // a plain speculative step: any backend runs it
	}
	if st.All == false {
		st.Uniform = us[n-1:]
	}
	t := now()
	out, err := b.Step(ctx, st)
	if err != nil {
		return true, err
	}
	res.Traversals++
	if want := len(st.Uniform); len(out.Next) != want {
		return true, fmt.Errorf("generate: %d rows for %d positions", len(out.Next), want)
	}
	if tuner != nil {
		tuner.ObserveStep(n, now().Sub(t))
		tuner.ObserveCompute(n, out.Compute)
	}
	if !st.All {
		out.Next = append(make([]int, n-1), out.Next...)
	}
	// Walk down the tree while the target's choice is a child: the walk
	// the backend was asked to answer (ovrt.Walk), whose rows come in
	// order, each a child of the one before.
	walked, err := ovrt.Walk(ids, parents, root, func(row int) (int, error) {
		if out.Next[row] < 0 {
			return 0, fmt.Errorf("%w: row %d", ErrNoRow, row)
		}
		return out.Next[row], nil
	})
	if err != nil {
		return true, err
	}
	cur, keep := root, *cached+nt
	var path []int
	for child := root + 1; child < n; child++ {
		if walked[child] < 0 {
			continue
		}
		if child == keep-*cached && keep-*cached == nt+len(path) {
			keep++ // still the leading chain: its slots are the sequence's
		}
		path = append(path, child)
		cur = child
	}
	res.Drafted += tree.Len()
	res.Accepted += len(path)
	res.Refed += *cached + nt + len(path) - keep
	*cached = keep
	for _, i := range path {
		if done, err := emit(int(ids[i])); done || err != nil {
			return done, err
		}
	}
	return emit(out.Next[cur])
}
