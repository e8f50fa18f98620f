package blockstore

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"

	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

// maxReported caps the number of bad blocks one Verify error lists.
const maxReported = 16

// Verify reads every block of the file DAG under c, re-hashes it and checks
// it against its CID (and its size against what its parent records). It
// returns nil if all is well. Otherwise the error is a *BlockError
// (wrapping ErrCorrupt or ErrMissing, naming the block, the file and the
// block's byte range in it) when one block is bad, or several such errors
// joined with errors.Join, in file order, when more are; errors.As with a
// *BlockError gives the first. Leaves are hashed on all cores.
func (s *Store) Verify(ctx context.Context, c cid.Cid) error {
	if s.isClosed() {
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type job struct {
		c          cid.Cid
		start, end int64
	}
	var (
		mu      sync.Mutex
		bad     []*BlockError
		fatal   error
		nBad    int
		workers = max(runtime.GOMAXPROCS(0), 2)
		jobs    = make(chan job, 2*workers)
		wg      sync.WaitGroup
	)
	report := func(be *BlockError) {
		be.Root = c
		mu.Lock()
		bad = append(bad, be)
		nBad++
		mu.Unlock()
	}
	fail := func(err error) {
		mu.Lock()
		if fatal == nil {
			fatal = err
		}
		mu.Unlock()
		cancel()
	}
	for range workers {
		wg.Go(func() {
			for j := range jobs {
				blk, err := s.raw.Get(ctx, j.c)
				if ipld.IsNotFound(err) {
					be := newBlockError(ErrMissing, j.c, err)
					be.Start, be.End = j.start, j.end
					report(be)
					continue
				}
				if err != nil {
					fail(fmt.Errorf("blockstore: verify %s: read block %s: %w", c, j.c, err))
					continue
				}
				data := blk.RawData()
				var be *BlockError
				if err := checkBlock(j.c, data); err != nil {
					if !errors.As(err, &be) {
						fail(err)
						continue
					}
				} else if j.end >= 0 && int64(len(data)) != j.end-j.start {
					be = newBlockError(ErrCorrupt, j.c,
						fmt.Errorf("it holds %d bytes, not the %d its parent records", len(data), j.end-j.start))
				}
				if be != nil {
					be.Start, be.End = j.start, j.end
					report(be)
				}
			}
		})
	}

	seen := make(map[cid.Cid]struct{})
	walkErr := s.walk(ctx, c, func(b cid.Cid, start, end int64) error {
		if b.Type() != cid.Raw {
			return nil // the walk reads and checks it
		}
		if _, ok := seen[b]; ok {
			return nil // a repeated leaf (say, of zeros) is checked once
		}
		seen[b] = struct{}{}
		select {
		case jobs <- job{b, start, end}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, func(be *BlockError) error {
		report(be)
		return nil
	})
	close(jobs)
	wg.Wait()

	if fatal != nil {
		return fatal
	}
	if walkErr != nil {
		return walkErr
	}
	if len(bad) == 0 {
		return nil
	}
	sort.SliceStable(bad, func(i, j int) bool { return bad[i].Start < bad[j].Start })
	if len(bad) == 1 {
		return bad[0]
	}
	errs := make([]error, 0, maxReported+1)
	for i, be := range bad {
		if i == maxReported {
			errs = append(errs, fmt.Errorf("blockstore: and %d more bad blocks in %s", nBad-maxReported, c))
			break
		}
		errs = append(errs, be)
	}
	return errors.Join(errs...)
}

// Has reports whether every block of the file DAG under c is in the store.
// It does not re-hash leaves (Verify does); internal nodes are read and
// checked, and a corrupt one is returned as an error.
func (s *Store) Has(ctx context.Context, c cid.Cid) (bool, error) {
	if s.isClosed() {
		return false, ErrClosed
	}
	err := s.walk(ctx, c, func(b cid.Cid, start, end int64) error {
		if b.Type() != cid.Raw {
			return nil
		}
		ok, err := s.raw.Has(ctx, b)
		if err != nil {
			return err
		}
		if !ok {
			return newBlockError(ErrMissing, b, nil)
		}
		return nil
	}, func(be *BlockError) error { return be })
	if errors.Is(err, ErrMissing) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, nil
}

// links returns every block CID of the DAG under c. With strict, a missing
// or corrupt internal node is an error; without, its subtree is skipped.
func (s *Store) links(ctx context.Context, c cid.Cid, strict bool) ([]cid.Cid, error) {
	var out []cid.Cid
	err := s.walk(ctx, c, func(b cid.Cid, _, _ int64) error {
		out = append(out, b)
		return nil
	}, func(be *BlockError) error {
		if strict {
			return be
		}
		return nil
	})
	return out, err
}
