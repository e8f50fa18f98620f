package fetch

import (
	"errors"
	"testing"

	dag "github.com/ipfs/boxo/ipld/merkledag"
	ft "github.com/ipfs/boxo/ipld/unixfs"
	pb "github.com/ipfs/boxo/ipld/unixfs/pb"
	cid "github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	mh "github.com/multiformats/go-multihash"

	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// FuzzDecodeFile feeds decodeFile the bytes of dag-pb blocks as a peer
// could send them (a block's hash matches its CID, but whoever made the
// CID chose the bytes).
func FuzzDecodeFile(f *testing.F) {
	leaf := func(s string) cid.Cid {
		h, err := mh.Sum([]byte(s), mh.SHA2_256, -1)
		if err != nil {
			f.Fatal(err)
		}
		return cid.NewCidV1(cid.Raw, h)
	}
	file := func(typ pb.Data_DataType, data []byte, kids ...int) []byte {
		fsn := ft.NewFSNode(typ)
		fsn.SetData(data)
		n := dag.NodeWithData(nil)
		for i, size := range kids {
			fsn.AddBlockSize(uint64(size))
			if err := n.AddRawLink("", &ipld.Link{Size: uint64(size), Cid: leaf(string(rune('a' + i)))}); err != nil {
				f.Fatal(err)
			}
		}
		b, err := fsn.GetBytes()
		if err != nil {
			f.Fatal(err)
		}
		n.SetData(b)
		raw, err := n.EncodeProtobuf(false)
		if err != nil {
			f.Fatal(err)
		}
		return raw
	}
	f.Add(file(pb.Data_File, nil, 262144, 262144, 17))
	f.Add(file(pb.Data_File, []byte("inline bytes")))
	f.Add(file(pb.Data_Raw, []byte("raw")))
	f.Add(file(pb.Data_Directory, nil))
	f.Add([]byte{})
	c := leaf("root")
	f.Fuzz(func(t *testing.T, b []byte) {
		fsn, links, err := decodeFile(c, b)
		if err != nil {
			if !errors.Is(err, blockstore.ErrNotFile) {
				t.Fatalf("error %v does not wrap blockstore.ErrNotFile", err)
			}
			return
		}
		if len(links) != fsn.NumChildren() {
			t.Fatalf("%d links but %d block sizes", len(links), fsn.NumChildren())
		}
		// What walkNode reads of an accepted node must not panic.
		for i, l := range links {
			_ = fsn.BlockSize(i)
			_ = checkCID(l.Cid)
		}
		_ = fsn.FileSize()
		_ = len(fsn.Data())
	})
}
