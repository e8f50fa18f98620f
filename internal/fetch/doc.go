// Package fetch moves UnixFS files (shards, manifests, tokenizers) between
// pipeshard nodes by CID over bitswap, checking every block, into and out
// of a blockstore.Store.
//
// # Use
//
// One Service per libp2p host, over the node's store and, optionally, its
// content routing (the kad-dht):
//
//	svc, err := fetch.New(ctx, h, kad, store)
//	...
//	defer svc.Close()
//
//	// Get a file, from whoever the DHT says has it.
//	err = svc.Fetch(ctx, root, func(done, total int64) { ... })
//
//	// Or from a peer we know has it (no DHT record needed, or no DHT).
//	err = svc.Fetch(ctx, root, nil, fetch.FromPeers(info))
//
//	// Then tell the DHT that we have it too.
//	err = svc.Provide(ctx, root)
//
// From New until Close the Service also serves: any peer may ask for any
// block in the store and get it. Blocks are read through the store's
// verifying blockstore (Store.Blockstore), so a block whose bytes on disk
// no longer match its CID is never sent; bitswap answers that we do not
// have it (and logs the store's error, which names the block).
//
// # What Fetch does
//
// Fetch opens one bitswap session for the file and walks its DAG in file
// order: it reads the root (from the store, or from the network), learns
// the file size from it (a raw root is a one-chunk file), and for every
// internal node hands its children to at most WithConcurrency workers
// (default 32 blocks, 8 MiB of leaves, in flight), walking internal
// children as they come in. A worker looks the block up in the store
// (Has, which does not read it) and asks the session only for blocks that
// are missing. So:
//
//   - Fetch is idempotent and resumes: a second Fetch of a file that an
//     interrupted one (cancelled, crashed, stalled) left half-stored
//     fetches only the missing blocks, as blocks are stored one by one
//     and a stored block is complete (flatfs writes by rename).
//   - Each received block is hashed and compared with its CID before it
//     is written (bitswap drops mismatched blocks already; Fetch checks
//     again so the guarantee does not rest on bitswap's internals). The
//     store therefore never holds a block that did not match on arrival.
//   - After the walk, Store.Verify re-hashes the whole file. Blocks it
//     finds bad (corrupted on our own disk since they were stored, or
//     deleted meanwhile by a Remove of a file sharing them) are deleted
//     and fetched again, pass after pass, until Verify succeeds or a block
//     fetched afresh is bad again, whose *blockstore.BlockError Fetch then
//     returns. A corrupt internal node read during the walk is replaced at
//     once.
//
// Progress is counted in bytes of the file: a leaf counts with the size its
// parent records for it, whether it was fetched or found, so done reaches
// total exactly. Stats counts the blocks actually received.
//
// When the peers Fetch knows stop sending (no one has the block, or the
// only providers have a corrupt copy and answer DONT_HAVE), bitswap would
// wait for ever, searching the routing for more providers. Fetch gives up
// after WithStallTimeout (default one minute) without a block, with an
// error wrapping ErrStalled that names the blocks it was waiting for.
// Everything stored until then stays, for the next Fetch to resume from.
//
// # Finding peers
//
// Bitswap first asks every connected peer. FromPeers connects to given
// peers before the first request (and protects those connections while
// Fetch runs); that is the way to fetch from a node whose provider record
// has not reached the DHT yet, or on a network without a DHT (rt nil in
// New). When no connected peer has a block for WithProviderSearchDelay
// (default 1 s), bitswap asks the routing for providers of it, connects to
// them and asks them; a file's blocks are found through its root, as the
// session keeps asking the peers that sent earlier blocks.
//
// Provide announces only a file's root, and only when the whole file is in
// the store (Store.Has). Provider records expire (after 48 h in kad-dht):
// re-providing periodically is the caller's job.
//
// # Listing fetched files
//
// A fetched file should be listed by Store.List, as an added one is, so
// that Remove knows it. blockstore.Store has no method to list a root
// without re-importing the file, which would write every block again.
// Fetch uses one as soon as the store has it, with the signature
//
//	AddRoot(ctx context.Context, c cid.Cid) error
//
// (list c, whose blocks are all in the store). Until then a fetched file is
// stored and verified but not listed, and Remove does not protect its
// blocks.
//
// # Lifetime
//
// Close interrupts the Fetches in flight (they return ErrClosed), waits
// for them, and stops bitswap; it closes neither the host nor the store,
// which must outlive the Service.
package fetch
