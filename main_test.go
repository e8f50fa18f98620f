package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/pipeshard/pipeshard/internal/cli"
	"github.com/pipeshard/pipeshard/internal/testmodel"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"pipeshard": func() {
			os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
		},
	})
}

// TestScripts runs the CLI as a user would, from testdata/script/*.txtar.
// $MODEL and $TOKENIZER name the real stories15M files; $ORACLE the
// oracle directory.
func TestScripts(t *testing.T) {
	model, tok := testmodel.Stories15M(t)
	oracle := testmodel.OracleDir(t)
	testscript.Run(t, testscript.Params{
		Dir: filepath.Join("testdata", "script"),
		Setup: func(e *testscript.Env) error {
			e.Setenv("MODEL", model)
			e.Setenv("TOKENIZER", tok)
			e.Setenv("ORACLE", oracle)
			e.Setenv("PIPESHARD_HOME", testmodel.Home())
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"truncate-copy": truncateCopy,
			"size-is":       sizeIs,
			"cmp-ids":       cmpIDs,
			"jsonfield":     jsonField,
			"eq":            eq,
			"lt":            lt,
			"waitfile":      waitFile,
			"tracecheck":    traceCheck,
		},
	})
}

// truncate-copy SRC DST N copies the first N bytes of SRC to DST.
func truncateCopy(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: truncate-copy src dst n")
	}
	n, err := strconv.Atoi(args[2])
	ts.Check(err)
	b, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	ts.Check(os.WriteFile(ts.MkAbs(args[1]), b[:min(n, len(b))], 0o644))
}

// size-is FILE N checks a file's size.
func sizeIs(ts *testscript.TestScript, neg bool, args []string) {
	st, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	if want, _ := strconv.ParseInt(args[1], 10, 64); (st.Size() == want) == neg {
		ts.Fatalf("%s has %d bytes, want %s", args[0], st.Size(), args[1])
	}
}

// cmp-ids A B checks that two JSON outputs of run have the same ids.
func cmpIDs(ts *testscript.TestScript, neg bool, args []string) {
	ids := func(name string) string {
		var v struct{ IDs []int }
		ts.Check(json.Unmarshal([]byte(ts.ReadFile(name)), &v))
		return fmt.Sprint(v.IDs)
	}
	if a, b := ids(args[0]), ids(args[1]); (a == b) == neg {
		ts.Fatalf("ids differ: %s vs %s", a, b)
	}
}

// eq A B checks that two words are equal (after expansion).
func eq(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: eq a b")
	}
	if (args[0] == args[1]) == neg {
		ts.Fatalf("%q vs %q", args[0], args[1])
	}
}

// lt A B checks that number A is less than number B.
func lt(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: lt a b")
	}
	a, err := strconv.ParseFloat(args[0], 64)
	ts.Check(err)
	b, err := strconv.ParseFloat(args[1], 64)
	ts.Check(err)
	if (a < b) == neg {
		ts.Fatalf("%s < %s is %v", args[0], args[1], a < b)
	}
}

// jsonfield FILE PATH VAR sets $VAR to the JSON value at the dotted PATH
// (numbers index arrays) of FILE (or stdout).
func jsonField(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: jsonfield file path var")
	}
	var v any
	ts.Check(json.Unmarshal([]byte(ts.ReadFile(args[0])), &v))
	for _, k := range strings.Split(args[1], ".") {
		switch x := v.(type) {
		case map[string]any:
			v = x[k]
		case []any:
			i, err := strconv.Atoi(k)
			ts.Check(err)
			if i >= len(x) {
				ts.Fatalf("%s: index %d of %d", args[1], i, len(x))
			}
			v = x[i]
		default:
			ts.Fatalf("%s: cannot index %T with %q", args[1], v, k)
		}
	}
	ts.Setenv(args[2], fmt.Sprint(v))
}

// waitfile FILE waits up to a minute for FILE to exist.
func waitFile(ts *testscript.TestScript, neg bool, args []string) {
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(ts.MkAbs(args[0])); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	ts.Fatalf("%s did not appear within a minute", args[0])
}

// tracecheck FILE STEPS HOPS checks a --trace file: STEPS lines, one per
// traversal in order, each with HOPS hops that computed, within the
// step's round trip.
func traceCheck(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 || neg {
		ts.Fatalf("usage: tracecheck file steps hops")
	}
	steps, err := strconv.Atoi(args[1])
	ts.Check(err)
	hops, err := strconv.Atoi(args[2])
	ts.Check(err)
	lines := strings.Split(strings.TrimSpace(ts.ReadFile(args[0])), "\n")
	if len(lines) != steps {
		ts.Fatalf("%s: %d lines, want %d", args[0], len(lines), steps)
	}
	pos := 0
	for i, l := range lines {
		var st struct {
			Step, Pos, Rows int
			WallMs          float64 `json:"wall_ms"`
			OtherMs         float64 `json:"other_ms"`
			Hops            []struct {
				Hop       int
				Peer      string
				QueueMs   float64 `json:"queue_ms"`
				ComputeMs float64 `json:"compute_ms"`
			}
		}
		ts.Check(json.Unmarshal([]byte(l), &st))
		switch {
		case st.Step != i || st.Pos != pos || st.Rows < 1:
			ts.Fatalf("line %d: step %d at %d of %d rows, want step %d at %d", i, st.Step, st.Pos, st.Rows, i, pos)
		case len(st.Hops) != hops:
			ts.Fatalf("line %d: %d hops, want %d", i, len(st.Hops), hops)
		case st.OtherMs < 0 || st.WallMs < st.OtherMs:
			ts.Fatalf("line %d: wall %v ms, other %v ms", i, st.WallMs, st.OtherMs)
		}
		for j, h := range st.Hops {
			if h.Hop != j || h.Peer == "" || h.ComputeMs <= 0 || h.QueueMs < 0 {
				ts.Fatalf("line %d: hop %d: %+v", i, j, h)
			}
		}
		pos += st.Rows
	}
}
