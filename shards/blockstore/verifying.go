package blockstore

import (
	"context"
	"fmt"

	bstore "github.com/ipfs/boxo/blockstore"
	blocks "github.com/ipfs/go-block-format"
	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

// verifyingBlockstore re-hashes every block it returns from Get and turns
// a mismatch into a *BlockError wrapping ErrCorrupt (and boxo's
// bstore.ErrHashMismatch), and a miss into one wrapping ErrMissing (and
// ipld.ErrNotFound). All other methods pass through.
//
// It plays the part of kubo's old HashOnRead option (boxo now offers it as
// bstore.ValidatingBlockstore, whose error does not name the block).
type verifyingBlockstore struct {
	bstore.Blockstore
}

var _ bstore.Blockstore = verifyingBlockstore{}

func (v verifyingBlockstore) Get(ctx context.Context, c cid.Cid) (blocks.Block, error) {
	b, err := v.Blockstore.Get(ctx, c)
	if err != nil {
		if ipld.IsNotFound(err) {
			return nil, newBlockError(ErrMissing, c, err)
		}
		return nil, fmt.Errorf("blockstore: read block %s: %w", c, err)
	}
	if err := checkBlock(c, b.RawData()); err != nil {
		return nil, err
	}
	return b, nil
}

// checkBlock re-hashes data with c's hash function and compares.
func checkBlock(c cid.Cid, data []byte) error {
	got, err := c.Prefix().Sum(data)
	if err != nil {
		return fmt.Errorf("blockstore: hash block %s: %w", c, err)
	}
	if !got.Equals(c) {
		return newBlockError(ErrCorrupt, c,
			fmt.Errorf("%w: its %d bytes hash to %s", bstore.ErrHashMismatch, len(data), got))
	}
	return nil
}
