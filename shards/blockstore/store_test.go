package blockstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	bstore "github.com/ipfs/boxo/blockstore"
	chunker "github.com/ipfs/boxo/chunker"
	"github.com/ipfs/boxo/ipld/unixfs/importer/balanced"
	"github.com/ipfs/boxo/ipld/unixfs/importer/helpers"
	blocks "github.com/ipfs/go-block-format"
	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

// gen returns n deterministic pseudo-random bytes: the little-endian bytes
// of successive outputs of splitmix64 (Steele, Lea, Flood 2014; the
// generator of java.util.SplittableRandom) started from state 0, truncated
// to n. The first 8 bytes are af cd 1d 7b 39 a8 20 e2 (0xe220a8397b1dcdaf).
// Every length is a prefix of the same stream.
func gen(n int) []byte {
	b := make([]byte, (n+7)/8*8)
	var x uint64
	for i := 0; i < len(b); i += 8 {
		x += 0x9e3779b97f4a7c15
		z := x
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		z ^= z >> 31
		binary.LittleEndian.PutUint64(b[i:], z)
	}
	return b[:n]
}

func TestGen(t *testing.T) {
	want := []byte{0xaf, 0xcd, 0x1d, 0x7b, 0x39, 0xa8, 0x20, 0xe2}
	if got := gen(8); !bytes.Equal(got, want) {
		t.Fatalf("gen(8) = % x, want % x", got, want)
	}
}

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func add(t testing.TB, s *Store, data []byte) cid.Cid {
	t.Helper()
	c, err := s.AddFile(context.Background(), bytes.NewReader(data), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func readAll(ctx context.Context, s *Store, c cid.Cid) ([]byte, int64, error) {
	r, size, err := s.Open(ctx, c)
	if err != nil {
		return nil, 0, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return b, size, err
}

// leaves returns the raw leaves of c in file order with their offsets.
func leaves(t *testing.T, s *Store, c cid.Cid) (cids []cid.Cid, starts, ends []int64) {
	t.Helper()
	err := s.walk(context.Background(), c, func(b cid.Cid, start, end int64) error {
		if b.Type() == cid.Raw {
			cids, starts, ends = append(cids, b), append(starts, start), append(ends, end)
		}
		return nil
	}, func(be *BlockError) error { return be })
	if err != nil {
		t.Fatal(err)
	}
	return cids, starts, ends
}

func flipByte(t *testing.T, path string, at int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x01
	if _, err := f.WriteAt(b[:], at); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	for _, n := range []int{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 3<<20 + 12345} {
		data := gen(n)
		var last int64
		c, err := s.AddFile(ctx, bytes.NewReader(data), func(b int64) {
			if b < last {
				t.Errorf("progress went back from %d to %d", last, b)
			}
			last = b
		})
		if err != nil {
			t.Fatalf("%d bytes: AddFile: %v", n, err)
		}
		if last != int64(n) {
			t.Errorf("%d bytes: progress ended at %d", n, last)
		}
		c2, err := CID(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if !c2.Equals(c) {
			t.Errorf("%d bytes: CID = %s, AddFile = %s", n, c2, c)
		}

		got, size, err := readAll(ctx, s, c)
		if err != nil {
			t.Fatalf("%d bytes: read: %v", n, err)
		}
		if size != int64(n) || !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: read back %d bytes (size %d), equal=%v", n, len(got), size, bytes.Equal(got, data))
		}
		var buf bytes.Buffer
		if err := s.Export(ctx, c, &buf); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(buf.Bytes(), data) {
			t.Fatalf("%d bytes: export differs", n)
		}
		if err := s.Verify(ctx, c); err != nil {
			t.Fatalf("%d bytes: Verify: %v", n, err)
		}
		if ok, err := s.Has(ctx, c); !ok || err != nil {
			t.Fatalf("%d bytes: Has = %v, %v", n, ok, err)
		}
	}
}

func TestSeek(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	data := gen(2*ChunkSize + 777)
	c := add(t, s, data)
	r, _, err := s.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, off := range []int64{ChunkSize + 5, 3, 2*ChunkSize + 700, 0} {
		if _, err := r.Seek(off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 70)
		n, err := io.ReadFull(r, b)
		if err != nil && err != io.ErrUnexpectedEOF {
			t.Fatal(err)
		}
		if !bytes.Equal(b[:n], data[off:off+int64(n)]) {
			t.Fatalf("at %d: wrong bytes", off)
		}
	}
}

func TestListPersistsAndRemove(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := gen(3 * ChunkSize)
	b := append(gen(2*ChunkSize), bytes.Repeat([]byte{7}, ChunkSize)...) // shares 2 leaves with a
	ca, cb := add(t, s, a), add(t, s, b)
	add(t, s, a) // re-add: listed once
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s, err = Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	l := s.List()
	if len(l) != 2 || !l[0].Equals(cb) || !l[1].Equals(ca) {
		t.Fatalf("List = %v, want [%s %s]", l, cb, ca)
	}
	got, _, err := readAll(ctx, s, ca)
	if err != nil || !bytes.Equal(got, a) {
		t.Fatalf("after reopen: %v", err)
	}

	if err := s.Remove(ctx, ca); err != nil {
		t.Fatal(err)
	}
	if l := s.List(); len(l) != 1 || !l[0].Equals(cb) {
		t.Fatalf("List after Remove = %v", l)
	}
	if ok, err := s.Has(ctx, ca); ok || err != nil {
		t.Fatalf("Has(removed) = %v, %v", ok, err)
	}
	// b, which shares leaves with a, is intact.
	if err := s.Verify(ctx, cb); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, ca); !errors.Is(err, ErrUnknownRoot) {
		t.Fatalf("second Remove: %v", err)
	}
	if err := s.Remove(ctx, cb); err != nil {
		t.Fatal(err)
	}
	// Nothing is left on disk.
	ch, err := s.Blockstore().AllKeysChan(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for k := range ch {
		t.Errorf("block %s left after removing every root", k)
	}
}

func TestCorruptBlock(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	data := gen(5*ChunkSize + 100)
	sibling := gen(4 * ChunkSize)[ChunkSize/2:] // no leaf in common with data
	c := add(t, s, data)
	cs := add(t, s, sibling)

	ls, starts, ends := leaves(t, s, c)
	if len(ls) != 6 {
		t.Fatalf("%d leaves", len(ls))
	}
	const bad = 3
	flipByte(t, s.blockPath(ls[bad]), 1000)

	// Verify names the block and its range, and wraps ErrCorrupt.
	err := s.Verify(ctx, c)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, bstore.ErrHashMismatch) {
		t.Fatalf("Verify: %v", err)
	}
	var be *BlockError
	if !errors.As(err, &be) {
		t.Fatalf("Verify: %T %v", err, err)
	}
	if !be.Block.Equals(ls[bad]) || !be.Root.Equals(c) || be.Start != starts[bad] || be.End != ends[bad] {
		t.Fatalf("Verify: %+v, want block %s [%d, %d)", be, ls[bad], starts[bad], ends[bad])
	}
	if !strings.Contains(err.Error(), ls[bad].String()) || !strings.HasPrefix(err.Error(), "blockstore: corrupt block") {
		t.Fatalf("message: %q", err)
	}
	t.Logf("Verify: %v", err)

	// Reading fails at the bad block and never returns its bytes.
	r, _, err := s.Open(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &be) || !be.Block.Equals(ls[bad]) {
		t.Fatalf("read: %v", err)
	}
	if be.Start != starts[bad] || be.End != ends[bad] {
		t.Errorf("read error range [%d, %d), want [%d, %d)", be.Start, be.End, starts[bad], ends[bad])
	}
	if int64(len(got)) > starts[bad] || !bytes.Equal(got, data[:len(got)]) {
		t.Fatalf("read returned %d bytes before failing; the bad block starts at %d", len(got), starts[bad])
	}
	t.Logf("read: %d good bytes, then %v", len(got), err)

	// Export fails too, and a seek past the bad block still reads.
	if err := s.Export(ctx, c, io.Discard); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Export: %v", err)
	}
	r, _, _ = s.Open(ctx, c)
	if _, err := r.Seek(ends[bad], io.SeekStart); err != nil {
		t.Fatal(err)
	}
	tail, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(tail, data[ends[bad]:]) {
		t.Fatalf("read after the bad block: %v", err)
	}

	// The boxo blockstore (for bitswap) refuses to hand the block out.
	if _, err := s.Blockstore().Get(ctx, ls[bad]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Blockstore().Get: %v", err)
	}

	// The sibling is fine.
	if err := s.Verify(ctx, cs); err != nil {
		t.Fatalf("sibling: %v", err)
	}
	if got, _, err := readAll(ctx, s, cs); err != nil || !bytes.Equal(got, sibling) {
		t.Fatalf("sibling read: %v", err)
	}

	// Re-adding the file repairs it.
	add(t, s, data)
	if err := s.Verify(ctx, c); err != nil {
		t.Fatalf("after re-add: %v", err)
	}
}

func TestCorruptInternalNode(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	data := gen(3 * ChunkSize)
	c := add(t, s, data)
	if c.Type() != cid.DagProtobuf {
		t.Fatal("root is not dag-pb")
	}
	path := s.blockPath(c)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, path, fi.Size()-3)

	err = s.Verify(ctx, c)
	var be *BlockError
	if !errors.Is(err, ErrCorrupt) || !errors.As(err, &be) || !be.Block.Equals(c) {
		t.Fatalf("Verify: %v", err)
	}
	if _, _, err := s.Open(ctx, c); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v", err)
	}
	if ok, err := s.Has(ctx, c); ok || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Has: %v, %v", ok, err)
	}
}

func TestMultipleCorrupt(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	c := add(t, s, gen(6*ChunkSize))
	ls, _, _ := leaves(t, s, c)
	flipByte(t, s.blockPath(ls[4]), 7)
	flipByte(t, s.blockPath(ls[1]), 7)
	if err := os.Remove(s.blockPath(ls[5])); err != nil {
		t.Fatal(err)
	}
	err := s.Verify(ctx, c)
	var be *BlockError
	if !errors.As(err, &be) || !be.Block.Equals(ls[1]) { // first in file order
		t.Fatalf("Verify: %v", err)
	}
	if !errors.Is(err, ErrMissing) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify: %v", err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 3 {
		t.Fatalf("Verify reports %d errors, want 3:\n%v", n, err)
	}
}

func TestMissingBlock(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	data := gen(4*ChunkSize + 1)
	c := add(t, s, data)
	ls, starts, ends := leaves(t, s, c)
	const gone = 2
	if err := s.Blockstore().DeleteBlock(ctx, ls[gone]); err != nil {
		t.Fatal(err)
	}

	err := s.Verify(ctx, c)
	var be *BlockError
	if !errors.Is(err, ErrMissing) || !errors.As(err, &be) {
		t.Fatalf("Verify: %v", err)
	}
	if !be.Block.Equals(ls[gone]) || be.Start != starts[gone] || be.End != ends[gone] {
		t.Fatalf("Verify: %+v", be)
	}
	if !strings.Contains(err.Error(), ls[gone].String()) || !strings.HasPrefix(err.Error(), "blockstore: missing block") {
		t.Fatalf("message: %q", err)
	}
	t.Logf("Verify: %v", err)

	if ok, err := s.Has(ctx, c); ok || err != nil {
		t.Fatalf("Has = %v, %v", ok, err)
	}
	_, _, err = readAll(ctx, s, c)
	if !errors.Is(err, ErrMissing) || !errors.As(err, &be) || !be.Block.Equals(ls[gone]) || be.Start != starts[gone] {
		t.Fatalf("read: %v", err)
	}
	// boxo sees a plain miss.
	if _, err := s.Blockstore().Get(ctx, ls[gone]); !ipld.IsNotFound(err) || !errors.Is(err, ErrMissing) {
		t.Fatalf("Blockstore().Get: %v", err)
	}

	// A missing root.
	other, err := CID(bytes.NewReader(gen(10)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Verify(ctx, other); !errors.Is(err, ErrMissing) {
		t.Fatalf("Verify(absent): %v", err)
	}
	if _, _, err := s.Open(ctx, other); !errors.Is(err, ErrMissing) {
		t.Fatalf("Open(absent): %v", err)
	}
}

func TestMissingInternalNode(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	// 174 leaves fill one internal node; one more makes a second level.
	data := gen(MaxLinks*ChunkSize + 1)
	c := add(t, s, data)
	if want := kuboVectors[len(kuboVectors)-1]; c.String() != want.cid {
		t.Fatalf("AddFile = %s, kubo prints %s for %s", c, want.cid, want.name)
	}
	var mid cid.Cid
	var midStart, midEnd int64
	err := s.walk(ctx, c, func(b cid.Cid, start, end int64) error {
		if b.Type() == cid.DagProtobuf && !b.Equals(c) && !mid.Defined() {
			mid, midStart, midEnd = b, start, end
		}
		return nil
	}, func(be *BlockError) error { return be })
	if err != nil || !mid.Defined() {
		t.Fatalf("no second-level node: %v", err)
	}
	if midStart != 0 || midEnd != MaxLinks*ChunkSize {
		t.Fatalf("first child of the root holds [%d, %d)", midStart, midEnd)
	}
	if want := kuboVectors[len(kuboVectors)-2]; mid.String() != want.cid {
		t.Fatalf("first child of the root is %s, want %s (%s)", mid, want.cid, want.name)
	}
	if err := os.Remove(s.blockPath(mid)); err != nil {
		t.Fatal(err)
	}
	err = s.Verify(ctx, c)
	var be *BlockError
	if !errors.Is(err, ErrMissing) || !errors.As(err, &be) || !be.Block.Equals(mid) || be.Start != 0 || be.End != midEnd {
		t.Fatalf("Verify: %v", err)
	}
	t.Logf("Verify: %v", err)
	if _, _, err := readAll(ctx, s, c); !errors.Is(err, ErrMissing) {
		t.Fatalf("read: %v", err)
	}
}

func TestNotFile(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	if _, _, err := s.Open(ctx, cid.Undef); err == nil {
		t.Fatal("Open(Undef) worked")
	}
	// A UnixFS directory node is not a file.
	dirNode := []byte{0x0a, 0x02, 0x08, 0x01} // PBNode{Data: Data{Type: Directory}}
	c, err := cid.Prefix{Version: 1, Codec: cid.DagProtobuf, MhType: 0x12, MhLength: -1}.Sum(dirNode)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.raw.Put(ctx, mustBlock(t, dirNode, c)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Open(ctx, c); !errors.Is(err, ErrNotFile) {
		t.Fatalf("Open(dir): %v", err)
	}
	if err := s.Verify(ctx, c); !errors.Is(err, ErrNotFile) {
		t.Fatalf("Verify(dir): %v", err)
	}
}

func TestCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	s := openTemp(t)
	_, err := s.AddFile(ctx, io.LimitReader(infinite{}, 64<<20), func(n int64) {
		if n > 3*ChunkSize {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("AddFile: %v", err)
	}
	if len(s.List()) != 0 {
		t.Fatal("cancelled add was listed")
	}
}

func TestClosed(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.AddFile(context.Background(), strings.NewReader("x"), nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddFile after Close: %v", err)
	}
}

type infinite struct{}

func (infinite) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

func mustBlock(t *testing.T, data []byte, c cid.Cid) blocks.Block {
	t.Helper()
	b, err := blocks.NewBlockWithCid(data, c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// genReader streams the bytes of gen(n) without holding them.
type genReader struct {
	x    uint64
	left int64
	buf  [8]byte
	nbuf int // unread bytes at the end of buf
}

func newGenReader(n int64) *genReader { return &genReader{left: n} }

func (g *genReader) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n := 0
	for n < len(p) {
		if g.nbuf == 0 {
			g.x += 0x9e3779b97f4a7c15
			z := g.x
			z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
			z = (z ^ (z >> 27)) * 0x94d049bb133111eb
			z ^= z >> 31
			binary.LittleEndian.PutUint64(g.buf[:], z)
			g.nbuf = 8
		}
		c := copy(p[n:], g.buf[8-g.nbuf:])
		g.nbuf -= c
		n += c
	}
	g.left -= int64(n)
	return n, nil
}

func TestGenReader(t *testing.T) {
	const n = 3*ChunkSize + 5
	got, err := io.ReadAll(io.LimitReader(newGenReader(n), n))
	if err != nil || !bytes.Equal(got, gen(n)) {
		t.Fatal("genReader differs from gen")
	}
}

// TestCIDMemory checks that CID streams: hashing 256 MiB keeps the heap
// far below the file size. The root is also a kubo vector.
func TestCIDMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("hashes 256 MiB")
	}
	const size = 256 << 20
	r := &heapSampler{r: newGenReader(size)}
	c, err := CID(r)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CID %s, peak live heap %d MiB over %d reads", c, r.peak>>20, r.reads)
	if c.String() != kuboGen256MiB {
		t.Errorf("CID = %s, kubo prints %s", c, kuboGen256MiB)
	}
	if r.peak == 0 || r.peak > 32<<20 {
		t.Fatalf("peak live heap %d MiB while hashing a %d MiB stream", r.peak>>20, size>>20)
	}
}

// heapSampler samples the live heap every 64 reads.
type heapSampler struct {
	r     io.Reader
	reads int
	peak  uint64
}

func (h *heapSampler) Read(p []byte) (int, error) {
	h.reads++
	if h.reads%64 == 0 {
		runtime.GC() // count what is kept, not garbage
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.peak = max(h.peak, ms.HeapAlloc)
	}
	return h.r.Read(p)
}

// TestConcurrent runs imports, reads, verifies and a removal at once (for
// the race detector).
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	shared := gen(2 * ChunkSize)
	victim := add(t, s, append(append([]byte{}, shared...), 1, 2, 3))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 4 {
		wg.Go(func() {
			data := append(append([]byte{}, shared...), bytes.Repeat([]byte{byte(i)}, ChunkSize+i)...)
			c, err := s.AddFile(ctx, bytes.NewReader(data), nil)
			if err != nil {
				errs <- err
				return
			}
			got, _, err := readAll(ctx, s, c)
			if err != nil || !bytes.Equal(got, data) {
				errs <- fmt.Errorf("read back %d: %v", i, err)
				return
			}
			if err := s.Verify(ctx, c); err != nil {
				errs <- err
			}
		})
	}
	wg.Go(func() {
		if err := s.Remove(ctx, victim); err != nil {
			errs <- err
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The leaves shared with the removed file survive in every other one.
	for _, c := range s.List() {
		if err := s.Verify(ctx, c); err != nil {
			t.Error(err)
		}
	}
	if n := len(s.List()); n != 4 {
		t.Errorf("%d roots listed, want 4", n)
	}
}

// TestForeignLayout reads and verifies a UnixFS file made with other
// parameters than ours: CIDv0, dag-pb leaves (kubo's plain `ipfs add`).
func TestForeignLayout(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	data := gen(5*ChunkSize + 9)
	db, err := (&helpers.DagBuilderParams{Maxlinks: 3, Dagserv: s.addDAG}).New(chunker.NewSizeSplitter(bytes.NewReader(data), ChunkSize))
	if err != nil {
		t.Fatal(err)
	}
	nd, err := balanced.Layout(db)
	if err != nil {
		t.Fatal(err)
	}
	c := nd.Cid()
	if c.Version() != 0 {
		t.Fatalf("root %s is not CIDv0", c)
	}
	if err := s.Verify(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, size, err := readAll(ctx, s, c)
	if err != nil || size != int64(len(data)) || !bytes.Equal(got, data) {
		t.Fatalf("read: %v", err)
	}
	// Corrupt a dag-pb leaf: the 4th chunk.
	var leaf cid.Cid
	var start int64
	n := 0
	s.walk(ctx, c, func(b cid.Cid, st, _ int64) error {
		if len(must(s.raw.Get(ctx, b)).RawData()) > ChunkSize {
			if n == 3 {
				leaf, start = b, st
			}
			n++
		}
		return nil
	}, func(be *BlockError) error { return be })
	if !leaf.Defined() {
		t.Fatal("no 4th leaf")
	}
	flipByte(t, s.blockPath(leaf), 100)
	var be *BlockError
	if err := s.Verify(ctx, c); !errors.As(err, &be) || !be.Block.Equals(leaf) || be.Start != start || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Verify: %v", err)
	}
	if _, _, err := readAll(ctx, s, c); !errors.As(err, &be) || !be.Block.Equals(leaf) || be.Start != start {
		t.Fatalf("read: %v", err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
