package swarm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// verifySwarm is range 1 of a 2-stage split served by one node and range
// 2 by three, the first of which lies from position lieFrom on while
// lying is set: it adds noise to its logits.
type verifySwarm struct {
	f     *fixture
	first *node.Node
	liar  *node.Node
	good  []*node.Node
	lying atomic.Bool
	c     *swarm.Client
	m     *shards.Manifest
	provs []swarm.Provider
	fo    swarm.FailoverOptions
}

const lieFrom = 12

// noise is the liar's: a deterministic pseudo-random shift of each logit,
// large enough to change some argmaxes, not all.
func noise(pos int, out []float32) {
	for i := range out {
		out[i] += 2 * float32(math.Sin(float64(i*7919+pos*104729)))
	}
}

// startVerifySwarm starts the liar and honest more providers of range 2.
func startVerifySwarm(t *testing.T, honest int) *verifySwarm {
	t.Helper()
	f := getFixture(t)
	l := f.layouts[2]
	v := &verifySwarm{f: f}
	v.lying.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	start := func(i int, shard string, stage node.StageOptions) *node.Node {
		home := filepath.Join(t.TempDir(), fmt.Sprint("node", i))
		f.copyTo(t, home, shard, f.mc.String(), f.manifest.Tokenizer.CID)
		cfg := node.Config{Home: home, Shard: shard, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, Stage: stage}
		if v.first != nil {
			cfg.Bootstrap = v.first.Addrs()
		}
		n, err := node.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		go n.Run(ctx)
		return n
	}
	v.first = start(0, l.Shards[0].CID, node.StageOptions{})
	v.liar = start(1, l.Shards[1].CID, node.StageOptions{Tamper: func(pos int, out []float32) {
		if v.lying.Load() && pos >= lieFrom {
			noise(pos, out)
		}
	}})
	for i := range honest {
		v.good = append(v.good, start(2+i, l.Shards[1].CID, node.StageOptions{}))
	}

	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	c, err := swarm.New(wctx, swarm.Config{Home: t.TempDir(), Bootstrap: v.first.Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	v.c = c
	if v.m, err = c.Resolve(wctx, f.mc); err != nil {
		t.Fatal(err)
	}
	// Wait until all providers of range 2 are known.
	for {
		_, _, provs, err := c.FindRoute(wctx, v.m, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range provs {
			if p.Shard.CID == l.Shards[1].CID && p.RTT > 0 {
				n++
			}
		}
		if n == 1+honest {
			v.provs = provs
			return v
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// open opens a verified sequence whose main route goes through second.
func (v *verifySwarm) open(t *testing.T, second *node.Node, p sample.Params, vo *swarm.VerifyOptions) *swarm.Resilient {
	t.Helper()
	hops := routeOf(v.f.layouts[2], []*node.Node{v.first, second})
	opts := swarm.SessionOptions{ModelID: v.m.ModelID, Sampling: p, Vocab: v.m.Config.Vocab, MaxLen: v.m.Config.Context, Timeout: 30 * time.Second}
	fo := v.fo
	fo.Probe, fo.Verify = time.Second, vo
	r, err := v.c.OpenResilient(context.Background(), v.m, v.provs, hops, opts, fo)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// mismatches records what a sequence's verifier reports.
type mismatches struct {
	mu   sync.Mutex
	list []swarm.Mismatch
}

func (m *mismatches) add(x swarm.Mismatch) {
	m.mu.Lock()
	m.list = append(m.list, x)
	m.mu.Unlock()
}

func (m *mismatches) get() []swarm.Mismatch {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.list)
}

var verifyPrompt = []int{1, 450, 8338, 265}

// lieStep is the index of the first step whose row the liar tampers
// with: step 0 (the prompt's) gives the row at len(prompt)-1.
var lieStep = lieFrom - (len(verifyPrompt) - 1)

// TestVerifyCatchesLiar: a liar on the main route is caught, banned and
// routed around, and the output is the honest one. With every step
// checked, it is caught on the first step it lies at. At the default
// rate of 5%, the first check after it starts lying catches it (the
// shadow's catch-up compares every row since the last check); the number
// of steps to that check is geometric: the chance of none in n steps is
// 0.95^n, under 1% for n = 90, which bounds the test. The step sampler is
// seeded, so the test is deterministic.
func TestVerifyCatchesLiar(t *testing.T) {
	v := startVerifySwarm(t, 2)
	want := localIDs(t, v.f, verifyPrompt, 120, sample.Params{})
	for _, tc := range []struct {
		name   string
		rate   float64
		tokens int
		within int // steps from the first lie to its detection
	}{
		{"all", 1, 40, 0},
		{"default", swarm.DefaultVerifyRate, 120, 90},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var seen mismatches
			r := v.open(t, v.liar, sample.Params{}, &swarm.VerifyOptions{Rate: tc.rate, Rand: rand.New(rand.NewPCG(7, 7)), OnMismatch: seen.add})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			kept := -1
			// What a caller has been given, and whether every token the
			// verified count covered was the honest one when it did.
			var shown []int
			verifiedLie := ""
			o := generateOpts(tc.tokens, v.m.Config.Context)
			o.OnToken = func(id int) {
				shown = append(shown, id)
				n := min(r.Verification().Verified-len(verifyPrompt)+1, len(shown))
				if n > 0 && !slices.Equal(shown[:n], want[:n]) && verifiedLie == "" {
					verifiedLie = fmt.Sprintf("after %d tokens, %d counted as verified: %v, honest %v", len(shown), n, shown[:n], want[:n])
				}
			}
			got, err := swarm.Generate(ctx, r, verifyPrompt, o, func(k int) { kept = k; shown = shown[:k] })
			if err != nil {
				t.Fatal(err)
			}
			if r.Verification().Unverifiable {
				t.Fatal("every range has a second provider, but the sequence counts as unverifiable")
			}
			if verifiedLie != "" {
				t.Fatal("a lie was counted as verified: " + verifiedLie)
			}
			if st := r.Verification(); tc.rate == 1 && st.Verified < len(verifyPrompt)+tc.tokens-2 {
				t.Fatalf("every step checked, but only %d positions counted as verified (prompt %d, %d tokens)", st.Verified, len(verifyPrompt), tc.tokens)
			}
			st := r.Verification()
			ms := seen.get()
			t.Logf("stats %+v; mismatches %+v; rewound to %d", st, ms, kept)
			if !slices.Equal(got.IDs, want[:tc.tokens]) {
				t.Fatalf("verified swarm generated\n%v\nlocal\n%v", got.IDs, want[:tc.tokens])
			}
			if len(ms) == 0 {
				t.Fatal("the liar was not caught")
			}
			liar := v.liar.ID().String()
			if !slices.Equal(ms[0].Banned, []string{liar}) || len(st.Banned) != 1 || st.Banned[0].Peer != liar {
				t.Fatalf("banned %v (stats %v), want only the liar %s", ms[0].Banned, st.Banned, liar)
			}
			if d := ms[0].Step - lieStep; d < 0 || d > tc.within {
				t.Fatalf("caught at step %d, %d steps after the first lie (step %d); want within %d", ms[0].Step, d, lieStep, tc.within)
			}
			t.Logf("rate %v: the liar lied from step %d and was caught at step %d (position %d)", tc.rate, lieStep, ms[0].Step, ms[0].Pos)
			if tc.rate == 1 && (ms[0].Pos != lieFrom || st.Rewinds != 0 || st.Checked != st.Steps) {
				t.Fatalf("every step checked: want the mismatch at %d, no rewind, all steps checked; got %+v, %+v", lieFrom, ms[0], st)
			}
			for _, h := range r.Session().Route {
				if h.Peer.ID == v.liar.ID() {
					t.Fatal("the route still goes through the liar")
				}
			}
		})
	}
}

// TestVerifyNoFalsePositives: on an honest swarm, verification of every
// step finds no mismatch, greedy or sampled, and the output is local
// generation's.
func TestVerifyNoFalsePositives(t *testing.T) {
	v := startVerifySwarm(t, 2)
	v.lying.Store(false)
	const n = 40
	for _, p := range []sample.Params{{}, {Temp: 0.9, TopP: 0.9, Seed: 11}} {
		t.Run(fmt.Sprint("temp=", p.Temp), func(t *testing.T) {
			r := v.open(t, v.liar, p, &swarm.VerifyOptions{Rate: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			o := generateOpts(n, v.m.Config.Context)
			o.Seed = p.Seed
			got, err := swarm.Generate(ctx, r, verifyPrompt, o, nil)
			if err != nil {
				t.Fatal(err)
			}
			st := r.Verification()
			t.Logf("%+v", st)
			if st.Mismatches != 0 || len(st.Banned) != 0 || st.Checked != n || st.Steps != n || st.Rows < n {
				t.Fatalf("honest swarm: %+v; want %d steps checked, no mismatch", st, n)
			}
			if want := localIDs(t, v.f, verifyPrompt, n, p); !slices.Equal(got.IDs, want) {
				t.Fatalf("verified swarm generated\n%v\nlocal\n%v", got.IDs, want)
			}
		})
	}
}

// TestVerifyTwoProvidersDisagree: when the only two providers of a range
// disagree, nobody can tell which lies: both are banned, and with no
// route left the sequence fails with ErrVerification.
func TestVerifyTwoProvidersDisagree(t *testing.T) {
	v := startVerifySwarm(t, 1)
	v.fo.Rediscover = 3 * time.Second // no other provider will come
	var seen mismatches
	r := v.open(t, v.liar, sample.Params{}, &swarm.VerifyOptions{Rate: 1, OnMismatch: seen.add})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := swarm.Generate(ctx, r, verifyPrompt, generateOpts(30, v.m.Config.Context), nil)
	if !errors.Is(err, swarm.ErrVerification) {
		t.Fatalf("got %v, want ErrVerification", err)
	}
	st := r.Verification()
	t.Logf("%v; %+v", err, st)
	ms := seen.get()
	want := []string{v.liar.ID().String(), v.good[0].ID().String()}
	if len(ms) != 1 || ms[0].Pos != lieFrom || !sameSet(ms[0].Banned, want) {
		t.Fatalf("mismatches %+v, want one at %d banning both %v", ms, lieFrom, want)
	}
}

func TestBansBackOff(t *testing.T) {
	var b swarm.Bans
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		at   time.Duration
		want time.Duration
	}{
		{0, time.Minute},
		{2 * time.Minute, 2 * time.Minute},
		{5 * time.Minute, 4 * time.Minute},
	} {
		if got := b.Ban("p", t0.Add(tc.at)); got != tc.want {
			t.Fatalf("ban at %v: %v, want %v", tc.at, got, tc.want)
		}
	}
	if !b.Banned("p", t0.Add(8*time.Minute)) || b.Banned("p", t0.Add(9*time.Minute+time.Second)) || b.Banned("q", t0) {
		t.Fatal("ban windows wrong")
	}
}

func generateOpts(n, context int) generate.Options {
	return generate.Options{MaxTokens: n, IgnoreEOS: true, Context: context}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestVerifySpeculative: speculative decoding's steps (several rows, and
// rewinds when drafts are rejected) are verified too; the liar is caught
// and the output is local generation's.
func TestVerifySpeculative(t *testing.T) {
	v := startVerifySwarm(t, 2)
	prompt := []int{1, 450, 8338, 265, 263, 2217, 29889, 450, 8338}
	const n = 40
	var seen mismatches
	r := v.open(t, v.liar, sample.Params{}, &swarm.VerifyOptions{Rate: 1, OnMismatch: seen.add})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	got, err := generate.RunSpeculative(ctx, r, spec.NGram{}, prompt, generateOpts(n, v.m.Config.Context), generate.SpecOptions{K: 4})
	if err != nil {
		t.Fatal(err)
	}
	st := r.Verification()
	t.Logf("%+v; %d drafts, %d accepted, %d traversals", st, got.Drafted, got.Accepted, got.Traversals)
	if want := localIDs(t, v.f, prompt, n, sample.Params{}); !slices.Equal(got.IDs, want) {
		t.Fatalf("verified speculative swarm generated\n%v\nlocal\n%v", got.IDs, want)
	}
	if ms := seen.get(); len(ms) != 1 || !slices.Equal(ms[0].Banned, []string{v.liar.ID().String()}) {
		t.Fatalf("mismatches %+v: want one, banning the liar", ms)
	}
}
