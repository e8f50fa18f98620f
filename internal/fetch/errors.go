package fetch

import "errors"

// Sentinel errors. Every error the package returns for one of these
// conditions wraps the matching sentinel, so callers test with errors.Is.
// Errors about the fetched DAG itself come from package blockstore:
// blockstore.ErrNotFile for a CID that is no UnixFS file, and a
// *blockstore.BlockError (wrapping blockstore.ErrCorrupt or ErrMissing) when
// the final check of the stored file fails.
var (
	// ErrClosed is returned by methods called after Close, and by a Fetch
	// that Close interrupted.
	ErrClosed = errors.New("fetch: service closed")

	// ErrStalled means no block of the file arrived, from the network or
	// the store, for the stall timeout (WithStallTimeout): no reachable
	// peer has the next block, or none will send it (a provider whose copy
	// is corrupt answers that it does not have the block).
	ErrStalled = errors.New("fetch: stalled, no block received in time")

	// ErrNoRouting is returned by Provide on a Service made without
	// content routing.
	ErrNoRouting = errors.New("fetch: no content routing")

	// ErrUnreachable means that none of the peers given with FromPeers
	// could be connected to and that the Service has no content routing
	// to find others.
	ErrUnreachable = errors.New("fetch: no given peer is reachable")

	// ErrBadBlock means a block received from the network does not hash
	// to its CID. Bitswap already drops such blocks; Fetch checks again
	// before a block reaches the store.
	ErrBadBlock = errors.New("fetch: received block does not match its CID")

	// ErrBadOption is wrapped by the error New and Fetch return for an
	// invalid option value.
	ErrBadOption = errors.New("fetch: invalid option")
)
