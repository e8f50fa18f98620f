package blockstore

import (
	"context"
	"errors"
	"fmt"

	dag "github.com/ipfs/boxo/ipld/merkledag"
	ft "github.com/ipfs/boxo/ipld/unixfs"
	pb "github.com/ipfs/boxo/ipld/unixfs/pb"
	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

// walk visits the UnixFS file DAG under root in file order.
//
// visit is called for every block (root included) with the byte range
// [start, end) of the file it holds (end is -1 when not known, which only
// happens for the root). Raw-codec blocks (leaves) are not read by walk:
// that is visit's business. dag-pb blocks are then read from the store,
// re-hashed and decoded, and their children visited in turn.
//
// A dag-pb block that is missing or corrupt is passed to bad as a
// *BlockError with its range: bad returns nil to skip that subtree and go
// on, or an error to stop. A block that hashes right but is no UnixFS file
// node stops the walk with ErrNotFile.
func (s *Store) walk(ctx context.Context, root cid.Cid,
	visit func(c cid.Cid, start, end int64) error,
	bad func(*BlockError) error,
) error {
	if !root.Defined() {
		return errUndefined
	}
	return s.walkNode(ctx, root, 0, -1, visit, bad)
}

func (s *Store) walkNode(ctx context.Context, c cid.Cid, start, end int64,
	visit func(c cid.Cid, start, end int64) error,
	bad func(*BlockError) error,
) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := visit(c, start, end); err != nil {
		return err
	}
	switch c.Type() {
	case cid.Raw:
		return nil
	case cid.DagProtobuf:
	default:
		return fmt.Errorf("%w: block %s has codec 0x%x", ErrNotFile, c, c.Type())
	}

	blk, err := s.raw.Get(ctx, c)
	if err == nil {
		err = checkBlock(c, blk.RawData())
	} else if ipld.IsNotFound(err) {
		err = newBlockError(ErrMissing, c, err)
	}
	if err != nil {
		var be *BlockError
		if errors.As(err, &be) {
			be.Start, be.End = start, end
			return bad(be)
		}
		return fmt.Errorf("blockstore: read block %s: %w", c, err)
	}

	pn, err := dag.DecodeProtobuf(blk.RawData())
	if err != nil {
		return fmt.Errorf("%w: block %s: %w", ErrNotFile, c, err)
	}
	fsn, err := ft.FSNodeFromBytes(pn.Data())
	if err != nil {
		return fmt.Errorf("%w: block %s: %w", ErrNotFile, c, err)
	}
	if t := fsn.Type(); t != pb.Data_File && t != pb.Data_Raw {
		return fmt.Errorf("%w: block %s is a UnixFS %s", ErrNotFile, c, t)
	}
	links := pn.Links()
	if len(links) != fsn.NumChildren() {
		return fmt.Errorf("%w: block %s has %d links but %d block sizes",
			ErrNotFile, c, len(links), fsn.NumChildren())
	}
	if end < 0 {
		end = start + int64(fsn.FileSize())
	}
	off := start + int64(len(fsn.Data()))
	for i, l := range links {
		size := int64(fsn.BlockSize(i))
		if err := s.walkNode(ctx, l.Cid, off, off+size, visit, bad); err != nil {
			return err
		}
		off += size
	}
	if off != end {
		be := newBlockError(ErrCorrupt, c,
			fmt.Errorf("its children hold %d bytes, not the %d its parent records", off-start, end-start))
		be.Start, be.End = start, end
		return bad(be)
	}
	return nil
}

// errFound stops a walk early.
var errFound = errors.New("found")

// locate finds the byte range that block target holds in the file root,
// reading only internal nodes.
func (s *Store) locate(ctx context.Context, root, target cid.Cid) (start, end int64, ok bool) {
	err := s.walk(ctx, root, func(c cid.Cid, st, en int64) error {
		if c.Equals(target) {
			start, end = st, en
			return errFound
		}
		return nil
	}, func(*BlockError) error { return nil })
	return start, end, err == errFound
}

// annotate completes a *BlockError met while reading file root with the
// root and the block's byte range.
func (s *Store) annotate(ctx context.Context, root cid.Cid, err error) error {
	var be *BlockError
	if !errors.As(err, &be) || be.Root.Defined() {
		return err
	}
	e := *be
	e.Root = root
	if e.Start < 0 {
		if st, en, ok := s.locate(ctx, root, e.Block); ok {
			e.Start, e.End = st, en
		}
	}
	return &e
}
