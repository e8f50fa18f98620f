package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// FuzzParse feeds the parser arbitrary files: every error wraps ErrParse
// (or, from Validate, ErrInvalid), and a valid scenario has sane links
// and reads back from what Marshal writes.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*")
	files = append(files, "../scenarios/four-node-50ms.yaml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(base))
	f.Add([]byte(`{"name": "j", "nodes": [{"layers": "0:6"}], "clients": [{"requests": 1, "prompt_ids": [1]}]}`))
	f.Add([]byte("name: x\nnodes: [{layers: \"6:6/0:5\"}]\n"))
	f.Add([]byte("name: x\nnetwork: {regions: {a: {b: 1}}, links: [{between: [a]}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrParse) {
				t.Fatalf("parse error %v is not ErrParse", err)
			}
			return
		}
		if err := s.Validate(); err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("validate error %v is not ErrInvalid", err)
			}
			return
		}
		hs := s.Hosts()
		total := 0
		for _, g := range s.Nodes {
			total += g.Count
		}
		for _, c := range s.Clients {
			total += c.Count
		}
		if len(hs) != total || total > maxHosts {
			t.Fatalf("%d hosts for %d nodes and clients", len(hs), total)
		}
		for i := range min(len(hs), 12) {
			for j := range min(len(hs), 12) {
				l := s.Link(i, j)
				if l.Delay < 0 || l.Delay > maxDelay || l.Jitter < 0 || l.Loss < 0 || l.Loss >= 1 || l.Rate < 0 {
					t.Fatalf("link %d→%d: %v", i, j, l)
				}
			}
		}
		if sh, ok := KnownShapes[s.Model.Name]; ok {
			if _, err := s.Layouts(sh, nil); err != nil {
				t.Fatalf("valid, but Layouts: %v", err)
			}
		}
		b, err := s.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Parse(b)
		if err != nil {
			t.Fatalf("Marshal wrote what Parse rejects: %v\n%s", err, b)
		}
		if err := s2.Validate(); err != nil {
			t.Fatalf("Marshal wrote an invalid scenario: %v\n%s", err, b)
		}
		s.lines, s2.lines = nil, nil
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip differs:\n%+v\n%+v\n%s", s, s2, b)
		}
	})
}
