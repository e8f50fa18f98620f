package openai_test

import (
	"bytes"
	"context"
	"fmt"
	"github.com/pipeshard/pipeshard/internal/testwatch"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/openai"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/internal/teststore"
	"github.com/pipeshard/pipeshard/node"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/swarm"
)

// fixture is a real 3-node swarm of stories15M on loopback, a client of
// it and the API served over it, shared by this package's tests (and
// closed by TestMain).
type fixture struct {
	dir    string
	st     *teststore.Store
	whole  *ovrt.Model
	tok    *tokenizer.Tokenizer
	nodes  []*node.Node
	client *swarm.Client
	gen    *openai.Swarm
	cfg    openai.Config
	srv    *httptest.Server
	cancel context.CancelFunc
}

var (
	fixOnce sync.Once
	fix     *fixture
	fixErr  error
)

func TestMain(m *testing.M) {
	code := testwatch.Run(m)
	if fix != nil {
		fix.close()
	}
	os.Exit(code)
}

// getFixture starts the shared swarm on first use.
func getFixture(t testing.TB) *fixture {
	t.Helper()
	model, tok := testmodel.Stories15M(t)
	fixOnce.Do(func() { fix, fixErr = buildFixture(model, tok) })
	if fixErr != nil {
		t.Fatal(fixErr)
	}
	return fix
}

func buildFixture(model, tokPath string) (_ *fixture, err error) {
	f := &fixture{}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	if f.dir, err = os.MkdirTemp("", "openai-fixture-"); err != nil {
		return nil, err
	}
	if f.st, err = teststore.Build(context.Background(), filepath.Join(f.dir, "store"), model, tokPath, teststore.Cut{Balanced: 3}); err != nil {
		return nil, err
	}
	if f.whole, err = ovrt.Compile(f.st.Weights); err != nil {
		return nil, err
	}
	if f.tok, err = tokenizer.Load(tokPath); err != nil {
		return nil, err
	}
	var ctx context.Context
	ctx, f.cancel = context.WithCancel(context.Background())
	for i, s := range f.st.Cuts[0].Shards {
		n, err := f.startNode(ctx, fmt.Sprint("node", i), s.CID)
		if err != nil {
			return nil, err
		}
		f.nodes = append(f.nodes, n)
	}
	if f.client, err = f.newClient(f.nodes[0]); err != nil {
		return nil, err
	}
	m := f.st.Manifest
	f.gen = &openai.Swarm{Client: f.client, Model: m, FindTimeout: 30 * time.Second}
	f.cfg = openai.Config{Model: m.Name, Aliases: []string{f.st.MC.String()}, Tokenizer: f.tok, Context: m.Config.Context}
	f.srv = httptest.NewServer(openai.New(f.cfg, f.gen))
	return f, nil
}

// startNode runs a node hosting shard, bootstrapped from the first node.
func (f *fixture) startNode(ctx context.Context, name, shard string) (*node.Node, error) {
	return f.start(ctx, name, shard, false)
}

// startNodeAlone runs a node hosting shard in a swarm of its own.
func (f *fixture) startNodeAlone(ctx context.Context, name, shard string) (*node.Node, error) {
	return f.start(ctx, name, shard, true)
}

func (f *fixture) start(ctx context.Context, name, shard string, alone bool) (*node.Node, error) {
	var boot []string
	if len(f.nodes) > 0 && !alone {
		boot = f.nodes[0].Addrs()
	}
	return f.startBoot(ctx, name, shard, boot)
}

// startBoot runs a node hosting shard, bootstrapped from boot (none: a
// swarm of its own).
func (f *fixture) startBoot(ctx context.Context, name, shard string, boot []string) (*node.Node, error) {
	home := filepath.Join(f.dir, name)
	if err := f.copyTo(home, shard, f.st.MC.String(), f.st.Manifest.Tokenizer.CID); err != nil {
		return nil, err
	}
	cfg := node.Config{Home: home, Shard: shard, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Threads: 1, Bootstrap: boot}
	n, err := node.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	go n.Run(ctx)
	return n, nil
}

func (f *fixture) newClient(boot *node.Node) (*swarm.Client, error) {
	return swarm.New(context.Background(), swarm.Config{Home: filepath.Join(f.dir, fmt.Sprint("client", time.Now().UnixNano())),
		Bootstrap: boot.Addrs(), Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
}

// copyTo puts the given stored files into the store of home.
func (f *fixture) copyTo(home string, cids ...string) error {
	st, err := openStore(home)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, s := range cids {
		var b bytes.Buffer
		if err := f.st.Blocks.Export(context.Background(), cid.MustParse(s), &b); err != nil {
			return err
		}
		got, err := st.Blocks.AddFile(context.Background(), &b, nil)
		if err != nil {
			return err
		}
		if got.String() != s {
			return fmt.Errorf("copy %s: got %s", s, got)
		}
	}
	return nil
}

func (f *fixture) close() {
	if f.srv != nil {
		f.srv.Close()
	}
	if f.client != nil {
		f.client.Close()
	}
	for _, n := range f.nodes {
		n.Close()
	}
	if f.cancel != nil {
		f.cancel()
	}
	if f.st != nil {
		f.st.Close()
	}
	if f.dir != "" {
		os.RemoveAll(f.dir)
	}
}

// local generates from prompt in this process, the reference the API's
// output must equal token for token.
func (f *fixture) local(t testing.TB, prompt []int, maxTokens int, p sample.Params) []int {
	t.Helper()
	l, err := generate.NewLocal(p, f.whole)
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.st.Manifest.Config
	r, err := generate.Run(context.Background(), l, prompt, generate.Options{MaxTokens: maxTokens, Seed: p.Seed, EOS: cfg.EOS, Context: cfg.Context})
	if err != nil {
		t.Fatal(err)
	}
	return r.IDs
}

// text decodes generated ids as the API does: after the prompt, without
// the final EOS.
func (f *fixture) text(prompt, ids []int) string {
	d := f.tok.NewDecoder()
	for _, id := range prompt {
		d.Next(id)
	}
	var s string
	for _, id := range ids {
		s += d.Next(id)
	}
	return s + d.Flush()
}

func openStore(home string) (*shards.Store, error) { return shards.Open(home) }

// lockedWriter serializes writes (a command's log, read by the test).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
