package openai_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipeshard/pipeshard/internal/openai"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/swarm"
)

// recordGen passes sequences on to the swarm and reports how each ended.
type recordGen struct {
	g    openai.Generator
	done chan error
}

func (r *recordGen) Generate(ctx context.Context, req openai.Request, emit func(int) bool) (openai.Result, error) {
	res, err := r.g.Generate(ctx, req, emit)
	r.done <- err
	return res, err
}

// waitFor polls cond until it holds or d passes.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cond()
}

// TestClientDisconnectCancels: a client that goes away mid-stream ends
// its sequence, and the sessions on the nodes are closed.
func TestClientDisconnectCancels(t *testing.T) {
	f := getFixture(t)
	rec := &recordGen{g: f.gen, done: make(chan error, 2)}
	srv := httptest.NewServer(openai.New(f.cfg, rec))
	defer srv.Close()
	for _, chat := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"model": "stories15M", "prompt": "` + story + `", "max_tokens": 200, "temperature": 0, "stream": true}`
		path := "/v1/completions"
		if chat {
			body = `{"model": "stories15M", "messages": [{"role": "user", "content": "` + story + `"}], "max_tokens": 200, "temperature": 0, "stream": true}`
			path = "/v1/chat/completions"
		}
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		if _, err := resp.Body.Read(buf); err != nil { // the stream has begun
			t.Fatal(err)
		}
		open := 0
		for _, n := range f.nodes {
			open += n.Stage.Sessions()
		}
		if open != 3 {
			t.Fatalf("%d sessions open on the nodes mid-stream, want 3", open)
		}
		cancel()
		resp.Body.Close()
		select {
		case err := <-rec.done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("the sequence ended with %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the sequence went on after its client left")
		}
		if !waitFor(10*time.Second, func() bool {
			for _, n := range f.nodes {
				if n.Stage.Sessions() != 0 {
					return false
				}
			}
			return true
		}) {
			for i, n := range f.nodes {
				t.Logf("node %d: %d sessions", i, n.Stage.Sessions())
			}
			t.Fatal("sessions left open on the nodes")
		}
	}
}

// TestConcurrentRequestsBatched: requests at once each get their own
// session on the shared route, the stages batch their forwards, and each
// gets the text it gets alone.
func TestConcurrentRequestsBatched(t *testing.T) {
	f := getFixture(t)
	const reqs, tokens = 6, 24
	prompts := make([]string, reqs)
	want := make([]string, reqs)
	for i := range reqs {
		prompts[i] = fmt.Sprintf("%s there was a %s", story, []string{"cat", "dog", "girl", "boy", "bird", "tree"}[i])
		ids := f.tok.Encode(prompts[i], true)
		want[i] = f.text(ids, f.local(t, ids, tokens, sample.Params{}))
	}
	var fw0, b0 int64
	for _, n := range f.nodes {
		s := n.Stage.Snapshot()
		fw0, b0 = fw0+s.Forwards, b0+s.Batches
	}
	got := make([]string, reqs)
	var wg sync.WaitGroup
	for i := range reqs {
		wg.Go(func() {
			var c openai.Completion
			decodeJSON(t, post(t, f.srv.URL+"/v1/completions", fmt.Sprintf(`{"model": "stories15M", "prompt": %q, "max_tokens": %d, "temperature": 0}`, prompts[i], tokens)), 200, &c)
			got[i] = c.Choices[0].Text
		})
	}
	wg.Wait()
	for i := range reqs {
		if got[i] != want[i] {
			t.Fatalf("request %d: %q, alone in process %q", i, got[i], want[i])
		}
	}
	var fw1, b1 int64
	for _, n := range f.nodes {
		s := n.Stage.Snapshot()
		fw1, b1 = fw1+s.Forwards, b1+s.Batches
	}
	t.Logf("%d requests: %d forwards in %d batches on the route's stages", reqs, fw1-fw0, b1-b0)
	if b1-b0 >= fw1-fw0 {
		t.Fatalf("%d forwards in %d batches: nothing was batched", fw1-fw0, b1-b0)
	}
}

// TestNoRoute: a swarm that lacks some of the model's layers answers 503
// in OpenAI's error shape, streamed or not.
func TestNoRoute(t *testing.T) {
	f := getFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	lone, err := f.startNodeAlone(ctx, "lone", f.st.Cuts[0].Shards[0].CID)
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Close()
	c, err := f.newClient(lone)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gen := &openai.Swarm{Client: c, Model: f.st.Manifest, FindTimeout: 2 * time.Second}
	srv := httptest.NewServer(openai.New(f.cfg, gen))
	defer srv.Close()
	for _, stream := range []bool{false, true} {
		var e openai.ErrorBody
		decodeJSON(t, post(t, srv.URL+"/v1/completions", fmt.Sprintf(`{"model": "stories15M", "prompt": "x", "stream": %v}`, stream)), 503, &e)
		if e.Error.Code == nil || *e.Error.Code != "model_unavailable" || !strings.Contains(e.Error.Message, "no route") {
			t.Fatalf("error %+v", e.Error)
		}
	}
}

// TestFailoverMidRequest: a node of the shared route dies while a
// streamed request runs through it. The sequence fails over to the other
// provider of the node's layers, the client gets the text of an
// uninterrupted local run, and the shared route moves off the dead node.
// With verification on (swarm serve's default rate), checks run on the
// other provider until the death leaves none.
func TestFailoverMidRequest(t *testing.T) {
	f := getFixture(t)
	for _, verify := range []float64{0, swarm.DefaultVerifyRate} {
		t.Run(fmt.Sprintf("verify=%v", verify), func(t *testing.T) { testFailoverMidRequest(t, f, verify) })
	}
}

func testFailoverMidRequest(t *testing.T, f *fixture, verify float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A swarm of the test's own, so that the dead node is no other
	// test's: the middle shard on two nodes.
	sh := f.st.Cuts[0].Shards
	tag := fmt.Sprintf("fo%v-", verify)
	first, err := f.startBoot(ctx, tag+"0", sh[0].CID, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	mids := map[string]*node.Node{}
	all := []*node.Node{first}
	for _, name := range []string{"1a", "1b", "2"} {
		shard := sh[1].CID
		if name == "2" {
			shard = sh[2].CID
		}
		n, err := f.startBoot(ctx, tag+name, shard, first.Addrs())
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		all = append(all, n)
		if shard == sh[1].CID {
			mids[n.ID().String()] = n
		}
	}
	c, err := f.newClient(first)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := f.st.Manifest
	// Wait until both providers of the middle shard answer, so that the
	// failover has somewhere to go.
	for {
		_, _, provs, err := c.FindRoute(ctx, m, nil)
		if err != nil {
			t.Fatal(err)
		}
		up := 0
		for _, p := range provs {
			if p.Shard.CID == sh[1].CID && p.RTT > 0 {
				up++
			}
		}
		if up == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d providers of the middle shard found, want 2", up)
		case <-time.After(200 * time.Millisecond):
		}
	}
	gen := &openai.Swarm{Client: c, Model: m, FindTimeout: 30 * time.Second, Verify: verify, Bans: &swarm.Bans{}}
	hops, _, err := gen.Route(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim *node.Node
	for _, h := range hops {
		if n := mids[h.Peer.ID.String()]; n != nil {
			victim = n
		}
	}
	if victim == nil {
		t.Fatalf("the route %v has no provider of the middle shard", hops)
	}
	srv := httptest.NewServer(openai.New(f.cfg, gen))
	defer srv.Close()

	// Kill the victim once it has served killAt forwards: a sequence
	// well under way (streamed text may be held back for checks, so the
	// kill follows the node's work, not the client's output).
	const tokens, killAt = 60, 12
	kctx, kcancel := context.WithCancel(ctx)
	defer kcancel()
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for victim.Stage.Snapshot().Forwards < killAt {
			select {
			case <-kctx.Done():
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
		t.Logf("closing %s after %d forwards", victim.ID(), victim.Stage.Snapshot().Forwards)
		victim.Close()
	}()
	prompt := f.tok.Encode(story, true)
	want := f.text(prompt, f.local(t, prompt, tokens, sample.Params{}))
	body := fmt.Sprintf(`{"model": "stories15M", "prompt": %q, "max_tokens": %d, "temperature": 0, "stream": true}`, story, tokens)
	data, done := events(t, post(t, srv.URL+"/v1/completions", body))
	kcancel() // stop the killer if the request ended first
	<-killed
	if !done {
		t.Fatalf("no [DONE]: %v", data)
	}
	texts, finish, _ := chunkText(t, data, false, 1)
	if texts[0] != want || finish[0] != "length" {
		t.Fatalf("streamed %q (%s), want %q (length)", texts[0], finish[0], want)
	}
	if got := victim.Stage.Snapshot().Forwards; got >= tokens {
		t.Fatalf("the victim served all %d forwards: it died too late to test a failover", got)
	}
	after, _, err := gen.Route(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range after {
		if h.Peer.ID == victim.ID() {
			t.Fatalf("the shared route %v still goes through the dead node", after)
		}
	}
	if !waitFor(10*time.Second, func() bool {
		for _, n := range all {
			if n != victim && n.Stage.Sessions() != 0 {
				return false
			}
		}
		return true
	}) {
		t.Fatal("sessions left open on the live nodes")
	}
}

// TestSpeculativeLikePlain serves with the n-gram drafter and a history
// of earlier answers: every answer is the plain one (greedy, and sampled
// for its seed), each finished answer joins the history, and a repeated
// request is drafted from it.
func TestSpeculativeLikePlain(t *testing.T) {
	f := getFixture(t)
	hist := spec.NewHistory(0)
	var remembered atomic.Int64
	gen := &openai.Swarm{Client: f.client, Model: f.st.Manifest, FindTimeout: 30 * time.Second,
		Drafter: func() spec.Drafter { return spec.NGram{History: hist} },
		Remember: func(seq []int) {
			hist.Add(seq)
			remembered.Add(1)
		}}
	srv := httptest.NewServer(openai.New(f.cfg, gen))
	defer srv.Close()
	prompt := f.tok.Encode(story, true)
	const n = 24
	for _, p := range []sample.Params{{}, {Temp: 0.8, TopP: 0.9, Seed: 7}, {}} {
		want := f.text(prompt, f.local(t, prompt, n, p))
		params := fmt.Sprintf(`"max_tokens": %d, "temperature": %v, "seed": %d`, n, p.Temp, p.Seed)
		if p.TopP > 0 {
			params += fmt.Sprintf(`, "top_p": %v`, p.TopP)
		}
		var c openai.Completion
		decodeJSON(t, post(t, srv.URL+"/v1/completions", `{"model": "stories15M", "prompt": "`+story+`", `+params+`}`), 200, &c)
		if len(c.Choices) != 1 || c.Choices[0].Text != want {
			t.Fatalf("temp %v: %+v\nwant %q", p.Temp, c, want)
		}
	}
	if got := remembered.Load(); got != 3 {
		t.Errorf("%d answers remembered, want 3", got)
	}
	// The greedy answer is in the history: drafted from it, all of it.
	seq := append(slices.Clone(prompt), f.local(t, prompt, n, sample.Params{})...)
	if d := (spec.NGram{History: hist}).Lookup(seq[:len(prompt)+1], 8); !slices.Equal(d, seq[len(prompt)+1:len(prompt)+9]) {
		t.Errorf("history drafts %v, want the answer's next 8 tokens %v", d, seq[len(prompt)+1:len(prompt)+9])
	}
}
