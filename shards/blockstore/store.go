package blockstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/ipfs/boxo/blockservice"
	bstore "github.com/ipfs/boxo/blockstore"
	"github.com/ipfs/boxo/datastore/dshelp"
	dag "github.com/ipfs/boxo/ipld/merkledag"
	cid "github.com/ipfs/go-cid"
	flatfs "github.com/ipfs/go-ds-flatfs"
	ipld "github.com/ipfs/go-ipld-format"
)

// Layout of a store directory.
const (
	blocksDir = "blocks"     // flatfs datastore, one file per block
	rootsFile = "roots.json" // the list of added roots
)

// syncWrites makes flatfs fsync every block file (and its directory) as
// it is written, like kubo's default. See doc.go.
const syncWrites = true

// Store is a persistent, content-addressed store of UnixFS files. It is safe
// for concurrent use by multiple goroutines of one process; a directory must
// not be opened by two Stores (or processes) at once.
type Store struct {
	dir string
	fds *flatfs.Datastore

	raw      bstore.Blockstore // writes and Verify's own reads; no hashing
	verified bstore.Blockstore // every Get re-hashed
	addDAG   ipld.DAGService   // over raw, write-through
	readDAG  ipld.DAGService   // over verified

	// gc is held shared by AddFile and exclusively by Remove, so Remove
	// never deletes a block that an import in flight is about to reference.
	gc sync.RWMutex

	mu     sync.Mutex // guards roots and closed
	roots  []rootRecord
	closed bool
}

// Open opens the store in dir, creating dir and an empty store if needed.
// Close it when done.
func Open(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("blockstore: open %s: %w", dir, err)
	}
	fds, err := flatfs.CreateOrOpen(filepath.Join(dir, blocksDir), flatfs.NextToLast(2), syncWrites)
	if err != nil {
		return nil, fmt.Errorf("blockstore: open %s: %w", dir, err)
	}
	roots, err := loadRoots(filepath.Join(dir, rootsFile))
	if err != nil {
		fds.Close()
		return nil, err
	}
	// flatfs keeps each key as one file name, so the blocks live at the
	// datastore's top level (NoPrefix), as in kubo's flatfs mount.
	raw := bstore.NewBlockstore(fds, bstore.NoPrefix(), bstore.WriteThrough(true))
	verified := verifyingBlockstore{raw}
	s := &Store{
		dir:      dir,
		fds:      fds,
		raw:      raw,
		verified: verified,
		addDAG:   dag.NewDAGService(blockservice.New(raw, nil, blockservice.WriteThrough(true))),
		readDAG:  dag.NewDAGService(blockservice.New(verified, nil)),
		roots:    roots,
	}
	return s, nil
}

// Close releases the store. Readers opened from it must be closed first.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.fds.Close(); err != nil {
		return fmt.Errorf("blockstore: close: %w", err)
	}
	return nil
}

// Dir returns the directory the store lives in.
func (s *Store) Dir() string { return s.dir }

// Blockstore returns the store as a boxo blockstore, for bitswap. Its Get
// re-hashes every block and fails with a *BlockError wrapping ErrCorrupt
// rather than return bytes that do not match their CID; a miss wraps both
// ErrMissing and ipld.ErrNotFound. Put and PutMany always write (a block
// that is already there is rewritten, which repairs it).
func (s *Store) Blockstore() bstore.Blockstore { return s.verified }

// errUndefined is returned for cid.Undef.
var errUndefined = errors.New("blockstore: undefined CID")

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// AddFile imports r as a UnixFS file exactly as `ipfs add --cid-version=1
// --raw-leaves` would (see doc.go), stores its blocks, records the root in
// the list that List returns, and returns the root CID. progress, if not
// nil, is called from AddFile's goroutine with the number of bytes read so
// far, once per read from r. Adding a file that is already stored rewrites
// its blocks, which repairs any that were corrupted or lost.
func (s *Store) AddFile(ctx context.Context, r io.Reader, progress func(bytes int64)) (cid.Cid, error) {
	if s.isClosed() {
		return cid.Undef, ErrClosed
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	root, size, err := importFile(ctx, s.addDAG, r, progress)
	if err != nil {
		return cid.Undef, err
	}
	if err := s.addRoot(root, size); err != nil {
		return cid.Undef, err
	}
	return root, nil
}

// CID returns the root CID that AddFile (and `ipfs add --cid-version=1
// --raw-leaves`) gives r, storing nothing: blocks are hashed and dropped, so
// memory use does not grow with the size of r.
func CID(r io.Reader) (cid.Cid, error) {
	return CIDContext(context.Background(), r)
}

// CIDContext is CID with a context that can cancel a long computation.
func CIDContext(ctx context.Context, r io.Reader) (cid.Cid, error) {
	root, _, err := importFile(ctx, nullDAG(), r, nil)
	return root, err
}

// Open opens the UnixFS file c for reading and returns it with its size.
// Every block is re-hashed as it is read; a corrupt or missing block makes
// Read fail with a *BlockError (wrapping ErrCorrupt or ErrMissing) that
// names the block and its byte range in the file, and no byte of that block
// is returned. ctx bounds the whole life of the reader.
func (s *Store) Open(ctx context.Context, c cid.Cid) (io.ReadSeekCloser, int64, error) {
	if s.isClosed() {
		return nil, 0, ErrClosed
	}
	if !c.Defined() {
		return nil, 0, errUndefined
	}
	return s.openFile(ctx, c)
}

// Export writes the bytes of the UnixFS file c to w, with the same checks
// as Open. On a bad block it fails before writing any byte of that block.
func (s *Store) Export(ctx context.Context, c cid.Cid, w io.Writer) error {
	r, _, err := s.Open(ctx, c)
	if err != nil {
		return err
	}
	defer r.Close()
	buf := make([]byte, 1<<20)
	if _, err := io.CopyBuffer(writerOnly{w}, r, buf); err != nil {
		return err
	}
	return nil
}

// writerOnly hides a ReaderFrom of w, so that io.CopyBuffer reads r through
// our Read (and its error annotation).
type writerOnly struct{ io.Writer }

// Remove deletes the file c from the list of added roots and deletes every
// block of its DAG that no other added root uses. Blocks it cannot find
// are skipped; if an internal node of c is missing or corrupt, the blocks
// below it cannot be found and stay on disk.
func (s *Store) Remove(ctx context.Context, c cid.Cid) error {
	if s.isClosed() {
		return ErrClosed
	}
	s.gc.Lock()
	defer s.gc.Unlock()

	if !s.isRoot(c) {
		return fmt.Errorf("%w: %s", ErrUnknownRoot, c)
	}
	// Every block still used by another root stays (keyed by multihash, as
	// on disk). Below a missing or corrupt internal node of another root
	// nothing can be seen; those blocks are unreadable until that file is
	// re-added, which rewrites them all, so they need no protection.
	live := make(map[string]struct{})
	for _, r := range s.List() {
		if r.Equals(c) {
			continue
		}
		ls, err := s.links(ctx, r, false)
		if err != nil && !errors.Is(err, ErrNotFile) {
			return fmt.Errorf("blockstore: remove %s: list the blocks of %s: %w", c, r, err)
		}
		for _, l := range ls {
			live[string(l.Hash())] = struct{}{}
		}
	}
	ls, err := s.links(ctx, c, false)
	if err != nil && !errors.Is(err, ErrNotFile) {
		return fmt.Errorf("blockstore: remove %s: %w", c, err)
	}
	var doomed []cid.Cid
	for _, l := range ls {
		if _, ok := live[string(l.Hash())]; !ok {
			live[string(l.Hash())] = struct{}{} // delete once
			doomed = append(doomed, l)
		}
	}
	if err := s.removeRoot(c); err != nil {
		return err
	}
	for _, l := range doomed {
		if err := s.raw.DeleteBlock(ctx, l); err != nil && !ipld.IsNotFound(err) {
			return fmt.Errorf("blockstore: remove %s: delete block %s: %w", c, l, err)
		}
	}
	return nil
}

// blockPath returns the file that holds block c.
func (s *Store) blockPath(c cid.Cid) string {
	key := dshelp.MultihashToDsKey(c.Hash()).String()[1:]
	shard := key[len(key)-3 : len(key)-1] // flatfs next-to-last/2
	return filepath.Join(s.dir, blocksDir, shard, key+".data")
}
