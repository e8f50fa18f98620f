// Package blockstore stores shards, tokenizers and manifests as UnixFS file
// DAGs whose root CIDs match `ipfs add --cid-version=1 --raw-leaves`.
package blockstore
