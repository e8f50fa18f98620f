package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bstore "github.com/ipfs/boxo/blockstore"
	exchange "github.com/ipfs/boxo/exchange"
	dag "github.com/ipfs/boxo/ipld/merkledag"
	ft "github.com/ipfs/boxo/ipld/unixfs"
	pb "github.com/ipfs/boxo/ipld/unixfs/pb"
	"github.com/ipfs/boxo/verifcid"
	blocks "github.com/ipfs/go-block-format"
	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/sync/errgroup"

	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// rootAdder is the store method Fetch needs to list a fetched file as
// AddFile lists an added one: record c, whose blocks are all in the store,
// in the list that List returns. blockstore.Store has no such method yet;
// until it does, Fetch stores and verifies the file but does not list it.
type rootAdder interface {
	AddRoot(ctx context.Context, c cid.Cid) error
}

// protectSeq numbers the connection-manager tags of Fetches, so that one
// Fetch's Unprotect does not drop another's protection.
var protectSeq atomic.Uint64

// Fetch fetches the UnixFS file c (its whole DAG) into the store, checks
// it, and lists it in the store as AddFile would have (see doc.go).
//
// Blocks already in the store are not fetched again, so a Fetch that was
// interrupted resumes where it stopped, and fetching a file that is
// complete only re-checks it. Every block received is hashed and compared
// with its CID before it is stored; at the end the whole file is checked
// with the store's Verify, and blocks found corrupt there (bad bytes on
// our disk) are fetched again.
//
// progress, if not nil, is called with the bytes of the file stored so far
// and the file's size: first with done = 0 once the root is in, then as
// blocks arrive, done never decreasing and reaching total when Fetch
// succeeds. Calls come one at a time from Fetch's goroutines and should
// return quickly.
//
// Fetch returns an error wrapping ErrStalled when no block came for the
// stall timeout, ErrClosed when Close interrupted it, ctx's error when ctx
// was done, blockstore.ErrNotFile when c is not a UnixFS file, and a
// *blockstore.BlockError when the stored file fails its final check.
func (s *Service) Fetch(ctx context.Context, c cid.Cid, progress func(done, total int64), opts ...FetchOption) error {
	var fc fetchConfig
	for _, o := range opts {
		if err := o(&fc); err != nil {
			return err
		}
	}
	if err := checkCID(c); err != nil {
		return fmt.Errorf("fetch: %s: %w", c, err)
	}
	if !s.begin() {
		return ErrClosed
	}
	defer s.running.Done()

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() { // exits when Fetch returns, at the latest
		select {
		case <-s.closing:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	log := s.log.With("shard", c.String())
	start := time.Now()

	if len(fc.peers) > 0 {
		release, err := s.connect(ctx, fc.peers, log)
		defer release()
		if err != nil {
			return s.fail(ctx, c, err)
		}
	}

	sess := s.bs.NewSession(ctx)
	repaired := make(map[cid.Cid]struct{})
	report := progress
	for {
		if err := s.walk(ctx, sess, c, report); err != nil {
			return s.fail(ctx, c, err)
		}
		err := s.store.Verify(ctx, c)
		if err == nil {
			break
		}
		bad := blockErrors(err)
		if len(bad) == 0 {
			return s.fail(ctx, c, err)
		}
		for _, be := range bad {
			if _, again := repaired[be.Block]; again {
				// Fetched afresh and still bad: not a matter of a
				// damaged local copy.
				return s.fail(ctx, c, err)
			}
			repaired[be.Block] = struct{}{}
			if errors.Is(be, blockstore.ErrCorrupt) {
				// The next walk finds it missing and fetches it.
				if err := s.store.Blockstore().DeleteBlock(ctx, be.Block); err != nil && !ipld.IsNotFound(err) {
					return s.fail(ctx, c, err)
				}
			}
		}
		log.Warn("fetch: fetching bad blocks again", "blocks", len(bad), "err", err)
		// The first walk has reported every byte; the repair walks count
		// the same bytes again, so they report nothing.
		report = nil
	}

	if ra, ok := any(s.store).(rootAdder); ok {
		if err := ra.AddRoot(ctx, c); err != nil {
			return s.fail(ctx, c, err)
		}
	} else {
		log.Debug("fetch: stored, but the store cannot list fetched roots")
	}
	log.Debug("fetch: done", "elapsed", time.Since(start))
	return nil
}

// fail wraps err, replacing a cancellation by its cause (ErrClosed, or the
// caller's context error).
func (s *Service) fail(ctx context.Context, c cid.Cid, err error) error {
	if ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return fmt.Errorf("fetch: %s: %w", c, err)
}

// connect connects to peers in parallel and protects the connections from
// the connection manager until release is called.
func (s *Service) connect(ctx context.Context, peers []peer.AddrInfo, log *slog.Logger) (release func(), err error) {
	tag := fmt.Sprintf("pipeshard-fetch-%d", protectSeq.Add(1))
	var (
		mu        sync.Mutex
		protected []peer.ID
		errs      []error
		wg        sync.WaitGroup
	)
	for _, p := range peers {
		if p.ID == s.h.ID() {
			continue
		}
		wg.Go(func() {
			err := s.h.Connect(ctx, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				log.Debug("fetch: cannot connect", "peer", p.ID, "err", err)
				errs = append(errs, fmt.Errorf("connect %s: %w", p.ID, err))
				return
			}
			s.h.ConnManager().Protect(p.ID, tag)
			protected = append(protected, p.ID)
		})
	}
	wg.Wait()
	release = func() {
		for _, p := range protected {
			s.h.ConnManager().Unprotect(p, tag)
		}
	}
	if len(protected) == 0 && len(errs) > 0 && s.rt == nil {
		return release, fmt.Errorf("%w: %w", ErrUnreachable, errors.Join(errs...))
	}
	return release, nil
}

// walk makes one pass over the DAG under root in file order: it reads
// each internal node (from the store, or the network when missing or
// corrupt), and makes sure every leaf is in the store, fetching the missing
// ones with up to the configured concurrency.
func (s *Service) walk(ctx context.Context, sess exchange.Fetcher, root cid.Cid, progress func(done, total int64)) error {
	ctx, stall := context.WithCancelCause(ctx)
	defer stall(nil)
	r := &run{
		s:        s,
		sess:     sess,
		bs:       s.store.Blockstore(),
		kick:     make(chan struct{}, 1),
		progress: progress,
		waiting:  make(map[cid.Cid]struct{}),
	}
	if d := s.cfg.stallTimeout; d > 0 {
		go watchdog(ctx, d, r.kick, stall) // exits when ctx is done
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.cfg.concurrency + 1) // the walker and its fetches
	r.g = g
	g.Go(func() error { return r.walkRoot(gctx, root) })
	err := g.Wait()
	if err != nil && ctx.Err() != nil {
		// Interrupted from outside (the watchdog, Close, the caller):
		// say why rather than "context canceled".
		err = context.Cause(ctx)
		if errors.Is(err, ErrStalled) {
			err = fmt.Errorf("%w; waiting for %s", err, r.waitingFor())
		}
	}
	return err
}

// watchdog cancels ctx with ErrStalled when nothing arrives on kick for d.
func watchdog(ctx context.Context, d time.Duration, kick <-chan struct{}, cancel context.CancelCauseFunc) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			t.Reset(d)
		case <-t.C:
			cancel(ErrStalled)
			return
		}
	}
}

// run is one walk over a file's DAG.
type run struct {
	s        *Service
	sess     exchange.Fetcher
	bs       bstore.Blockstore // the store's, verifying on Get
	g        *errgroup.Group
	kick     chan struct{} // a block came; buffered, never blocks
	progress func(done, total int64)

	mu          sync.Mutex // guards done, total, waiting and the calls to progress
	done, total int64
	waiting     map[cid.Cid]struct{} // blocks asked of the network, not yet come
}

// walkRoot reads the root, learns the file size from it and walks it.
func (r *run) walkRoot(ctx context.Context, root cid.Cid) error {
	blk, err := r.node(ctx, root)
	if err != nil {
		return err
	}
	if root.Type() == cid.Raw { // a one-chunk file is its own root
		n := int64(len(blk.RawData()))
		r.start(n)
		r.add(n)
		return nil
	}
	fsn, links, err := decodeFile(root, blk.RawData())
	if err != nil {
		return err
	}
	r.start(int64(fsn.FileSize()))
	return r.walkNode(ctx, fsn, links)
}

// walkNode makes sure that every child of a dag-pb node is in the store,
// in order: leaves and internal nodes alike are handed to the group's
// workers, then the internal children are walked in turn as their blocks
// come in.
func (r *run) walkNode(ctx context.Context, fsn *ft.FSNode, links []*ipld.Link) error {
	r.add(int64(len(fsn.Data())))
	ready := make([]chan struct{}, len(links))
	for i, l := range links {
		if err := ctx.Err(); err != nil {
			return err
		}
		c := l.Cid
		if err := checkCID(c); err != nil {
			return err
		}
		if c.Type() == cid.Raw {
			size := int64(fsn.BlockSize(i))
			r.g.Go(func() error {
				if err := r.ensure(ctx, c); err != nil {
					return err
				}
				r.add(size)
				return nil
			})
			continue
		}
		ch := make(chan struct{})
		ready[i] = ch
		r.g.Go(func() error {
			defer close(ch)
			return r.ensure(ctx, c)
		})
	}
	for i, l := range links {
		if ready[i] == nil {
			continue
		}
		select {
		case <-ready[i]:
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := ctx.Err(); err != nil { // the fetch may have failed
			return err
		}
		blk, err := r.node(ctx, l.Cid)
		if err != nil {
			return err
		}
		cfsn, clinks, err := decodeFile(l.Cid, blk.RawData())
		if err != nil {
			return err
		}
		if err := r.walkNode(ctx, cfsn, clinks); err != nil {
			return err
		}
	}
	return nil
}

// ensure makes sure block c is in the store, fetching it if it is not.
// It does not read a block that is there (Verify checks it at the end).
func (r *run) ensure(ctx context.Context, c cid.Cid) error {
	has, err := r.bs.Has(ctx, c)
	if err != nil {
		return fmt.Errorf("read block %s: %w", c, err)
	}
	if has {
		r.alive()
		return nil
	}
	_, err = r.fetchBlock(ctx, c)
	return err
}

// node returns block c, read (and re-hashed) from the store, or fetched
// when it is missing there or corrupt (the fetched block replaces it).
func (r *run) node(ctx context.Context, c cid.Cid) (blocks.Block, error) {
	blk, err := r.bs.Get(ctx, c)
	switch {
	case err == nil:
		r.alive()
		return blk, nil
	case errors.Is(err, blockstore.ErrCorrupt):
		r.s.log.Warn("fetch: fetching a corrupt block again", "block", c.String(), "err", err)
	case ipld.IsNotFound(err):
	default:
		return nil, err
	}
	return r.fetchBlock(ctx, c)
}

// fetchBlock gets block c from the network, checks its hash and stores it.
func (r *run) fetchBlock(ctx context.Context, c cid.Cid) (blocks.Block, error) {
	r.mu.Lock()
	r.waiting[c] = struct{}{}
	r.mu.Unlock()
	got, err := r.sess.GetBlock(ctx, c)
	if err != nil { // still waited for, as a stall error says

		return nil, fmt.Errorf("get block %s: %w", c, err)
	}
	data := got.RawData()
	if err := checkHash(c, data); err != nil {
		return nil, err
	}
	// Keyed by c: bitswap names a block with the codec the sender gave.
	blk, err := blocks.NewBlockWithCid(data, c)
	if err != nil {
		return nil, err
	}
	if err := r.bs.Put(ctx, blk); err != nil {
		return nil, fmt.Errorf("store block %s: %w", c, err)
	}
	r.mu.Lock()
	delete(r.waiting, c)
	r.mu.Unlock()
	r.s.blocksFetched.Add(1)
	r.s.bytesFetched.Add(int64(len(data)))
	r.alive()
	// Tell bitswap, so that it serves the block to peers that want it.
	if err := r.s.bs.NotifyNewBlocks(ctx, blk); err != nil {
		r.s.log.Debug("fetch: notify bitswap", "block", c.String(), "err", err)
	}
	return blk, nil
}

// maxNamed caps the blocks a stall error names.
const maxNamed = 4

// waitingFor names the blocks that were asked of the network and have not
// come.
func (r *run) waitingFor() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var names []string
	for c := range r.waiting {
		if len(names) == maxNamed {
			names = append(names, fmt.Sprintf("and %d more", len(r.waiting)-maxNamed))
			break
		}
		names = append(names, c.String())
	}
	switch len(names) {
	case 0:
		return "no block"
	case 1:
		return "block " + names[0]
	}
	return fmt.Sprintf("%d blocks: %s", len(r.waiting), strings.Join(names, ", "))
}

// alive tells the watchdog that a block came.
func (r *run) alive() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// start sets the file size and reports that nothing is stored yet.
func (r *run) start(total int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total = total
	if r.progress != nil {
		r.progress(0, total)
	}
}

// add counts n more bytes of the file as stored.
func (r *run) add(n int64) {
	if n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done += n
	if r.progress != nil {
		r.progress(r.done, r.total)
	}
}

// checkCID accepts the CIDs a UnixFS file DAG is made of: raw or dag-pb
// blocks, with a hash function that boxo deems secure.
func checkCID(c cid.Cid) error {
	if !c.Defined() {
		return fmt.Errorf("%w: undefined CID", blockstore.ErrNotFile)
	}
	if t := c.Type(); t != cid.Raw && t != cid.DagProtobuf {
		return fmt.Errorf("%w: block %s has codec 0x%x", blockstore.ErrNotFile, c, t)
	}
	if err := verifcid.ValidateCid(verifcid.DefaultAllowlist, c); err != nil {
		return fmt.Errorf("block %s: %w", c, err)
	}
	return nil
}

// checkHash re-hashes data with c's hash function and compares.
func checkHash(c cid.Cid, data []byte) error {
	got, err := c.Prefix().Sum(data)
	if err != nil {
		return fmt.Errorf("hash block %s: %w", c, err)
	}
	if !got.Equals(c) {
		return fmt.Errorf("%w: %s (its %d bytes hash to %s)", ErrBadBlock, c, len(data), got)
	}
	return nil
}

// decodeFile decodes a dag-pb UnixFS file node.
func decodeFile(c cid.Cid, data []byte) (*ft.FSNode, []*ipld.Link, error) {
	pn, err := dag.DecodeProtobuf(data)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: block %s: %w", blockstore.ErrNotFile, c, err)
	}
	fsn, err := ft.FSNodeFromBytes(pn.Data())
	if err != nil {
		return nil, nil, fmt.Errorf("%w: block %s: %w", blockstore.ErrNotFile, c, err)
	}
	if t := fsn.Type(); t != pb.Data_File && t != pb.Data_Raw {
		return nil, nil, fmt.Errorf("%w: block %s is a UnixFS %s", blockstore.ErrNotFile, c, t)
	}
	links := pn.Links()
	if len(links) != fsn.NumChildren() {
		return nil, nil, fmt.Errorf("%w: block %s has %d links but %d block sizes",
			blockstore.ErrNotFile, c, len(links), fsn.NumChildren())
	}
	return fsn, links, nil
}

// blockErrors returns the bad blocks that a Verify error names, or nil
// when err is not such a report. Verify returns one *BlockError, or
// several joined with errors.Join and followed, past a cap, by an "and N
// more" error; those others are found by the next pass.
func blockErrors(err error) []*blockstore.BlockError {
	if be, ok := err.(*blockstore.BlockError); ok {
		return []*blockstore.BlockError{be}
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var out []*blockstore.BlockError
	for _, e := range j.Unwrap() {
		if be, ok := e.(*blockstore.BlockError); ok {
			out = append(out, be)
		}
	}
	return out
}
