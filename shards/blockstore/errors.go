package blockstore

import (
	"errors"
	"fmt"

	cid "github.com/ipfs/go-cid"
)

// Sentinel errors. Every error the package returns for one of these
// conditions wraps the matching sentinel, so callers test with errors.Is.
var (
	// ErrCorrupt means a stored block's bytes no longer hash to its CID
	// (or, for a block whose hash is right, that it contradicts the sizes
	// its parent node records). It always comes inside a *BlockError that
	// names the block.
	ErrCorrupt = errors.New("blockstore: corrupt block")

	// ErrMissing means a block of the DAG is not in the store. It always
	// comes inside a *BlockError that names the block. Such an error also
	// satisfies ipld.IsNotFound, so boxo code (bitswap, blockservice)
	// treats it as a plain miss.
	ErrMissing = errors.New("blockstore: missing block")

	// ErrNotFile means the CID names a DAG that is not a UnixFS file
	// (a directory, a symlink, or a node of another codec).
	ErrNotFile = errors.New("blockstore: not a UnixFS file")

	// ErrUnknownRoot means Remove was asked for a CID that is not in the
	// store's list of added roots.
	ErrUnknownRoot = errors.New("blockstore: not an added root")

	// ErrClosed is returned by methods called after Close.
	ErrClosed = errors.New("blockstore: store closed")
)

// BlockError reports one missing or corrupt block. Err is ErrCorrupt or
// ErrMissing; errors.Is also sees the underlying cause (for example
// boxo's blockstore.ErrHashMismatch or ipld.ErrNotFound).
type BlockError struct {
	// Block is the CID of the bad block.
	Block cid.Cid
	// Root is the file the block was read as part of, cid.Undef if the
	// block was read on its own (for example by bitswap).
	Root cid.Cid
	// Start and End give the half-open byte range [Start, End) of the file
	// that the block (with its sub-DAG, for an internal node) holds. Both
	// are -1 when unknown.
	Start, End int64
	// Err is ErrCorrupt or ErrMissing.
	Err error
	// Cause gives detail: the hash the bytes really have, or the
	// store's own not-found error. It may be nil.
	Cause error
}

func (e *BlockError) Error() string {
	s := fmt.Sprintf("%v %s", e.Err, e.Block)
	if e.Root.Defined() && e.Root.Equals(e.Block) {
		s += " (the file's root)"
		if e.Cause != nil {
			s += ": " + e.Cause.Error()
		}
		return s
	}
	switch {
	case e.Start >= 0 && e.End >= 0:
		s += fmt.Sprintf(" (file bytes [%d, %d)", e.Start, e.End)
	case e.Start >= 0:
		s += fmt.Sprintf(" (file bytes from %d", e.Start)
	}
	if e.Root.Defined() {
		if e.Start >= 0 {
			s += " of " + e.Root.String() + ")"
		} else {
			s += " (in file " + e.Root.String() + ")"
		}
	} else if e.Start >= 0 {
		s += ")"
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

// Unwrap returns the sentinel and the cause.
func (e *BlockError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

func newBlockError(sentinel error, block cid.Cid, cause error) *BlockError {
	return &BlockError{Block: block, Start: -1, End: -1, Err: sentinel, Cause: cause}
}
