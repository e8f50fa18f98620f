// Package shards owns pipeshard's content-addressed model format: the
// precompiled shard file (a contiguous layer range, laid out as the ovrt
// kernels read it), the model descriptor and manifest, the cost model
// and the splits that cut a model into stages, and the Store that keeps
// all of them as UnixFS files in a block store (shards/blockstore), named
// by the CIDs `ipfs add --cid-version=1 --raw-leaves` would print.
//
// The model CID users pass around is a manifest's CID; every shard's
// header names the model ID, the CID of the model's descriptor, which a
// manifest proves it belongs to by carrying the descriptor's fields. See
// docs/shards.md for the format, the fields and a worked example.
//
// This package imports no networking: node and swarm move its files.
package shards
