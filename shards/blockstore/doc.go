// Package blockstore is pipeshard's content-addressing layer: it stores
// shards (multi-GB files of model weights), tokenizers and manifests as
// UnixFS file DAGs on disk, and names each file by the root CID that kubo
// prints for the same bytes with
//
//	ipfs add --cid-version=1 --raw-leaves FILE
//
// so a pipeshard CID can be checked with, fetched from, or pinned on any
// IPFS node.
//
// # Import parameters
//
// AddFile and CID run boxo's own importer (chunker.NewSizeSplitter,
// importer/helpers.DagBuilderParams, importer/balanced.Layout, behind an
// ipld.BufferedDAG, as kubo's adder does) with kubo's defaults for that
// command:
//
//   - fixed-size chunker "size-262144": every leaf but the last holds
//     ChunkSize = 256 KiB;
//   - raw leaves (codec raw, 0x55): a leaf block is the file bytes verbatim;
//   - balanced layout with at most MaxLinks = 174 links per internal node;
//     internal nodes are dag-pb (0x70) UnixFS File nodes;
//   - CIDv1 with sha2-256 multihashes, printed in base32 ("bafk..." for a
//     file of at most one chunk, whose root is its single raw leaf, "bafy..."
//     otherwise). An empty file is the empty raw block,
//     bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku.
//
// No modification time or mode is recorded. The test vectors in
// vectors_test.go were printed by kubo itself and are checked on every test
// run; should a future boxo change its importer's output they fail.
//
// CID computes the same root while storing nothing: blocks go to a null
// datastore (what `ipfs add --only-hash` does), so its memory use is a few
// chunks and the current path of internal nodes, whatever the file size.
//
// # Storage
//
// A store is a directory:
//
//	DIR/blocks/      flatfs datastore: one file per block,
//	                 blocks/<2 chars>/<KEY>.data, sharded by next-to-last/2
//	DIR/roots.json   the files added with AddFile (CID, size, time)
//
// KEY is the base32 multihash, as in kubo's repo, so a block of DIR/blocks
// can be located, inspected or deleted by hand. Blocks are keyed by
// multihash: a raw leaf and a dag-pb node with the same bytes would share a
// file, which is harmless.
//
// Why flatfs rather than go-ds-leveldb (or pebble): our values are
// 256 KiB leaves, written once and read whole. An LSM tree would copy each of
// them again at every compaction (write amplification on multi-GB shards)
// and keep them in shared table files, while flatfs writes each block once,
// with a rename, into its own file, reads it with a single read, and
// deletes it with an unlink that frees the space at once. A corrupted or
// truncated block stays confined to its own file, which Verify names and a
// re-add (or, later, bitswap) rewrites; a damaged table file could take many
// blocks down and need a repair pass. It is also kubo's default block
// store, so a pipeshard store is laid out like an IPFS repository's
// blocks/ folder. The cost, one inode per 256 KiB (40,000 files for a
// 10 GB shard, spread over 1,024 folders), is modest. flatfs runs with
// sync on (each block file and folder is fsynced before its rename, as in
// kubo), and roots.json is replaced atomically after all of a file's
// blocks are written: a file is listed only once it is fully stored, and a
// crash mid-import leaves unlisted blocks, not a listed broken file.
//
// # Integrity
//
// Every read re-hashes the block and compares it with its CID (what kubo's
// old Datastore.HashOnRead did; boxo's blockstore.ValidatingBlockstore does
// the same but its error does not name the block). This is on for Open,
// Export and the boxo blockstore that Blockstore returns for bitswap, so a
// node never serves or uses bytes of a corrupted shard. The cost is one
// SHA-256 pass over the data read (see the benchmarks).
//
// A bad block is reported as a *BlockError, which names the block's CID,
// the file's root CID and the byte range [Start, End) of the file that the
// block holds, and wraps ErrCorrupt ("blockstore: corrupt block") or
// ErrMissing ("blockstore: missing block"). Test with errors.Is and
// errors.As. A corrupt block also matches boxo's
// blockstore.ErrHashMismatch and a missing one ipld.ErrNotFound, so boxo
// code treats them as it would its own.
//
// Verify walks the whole DAG, re-hashing every block on all cores, and
// reports every bad block it finds in file order (errors.Join; errors.As
// gives the first). When Open's reader meets a bad block, Read returns the
// good bytes before it and then the error, never a byte of that block;
// Seek past it and the rest of the file still reads. Has checks only that
// every block is present.
//
// Re-adding a file rewrites all of its blocks (the store writes through,
// without checking for existing blocks first), which repairs a corrupted or
// lost one.
//
// # Speed
//
// On the 2-core development VM (shared, so the spread is wide), for 64 MiB
// (bench_test.go): CID 530-1060 MB/s (SHA-256 with SHA-NI is about a third
// of that time, boxo's chunker copies most of the rest); AddFile 50-100
// MB/s, bound by flatfs creating, fsyncing and renaming one file per block (whole
// imports ran at 55-130 MB/s with fsync on or off alike, though bare flatfs
// puts without fsync measured 2-5 times faster); Open/Export 200-380
// MB/s and Verify 235-380 MB/s from the page cache, re-hashing included.
//
// # API
//
//	Open(dir) (*Store, error)            open or create a store
//	(*Store).AddFile(ctx, r, progress)   import, store, list; root CID
//	CID(r), CIDContext(ctx, r)           the same root, storing nothing
//	(*Store).Open(ctx, c)                io.ReadSeekCloser and size
//	(*Store).Export(ctx, c, w)           copy the file to w
//	(*Store).Verify(ctx, c)              re-hash the whole DAG
//	(*Store).Has(ctx, c)                 every block present?
//	(*Store).List()                      added roots, oldest first
//	(*Store).Remove(ctx, c)              unlist and delete unshared blocks
//	(*Store).Blockstore()                boxo blockstore, for bitswap
//	(*Store).Close()
//
// # Concurrency and lifetime
//
// A Store is safe for concurrent use. AddFile runs alongside reads and
// other imports; Remove waits for imports in flight, so it never deletes a
// block that a new file is about to share. A directory must be opened by
// one Store (one process) at a time: there is no lock file. Close releases
// flatfs.
//
// Remove deletes a file's blocks that no other listed root uses. Blocks
// that are not part of any listed root (put by bitswap, say) are not
// tracked: they are neither listed nor protected from Remove if a removed
// file shares them.
//
// # Limits
//
// Only what `ipfs add` makes of one file is produced: no directories, no
// trickle layout, no other chunkers, no inline (identity) CIDs. Blocks left
// by an interrupted import are not listed and nothing collects them yet.
// Reading a DAG from another producer works as long as it is a UnixFS file
// (dag-pb leaves with data are read and verified too).
package blockstore
