package main

import (
	"bytes"
	"os"
	"testing"
)

// TestGeneratedUpToDate fails when the committed assembly or declarations
// differ from what the generator produces (run go generate in
// ovrt/internal/kernels).
func TestGeneratedUpToDate(t *testing.T) {
	asm, decl := generate()
	for name, want := range map[string][]byte{"../../kernels_amd64.s": asm, "../../kernels_amd64_decl.go": decl} {
		got, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate in ovrt/internal/kernels", name)
		}
	}
}
