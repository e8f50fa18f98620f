package blockstore

import (
	"context"
	"fmt"
	"io"

	"github.com/ipfs/boxo/blockservice"
	bstore "github.com/ipfs/boxo/blockstore"
	chunker "github.com/ipfs/boxo/chunker"
	dag "github.com/ipfs/boxo/ipld/merkledag"
	"github.com/ipfs/boxo/ipld/unixfs/importer/balanced"
	"github.com/ipfs/boxo/ipld/unixfs/importer/helpers"
	cid "github.com/ipfs/go-cid"
	ds "github.com/ipfs/go-datastore"
	dssync "github.com/ipfs/go-datastore/sync"
	ipld "github.com/ipfs/go-ipld-format"
)

// Import parameters: kubo's defaults for `ipfs add --cid-version=1
// --raw-leaves` (Import.UnixFSChunker "size-262144",
// Import.UnixFSFileMaxLinks 174, balanced layout).
const (
	// ChunkSize is the size of every leaf but the last.
	ChunkSize = 256 << 10
	// MaxLinks is the most children one internal node has.
	MaxLinks = 174
)

// importFile chunks r and builds its balanced UnixFS DAG with boxo's
// importer, adding every node to dserv. It returns the root and the number
// of bytes read.
func importFile(ctx context.Context, dserv ipld.DAGService, r io.Reader, progress func(int64)) (cid.Cid, int64, error) {
	prefix, err := dag.PrefixForCidVersion(1) // dag-pb, sha2-256
	if err != nil {
		return cid.Undef, 0, err
	}
	cr := &countingReader{ctx: ctx, r: r, progress: progress}
	// Like kubo's adder: batch the puts, commit at the end.
	buffered := ipld.NewBufferedDAG(ctx, dserv)
	params := helpers.DagBuilderParams{
		Maxlinks:   MaxLinks,
		RawLeaves:  true,
		CidBuilder: prefix,
		Dagserv:    buffered,
	}
	db, err := params.New(chunker.NewSizeSplitter(cr, ChunkSize))
	if err != nil {
		return cid.Undef, 0, fmt.Errorf("blockstore: import: %w", err)
	}
	nd, err := balanced.Layout(db)
	if err != nil {
		return cid.Undef, 0, fmt.Errorf("blockstore: import: %w", err)
	}
	if err := buffered.Commit(); err != nil {
		return cid.Undef, 0, fmt.Errorf("blockstore: import: %w", err)
	}
	return nd.Cid(), cr.n, nil
}

// nullDAG is a DAG service that hashes nothing itself and keeps nothing:
// the importer computes each CID, and puts land in a null datastore. It is
// what kubo's `ipfs add --only-hash` uses.
func nullDAG() ipld.DAGService {
	bs := bstore.NewBlockstore(dssync.MutexWrap(ds.NewNullDatastore()), bstore.WriteThrough(true))
	return dag.NewDAGService(blockservice.New(bs, nil, blockservice.WriteThrough(true)))
}

// countingReader reports progress and stops the import when ctx is done.
type countingReader struct {
	ctx      context.Context
	r        io.Reader
	n        int64
	progress func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(p)
	if n > 0 {
		c.n += int64(n)
		if c.progress != nil {
			c.progress(c.n)
		}
	}
	return n, err
}
