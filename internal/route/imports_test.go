package route

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The routing core does no I/O, keeps no time and starts no goroutines:
// its code may import only these.
var allowedImports = map[string]bool{
	"cmp": true, "errors": true, "fmt": true, "math": true, "math/rand/v2": true,
	"slices": true, "strings": true, "sync": true,
}

func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !allowedImports[path] {
				t.Errorf("%s imports %q: the routing core must stay free of I/O, clocks and goroutines", name, path)
			}
		}
	}
}
