package blockstore

import (
	"context"
	"fmt"
	"io"

	uio "github.com/ipfs/boxo/ipld/unixfs/io"
	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
)

func (s *Store) openFile(ctx context.Context, c cid.Cid) (io.ReadSeekCloser, int64, error) {
	ng := orderedGetter{s.readDAG}
	nd, err := ng.Get(ctx, c)
	if err != nil {
		return nil, 0, s.annotate(ctx, c, err)
	}
	dr, err := uio.NewDagReader(ctx, nd, ng)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: %s: %w", ErrNotFile, c, err)
	}
	return &fileReader{DagReader: dr, ctx: ctx, s: s, root: c}, int64(dr.Size()), nil
}

// fileReader is boxo's DagReader with block errors completed by the file
// root and the bad block's byte range.
type fileReader struct {
	uio.DagReader
	ctx  context.Context
	s    *Store
	root cid.Cid
}

func (r *fileReader) Read(p []byte) (int, error) {
	n, err := r.DagReader.Read(p)
	if err != nil && err != io.EOF {
		err = r.s.annotate(r.ctx, r.root, err)
	}
	return n, err
}

func (r *fileReader) Seek(offset int64, whence int) (int64, error) {
	n, err := r.DagReader.Seek(offset, whence)
	if err != nil {
		err = r.s.annotate(r.ctx, r.root, err)
	}
	return n, err
}

// orderedGetter replaces the DAG service's GetMany (which the DagReader
// uses to prefetch children) by one that fetches the blocks one after the
// other, in order, and stops at the first failure with that block's own
// error. boxo's blockservice GetBlocks drops failed blocks silently, and
// the reader would only see "failed to fetch all nodes", naming no block;
// and since a failure fails every pending promise of the batch, fetching in
// order keeps the blocks before a bad one readable.
type orderedGetter struct {
	ipld.DAGService
}

func (g orderedGetter) GetMany(ctx context.Context, keys []cid.Cid) <-chan *ipld.NodeOption {
	out := make(chan *ipld.NodeOption, len(keys))
	go func() {
		defer close(out)
		for _, k := range keys {
			nd, err := g.Get(ctx, k)
			if err != nil {
				out <- &ipld.NodeOption{Err: err}
				return
			}
			out <- &ipld.NodeOption{Node: nd}
		}
	}()
	return out
}
