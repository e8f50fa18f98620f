package blockstore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	cid "github.com/ipfs/go-cid"
)

// FuzzLoadRoots feeds loadRoots the bytes of a roots.json, as a crash or
// a hand edit may leave it.
func FuzzLoadRoots(f *testing.F) {
	f.Add([]byte(`{"version":1,"roots":[{"cid":"bafkreihdwdcefgh4dqkjv67uzcmw7ojee6xedzdetojuzjevtenxquvyku","size":3,"added":"2025-01-02T03:04:05Z"}]}`))
	f.Add([]byte(`{"version":1,"roots":[]}`))
	f.Add([]byte(`{"version":1,"roots":[{"cid":"nope"}]}`))
	f.Add([]byte(`{"roots":[{"added":"yesterday"}]}`))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, rootsFile)
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		roots, err := loadRoots(path)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "blockstore: ") {
				t.Fatalf("error without the blockstore: prefix: %v", err)
			}
			return
		}
		for _, r := range roots {
			if _, err := cid.Decode(r.CID); err != nil {
				t.Fatalf("accepted root %q: %v", r.CID, err)
			}
		}
	})
}
