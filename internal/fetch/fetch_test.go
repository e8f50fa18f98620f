package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/boxo/datastore/dshelp"
	dag "github.com/ipfs/boxo/ipld/merkledag"
	cid "github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"

	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// testTimeout bounds every test that touches the network.
const testTimeout = 60 * time.Second

// fileSize is 12 full 256 KiB leaves and a one-byte leaf under one root.
const fileSize = 3<<20 + 1

// testBytes returns n bytes from a generator seeded with seed.
func testBytes(seed uint64, n int) []byte {
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 'f', 'e', 't', 'c', 'h'})
	b := make([]byte, n)
	r.Read(b)
	return b
}

// node is one test peer: a loopback host, a store and a Service.
type node struct {
	h     host.Host
	store *blockstore.Store
	svc   *Service
}

func (n *node) info() peer.AddrInfo { return peer.AddrInfo{ID: n.h.ID(), Addrs: n.h.Addrs()} }

func newHost(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func newStore(t testing.TB) *blockstore.Store {
	t.Helper()
	st, err := blockstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// newNode makes a node; rt may be nil. Cleanup closes the Service, then
// the host, then the store.
func newNode(t testing.TB, h host.Host, rt routing.ContentRouting, opts ...Option) *node {
	t.Helper()
	st := newStore(t)
	if h == nil {
		h = newHost(t)
	}
	svc, err := New(t.Context(), h, rt, st, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return &node{h: h, store: st, svc: svc}
}

func addFile(t testing.TB, st *blockstore.Store, data []byte) cid.Cid {
	t.Helper()
	c, err := st.AddFile(t.Context(), bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readFile(t testing.TB, st *blockstore.Store, c cid.Cid) []byte {
	t.Helper()
	r, _, err := st.Open(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leaves returns the children of the root c (the leaves, for a file of at
// most 174 chunks).
func leaves(t testing.TB, st *blockstore.Store, c cid.Cid) []cid.Cid {
	t.Helper()
	blk, err := st.Blockstore().Get(t.Context(), c)
	if err != nil {
		t.Fatal(err)
	}
	pn, err := dag.DecodeProtobuf(blk.RawData())
	if err != nil {
		t.Fatal(err)
	}
	var out []cid.Cid
	for _, l := range pn.Links() {
		out = append(out, l.Cid)
	}
	return out
}

// corrupt flips one byte of block c's file in st's directory.
func corrupt(t testing.TB, st *blockstore.Store, c cid.Cid) {
	t.Helper()
	key := dshelp.MultihashToDsKey(c.Hash()).String()[1:]
	path := filepath.Join(st.Dir(), "blocks", key[len(key)-3:len(key)-1], key+".data")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkAllBlocks fails t if any block in st does not hash to its CID,
// and returns how many blocks st holds.
func checkAllBlocks(t testing.TB, st *blockstore.Store) int {
	t.Helper()
	bs := st.Blockstore()
	keys, err := bs.AllKeysChan(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k := range keys {
		n++
		if _, err := bs.Get(t.Context(), k); err != nil {
			t.Errorf("block %s: %v", k, err)
		}
	}
	return n
}

// listed reports whether c is in st's list of roots. It skips the test
// when the store cannot list fetched files yet (see rootAdder).
func listed(t *testing.T, st *blockstore.Store, c cid.Cid) bool {
	t.Helper()
	if _, ok := any(st).(rootAdder); !ok {
		t.Skip("blockstore.Store has no AddRoot: fetched roots cannot be listed yet")
	}
	for _, r := range st.List() {
		if r.Equals(c) {
			return true
		}
	}
	return false
}

// progressLog records progress calls and checks their order.
type progressLog struct {
	t           testing.TB
	mu          sync.Mutex
	calls       int
	done, total int64
}

func (p *progressLog) report(done, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if done < p.done || done > total || (p.calls > 0 && total != p.total) {
		p.t.Errorf("progress(%d, %d) after (%d, %d)", done, total, p.done, p.total)
	}
	p.calls++
	p.done, p.total = done, total
}

func TestFetchFromPeer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	data := testBytes(1, fileSize)
	root := addFile(t, a.store, data)

	p := &progressLog{t: t}
	if err := b.svc.Fetch(ctx, root, p.report, FromPeers(a.info())); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, b.store, root); !bytes.Equal(got, data) {
		t.Fatalf("fetched %d bytes differ from the %d added", len(got), len(data))
	}
	if p.done != fileSize || p.total != fileSize {
		t.Errorf("progress ended at (%d, %d), want (%d, %d)", p.done, p.total, fileSize, fileSize)
	}
	if st := b.svc.Stats(); st.BlocksFetched != 14 || st.BytesFetched < fileSize {
		t.Errorf("B fetched %d blocks, %d bytes; want 14 blocks, over %d bytes", st.BlocksFetched, st.BytesFetched, fileSize)
	}
	if st := a.svc.Stats(); st.BlocksSent < 14 {
		t.Errorf("A sent %d blocks, want at least 14", st.BlocksSent)
	}

	// Again: everything is there, nothing is fetched.
	before := b.svc.Stats().BlocksFetched
	if err := b.svc.Fetch(ctx, root, nil); err != nil {
		t.Fatal(err)
	}
	if n := b.svc.Stats().BlocksFetched - before; n != 0 {
		t.Errorf("a second Fetch fetched %d blocks", n)
	}
}

func TestFetchListsRoot(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	root := addFile(t, a.store, testBytes(8, fileSize))
	if err := b.svc.Fetch(ctx, root, nil, FromPeers(a.info())); err != nil {
		t.Fatal(err)
	}
	if !listed(t, b.store, root) {
		t.Errorf("%s is not listed in B's store: %v", root, b.store.List())
	}
}

// TestFetchDeepDAG fetches a file of 175 chunks, whose root has internal
// nodes for children.
func TestFetchDeepDAG(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 44 MiB")
	}
	t.Parallel()
	// Slow under the race detector: give it more time than the others.
	ctx, cancel := context.WithTimeout(t.Context(), 3*testTimeout)
	defer cancel()
	const size = (blockstore.MaxLinks+1)*blockstore.ChunkSize + 1
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	data := testBytes(9, size)
	root := addFile(t, a.store, data)
	if ls := leaves(t, a.store, root); len(ls) != 2 || ls[0].Type() != cid.DagProtobuf {
		t.Fatalf("root has children %v, want two internal nodes", ls)
	}
	p := &progressLog{t: t}
	if err := b.svc.Fetch(ctx, root, p.report, FromPeers(a.info())); err != nil {
		t.Fatal(err)
	}
	if p.done != size {
		t.Errorf("progress ended at %d, want %d", p.done, size)
	}
	// 176 leaves, two internal nodes and the root.
	if n := b.svc.Stats().BlocksFetched; n != 179 {
		t.Errorf("fetched %d blocks, want 179", n)
	}
	if got := readFile(t, b.store, root); !bytes.Equal(got, data) {
		t.Fatal("fetched file differs")
	}
}

func TestFetchSmallFile(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	data := []byte(`{"tokenizer": "a small artifact"}`)
	root := addFile(t, a.store, data)
	if root.Type() != cid.Raw {
		t.Fatalf("root %s of a one-chunk file is not a raw leaf", root)
	}
	p := &progressLog{t: t}
	if err := b.svc.Fetch(ctx, root, p.report, FromPeers(a.info())); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, b.store, root); !bytes.Equal(got, data) {
		t.Fatalf("fetched %q, want %q", got, data)
	}
	if p.done != int64(len(data)) || p.total != int64(len(data)) {
		t.Errorf("progress ended at (%d, %d), want (%d, %[3]d)", p.done, p.total, len(data))
	}
}

func TestFetchCorruptProvider(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a := newNode(t, nil, nil)
	b := newNode(t, nil, nil, WithStallTimeout(2*time.Second))
	bad := addFile(t, a.store, testBytes(2, fileSize))
	good := addFile(t, a.store, testBytes(3, fileSize))
	badLeaf := leaves(t, a.store, bad)[5]
	corrupt(t, a.store, badLeaf)

	err := b.svc.Fetch(ctx, bad, nil, FromPeers(a.info()))
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("Fetch of a file with a corrupt block = %v, want ErrStalled", err)
	}
	if !strings.Contains(err.Error(), badLeaf.String()) {
		t.Errorf("the stall error does not name the block waited for, %s: %v", badLeaf, err)
	}
	t.Logf("fetch with a corrupt block at the provider: %v", err)
	if has, err := b.store.Blockstore().Has(ctx, badLeaf); err != nil || has {
		t.Errorf("B has the corrupt leaf %s: %v, %v", badLeaf, has, err)
	}
	for _, r := range b.store.List() {
		if r.Equals(bad) {
			t.Errorf("the incomplete file %s is listed", bad)
		}
	}
	if n := checkAllBlocks(t, b.store); n == 0 {
		t.Errorf("B stored none of the intact blocks")
	}

	if err := b.svc.Fetch(ctx, good, nil, FromPeers(a.info())); err != nil {
		t.Fatalf("Fetch of an intact file from the same peer: %v", err)
	}
	if err := b.store.Verify(ctx, good); err != nil {
		t.Fatal(err)
	}
	checkAllBlocks(t, b.store)
}

func TestFetchRepairsLocalCorruption(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	a, b := newNode(t, nil, nil), newNode(t, nil, nil)
	data := testBytes(4, fileSize)
	root := addFile(t, a.store, data)
	if err := b.svc.Fetch(ctx, root, nil, FromPeers(a.info())); err != nil {
		t.Fatal(err)
	}
	ls := leaves(t, b.store, root)
	corrupt(t, b.store, ls[3])
	corrupt(t, b.store, ls[7])
	if err := b.store.Verify(ctx, root); !errors.Is(err, blockstore.ErrCorrupt) {
		t.Fatalf("Verify after corrupting B's copy = %v, want ErrCorrupt", err)
	}

	before := b.svc.Stats().BlocksFetched
	if err := b.svc.Fetch(ctx, root, nil); err != nil {
		t.Fatal(err)
	}
	if n := b.svc.Stats().BlocksFetched - before; n != 2 {
		t.Errorf("repair fetched %d blocks, want 2", n)
	}
	if got := readFile(t, b.store, root); !bytes.Equal(got, data) {
		t.Fatal("repaired file differs")
	}
}

func TestFetchResume(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	const size = 8 << 20 // 32 leaves and a root
	const blocks = 33
	a := newNode(t, nil, nil)
	b := newNode(t, nil, nil, WithConcurrency(2))
	data := testBytes(5, size)
	root := addFile(t, a.store, data)

	// Interrupt the first fetch once half the file is in.
	fctx, fcancel := context.WithCancel(ctx)
	err := b.svc.Fetch(fctx, root, func(done, total int64) {
		if done >= total/2 {
			fcancel()
		}
	}, FromPeers(a.info()))
	fcancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted Fetch = %v, want context.Canceled", err)
	}
	have := checkAllBlocks(t, b.store)
	first := b.svc.Stats().BlocksFetched
	if have >= blocks || int64(have) != first {
		t.Fatalf("after the interruption B holds %d blocks and fetched %d, want as many and fewer than %d", have, first, blocks)
	}
	t.Logf("interrupted with %d of %d blocks", have, blocks)

	// Resume from what the store holds, with a new Service (and host).
	if err := b.svc.Close(); err != nil {
		t.Fatal(err)
	}
	svc, err := New(ctx, newHost(t), nil, b.store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	p := &progressLog{t: t}
	if err := svc.Fetch(ctx, root, p.report, FromPeers(a.info())); err != nil {
		t.Fatal(err)
	}
	if n := svc.Stats().BlocksFetched; n != int64(blocks-have) {
		t.Errorf("resumed Fetch fetched %d blocks, want the %d missing", n, blocks-have)
	}
	if p.done != size {
		t.Errorf("resumed progress ended at %d, want %d", p.done, size)
	}
	if got := readFile(t, b.store, root); !bytes.Equal(got, data) {
		t.Fatal("resumed file differs")
	}
}

func TestFetchErrors(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	defer cancel()
	b := newNode(t, nil, nil)
	root, err := blockstore.CID(bytes.NewReader(testBytes(6, 1000)))
	if err != nil {
		t.Fatal(err)
	}

	// A peer that is not listening, and no routing.
	gone := newHost(t)
	info := peer.AddrInfo{ID: gone.ID(), Addrs: gone.Addrs()}
	gone.Close()
	if err := b.svc.Fetch(ctx, root, nil, FromPeers(info)); !errors.Is(err, ErrUnreachable) {
		t.Errorf("Fetch from an unreachable peer = %v, want ErrUnreachable", err)
	}

	// Not a UnixFS file.
	dagCBOR := cid.NewCidV1(cid.DagCBOR, root.Hash())
	if err := b.svc.Fetch(ctx, dagCBOR, nil); !errors.Is(err, blockstore.ErrNotFile) {
		t.Errorf("Fetch of a dag-cbor CID = %v, want ErrNotFile", err)
	}

	if err := b.svc.Provide(ctx, root); !errors.Is(err, ErrNoRouting) {
		t.Errorf("Provide without routing = %v, want ErrNoRouting", err)
	}

	// Close interrupts a Fetch that waits for a block nobody has.
	errc := make(chan error, 1)
	go func() { errc <- b.svc.Fetch(ctx, root, nil) }()
	waitFor(ctx, t, "the want", func() bool { return slices.Contains(b.svc.bs.GetWantlist(), root) })
	if err := b.svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Errorf("Fetch interrupted by Close = %v, want ErrClosed", err)
	}
	if err := b.svc.Fetch(ctx, root, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Fetch after Close = %v, want ErrClosed", err)
	}

	if _, err := New(ctx, newHost(t), nil, newStore(t), WithConcurrency(0)); !errors.Is(err, ErrBadOption) {
		t.Errorf("New with concurrency 0 = %v, want ErrBadOption", err)
	}
}
