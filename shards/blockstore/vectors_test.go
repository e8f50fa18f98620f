package blockstore

import (
	"bytes"
	"context"
	"testing"

	"github.com/ipfs/boxo/ipld/unixfs/importer/helpers"
)

// kuboVectors are root CIDs printed by kubo itself for the same bytes.
//
// Obtained with kubo v0.43.0 (Kubo version: 0.43.0, Repo version: 18,
// go1.26.8, amd64/linux), built unmodified from the release's module source
// (github.com/ipfs/kubo@v0.43.0, `go build ./cmd/ipfs` in that tree: `go
// install ...@v0.43.0` refuses modules with exclude directives), with a
// fresh repository and the default configuration (every Import.* option
// unset):
//
//	export IPFS_PATH=$(mktemp -d)
//	ipfs init --empty-repo
//	ipfs add --cid-version=1 --raw-leaves --only-hash -Q FILE
//
// where FILE held gen(n) (see store_test.go), or the single byte "a". The
// same roots also came out of a from-the-spec reference written in Python
// (hashlib SHA-256 and hand-encoded dag-pb/UnixFS protobufs, no IPFS code),
// a third implementation independent of kubo and of boxo.
var kuboVectors = []struct {
	name string
	data func() []byte
	cid  string
}{
	// Empty file: the empty raw block.
	{"empty", func() []byte { return nil }, "bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku"},
	{`"a"`, func() []byte { return []byte("a") }, "bafkreigks6arfsq3xxfpvqrrwonchxcnu6do76auprhhfomao6c273sixm"},
	{"gen(1)", func() []byte { return gen(1) }, "bafkreic2nz5eovfprz7up7eusmca3bj6pma6hhktpsy52nj4so324whlhu"},
	// Exactly one chunk: the root is the raw leaf.
	{"gen(256KiB)", func() []byte { return gen(262144) }, "bafkreifqzfsm2qu5n5iboy6vk35jki5z2pmoghuathwoloyyk5hwz2jjve"},
	// One byte more: a dag-pb node over two leaves.
	{"gen(256KiB+1)", func() []byte { return gen(262145) }, "bafybeiblyqcnkjlhri2bairo6xlmsipyo56dqrijs54k6cbr3w7sebq6re"},
	{"gen(1000000)", func() []byte { return gen(1000000) }, "bafybeihl7r35vndwsx2gwia6w4qe6p25e2nikupcgu4gyvmqqlvcmzwjmm"},
	{"gen(3MiB)", func() []byte { return gen(3 << 20) }, "bafybeihj2jdf435aizubsh63bdutktlcpwtqw4awdctp4ywblanwnjqrga"},
	// 174 full leaves: one full internal node.
	{"gen(174*256KiB)", func() []byte { return gen(174 * 262144) }, "bafybeial4b64cuobrax5bf7wpnyshj5vhxt3gfnxi6faz2r6osumdicccy"},
	// One byte more: the balanced layout grows a second level (a root
	// over the full node above and a node over one 1-byte leaf).
	{"gen(174*256KiB+1)", func() []byte { return gen(174*262144 + 1) }, "bafybeief7qowfmdjkp2crbqhn6ystowuwin35aionbwn4ybbqbmtvm5c4q"},
}

// kuboGen256MiB is what the same kubo prints for gen(256 MiB) (1,024
// leaves under 6 full-or-partial second-level nodes); TestCIDMemory checks
// it while streaming.
const kuboGen256MiB = "bafybeiewb2xuaetctgkx5f7ufosnyclwkhhkjxu6wr5c25qt4rxi5ub6uy"

func TestKuboParameters(t *testing.T) {
	if MaxLinks != helpers.DefaultLinksPerBlock {
		t.Fatalf("MaxLinks = %d, boxo's default (kubo's Import.UnixFSFileMaxLinks) is %d", MaxLinks, helpers.DefaultLinksPerBlock)
	}
	if ChunkSize != 262144 {
		t.Fatalf("ChunkSize = %d", ChunkSize)
	}
}

func TestKuboVectors(t *testing.T) {
	for _, v := range kuboVectors {
		t.Run(v.name, func(t *testing.T) {
			c, err := CID(bytes.NewReader(v.data()))
			if err != nil {
				t.Fatal(err)
			}
			if c.String() != v.cid {
				t.Fatalf("CID = %s, kubo prints %s", c, v.cid)
			}
		})
	}
}

// TestKuboVectorsStored checks that AddFile gives the same roots, and that
// what it stores verifies and reads back, for the vectors up to 3 MiB (the
// large ones are stored by TestMissingInternalNode).
func TestKuboVectorsStored(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	for _, v := range kuboVectors {
		data := v.data()
		if len(data) > 3<<20 {
			continue
		}
		c := add(t, s, data)
		if c.String() != v.cid {
			t.Fatalf("%s: AddFile = %s, kubo prints %s", v.name, c, v.cid)
		}
		if err := s.Verify(ctx, c); err != nil {
			t.Fatalf("%s: %v", v.name, err)
		}
		got, _, err := readAll(ctx, s, c)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: read back: %v", v.name, err)
		}
	}
}
