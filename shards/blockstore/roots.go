package blockstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	cid "github.com/ipfs/go-cid"
)

// rootRecord is one entry of roots.json.
type rootRecord struct {
	CID   string    `json:"cid"`
	Size  int64     `json:"size"`
	Added time.Time `json:"added"`
}

// rootsDoc is the content of roots.json.
type rootsDoc struct {
	Version int          `json:"version"`
	Roots   []rootRecord `json:"roots"`
}

func loadRoots(path string) ([]rootRecord, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("blockstore: read roots: %w", err)
	}
	var doc rootsDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("blockstore: parse %s: %w", path, err)
	}
	for _, r := range doc.Roots {
		if _, err := cid.Decode(r.CID); err != nil {
			return nil, fmt.Errorf("blockstore: parse %s: root %q: %w", path, r.CID, err)
		}
	}
	return doc.Roots, nil
}

// saveRoots writes roots.json atomically (temp file, fsync, rename).
// s.mu must be held.
func (s *Store) saveRoots() error {
	b, err := json.MarshalIndent(rootsDoc{Version: 1, Roots: s.roots}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(s.dir, rootsFile)
	f, err := os.CreateTemp(s.dir, rootsFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("blockstore: write roots: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("blockstore: write roots: %w", err)
	}
	return nil
}

// addRoot records c (once; a re-add refreshes size and time).
func (s *Store) addRoot(c cid.Cid, size int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	rec := rootRecord{CID: c.String(), Size: size, Added: time.Now().UTC()}
	old := s.roots
	s.roots = make([]rootRecord, 0, len(old)+1)
	for _, r := range old {
		if r.CID != rec.CID {
			s.roots = append(s.roots, r)
		}
	}
	s.roots = append(s.roots, rec)
	if err := s.saveRoots(); err != nil {
		s.roots = old
		return err
	}
	return nil
}

func (s *Store) removeRoot(c cid.Cid) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.roots
	s.roots = make([]rootRecord, 0, len(old))
	for _, r := range old {
		if r.CID != c.String() {
			s.roots = append(s.roots, r)
		}
	}
	if err := s.saveRoots(); err != nil {
		s.roots = old
		return err
	}
	return nil
}

func (s *Store) isRoot(c cid.Cid) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.roots {
		if r.CID == c.String() {
			return true
		}
	}
	return false
}

// List returns the roots of the files added with AddFile (and not
// removed), oldest first.
func (s *Store) List() []cid.Cid {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]cid.Cid, 0, len(s.roots))
	for _, r := range s.roots {
		c, err := cid.Decode(r.CID)
		if err == nil { // checked by loadRoots
			out = append(out, c)
		}
	}
	return out
}

// AddRoot lists c, whose blocks are all in the store already (put there
// by bitswap, say), as List lists a file added with AddFile, with its size
// taken from the root. It refuses a file with a missing block.
func (s *Store) AddRoot(ctx context.Context, c cid.Cid) error {
	if s.isClosed() {
		return ErrClosed
	}
	s.gc.RLock()
	defer s.gc.RUnlock()
	has, err := s.Has(ctx, c)
	if err != nil {
		return err
	}
	if !has {
		return fmt.Errorf("%w: %s is not complete in the store", ErrMissing, c)
	}
	r, size, err := s.openFile(ctx, c)
	if err != nil {
		return err
	}
	r.Close()
	return s.addRoot(c, size)
}
