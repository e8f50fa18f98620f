package main

import (
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestLayout keeps the repository's shape: every package has a manual (a
// package doc comment, in doc.go for libraries), and no import points
// upward: ovrt at the bottom, shards above it, node and swarm above those,
// the CLI and sim on top; only node and swarm touch the network.
func TestLayout(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Dir}}|{{.Name}}|{{join .Deps \",\"}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/pipeshard/pipeshard"
	// forbidden[p] lists import path prefixes that packages under p must
	// not depend on, even indirectly.
	forbidden := map[string][]string{
		mod + "/ovrt":           {"github.com/libp2p/go-libp2p", mod + "/shards", mod + "/node", mod + "/swarm", mod + "/sim", mod + "/internal/cli"},
		mod + "/shards":         {"github.com/libp2p/go-libp2p", mod + "/node", mod + "/swarm", mod + "/sim", mod + "/internal/cli"},
		mod + "/node":           {mod + "/swarm", mod + "/sim", mod + "/internal/cli"},
		mod + "/swarm":          {mod + "/sim", mod + "/internal/cli"},
		mod + "/internal/route": {"github.com/libp2p/go-libp2p", "net"},
		mod + "/internal/wire":  {"github.com/libp2p/go-libp2p"},
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 4)
		path, dir, name, deps := f[0], f[1], f[2], strings.Split(f[3], ",")
		if name != "main" {
			if _, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, "doc.go"), nil, parser.PackageClauseOnly|parser.ParseComments); err != nil {
				t.Errorf("%s has no doc.go: every package has a manual", path)
			}
		}
		if pkgs, _ := parser.ParseDir(token.NewFileSet(), dir, nil, parser.PackageClauseOnly|parser.ParseComments); true {
			documented := false
			for _, p := range pkgs {
				for _, file := range p.Files {
					if file.Doc != nil && strings.HasPrefix(file.Doc.Text(), "Package "+name) || file.Doc != nil && name == "main" {
						documented = true
					}
				}
			}
			if !documented {
				t.Errorf("%s has no package comment", path)
			}
		}
		for base, bad := range forbidden {
			if path != base && !strings.HasPrefix(path, base+"/") {
				continue
			}
			for _, d := range deps {
				for _, b := range bad {
					if d == b || strings.HasPrefix(d, b+"/") || strings.HasPrefix(b, "github.com/libp2p/") && strings.HasPrefix(d, b) {
						t.Errorf("%s depends on %s", path, d)
					}
				}
			}
		}
	}
}
