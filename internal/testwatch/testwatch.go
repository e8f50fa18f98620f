package testwatch

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"testing"
	"time"
)

// module prefixes the functions whose goroutines the summary names.
const module = "github.com/pipeshard/pipeshard/"

// Main runs m and exits with its code; see Run.
func Main(m *testing.M) { os.Exit(Run(m)) }

// Run runs m and returns its code. If the tests have not finished
// shortly before go test's -timeout (at 90% of it, at most 2 min early),
// it writes the stacks and a summary to stderr and exits the process
// with 2. With no -timeout it only runs m.
func Run(m *testing.M) int {
	flag.Parse()
	var timeout time.Duration
	if f := flag.Lookup("test.timeout"); f != nil {
		timeout, _ = time.ParseDuration(f.Value.String())
	}
	if timeout <= 0 {
		return m.Run()
	}
	limit := timeout - min(timeout/10, 2*time.Minute)
	t := time.AfterFunc(limit, func() {
		Report(os.Stderr, fmt.Sprintf("tests still running after %v", limit))
		os.Exit(2)
	})
	defer t.Stop()
	return m.Run()
}

// Report writes every goroutine's stack to w, then a summary of at most
// maxLines lines: the tests running and the places pipeshard's
// goroutines wait, the longest waits first.
func Report(w io.Writer, why string) {
	var b strings.Builder
	pprof.Lookup("goroutine").WriteTo(&b, 2) // every goroutine, as a panic prints them
	io.WriteString(w, b.String())
	fmt.Fprintf(w, "\n%s", Summary(b.String(), why))
}

const maxLines = 16

var (
	header  = regexp.MustCompile(`^goroutine \d+ \[([^\]]*)\]:`)
	minutes = regexp.MustCompile(`(\d+) minutes`)
	testFn  = regexp.MustCompile(`\.(Test\w+)(\.func[\d.]+)?\(`)
)

// Summary condenses a dump of all goroutines (runtime.Stack's format):
// the tests whose functions are on some stack, then one line per
// distinct place where a goroutine running pipeshard code waits.
func Summary(dump, why string) string {
	type place struct {
		state, where string
		n, mins      int
	}
	tests := map[string]bool{}
	places := map[string]*place{}
	for _, g := range strings.Split(dump, "\n\n") {
		lines := strings.Split(strings.TrimSpace(g), "\n")
		h := header.FindStringSubmatch(lines[0])
		if h == nil {
			continue
		}
		var ours []string // pipeshard frames, innermost first
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by") {
				continue
			}
			if m := testFn.FindStringSubmatch(l); m != nil && strings.HasPrefix(l, module) {
				tests[m[1]] = true
			}
			if strings.HasPrefix(l, module) && !strings.Contains(l, "internal/testwatch.") {
				ours = append(ours, shortFunc(l))
			}
		}
		if len(ours) == 0 {
			continue
		}
		top := shortFunc(lines[1])
		where := top
		if where != ours[0] {
			where += " in " + ours[0]
		}
		if len(ours) > 1 {
			where += " ← " + ours[1]
		}
		state := h[1]
		mins := 0
		if m := minutes.FindStringSubmatch(state); m != nil {
			fmt.Sscan(m[1], &mins)
		}
		state, _, _ = strings.Cut(state, ",")
		k := state + "|" + where
		p := places[k]
		if p == nil {
			p = &place{state: state, where: where}
			places[k] = p
		}
		p.n++
		p.mins = max(p.mins, mins)
	}
	var b strings.Builder
	names := make([]string, 0, len(tests))
	for n := range tests {
		names = append(names, n)
	}
	slices.Sort(names)
	fmt.Fprintf(&b, "testwatch: %s; tests on a stack: %s\n", why, strings.Join(names, ", "))
	ps := make([]*place, 0, len(places))
	for _, p := range places {
		ps = append(ps, p)
	}
	slices.SortFunc(ps, func(a, b *place) int {
		if a.mins != b.mins {
			return b.mins - a.mins
		}
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.where, b.where)
	})
	for i, p := range ps {
		if i == maxLines-1 {
			fmt.Fprintf(&b, "testwatch: and %d more places\n", len(ps)-i)
			break
		}
		fmt.Fprintf(&b, "testwatch: %d× %s %dm: %s\n", p.n, p.state, p.mins, p.where)
	}
	return b.String()
}

// shortFunc trims a stack line to package.function: no module path, no
// arguments.
func shortFunc(l string) string {
	l = strings.TrimPrefix(l, module)
	if i := strings.LastIndex(l, "("); i > 0 && strings.HasSuffix(l, ")") {
		l = l[:i]
	}
	if i := strings.LastIndex(l, "/"); i >= 0 {
		l = l[i+1:]
	}
	return l
}
