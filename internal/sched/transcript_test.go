package sched

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata/*.txt with the outputs seen")

// TestTranscripts replays the scripts in testdata: each command line is
// followed by "----" and the decisions it must produce, then a blank
// line. Run with -rewrite to record new outputs (and read the diff).
//
// Commands (times and durations in Go syntax: 0, 250us, 1ms):
//
//	config [credit=C] [batch=B] [maxwindow=D] [compute=D]
//	open s=1 client=a [limited]
//	arrive [t=T] s=1[,2,...] tok=N [bytes=N]
//	grant s=1 n=N
//	next [t=T]
//	done [t=T] compute=D
//	close s=1
//	room s=1
//	backlog s=1[,2,...] tok=N   (loop re-sends for each credit)
//	loop n=N compute=D          (next; run for compute; done; refill)
//	stats
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no transcripts: %v", err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runTranscript(t, f) })
	}
}

type transcript struct {
	s       *Sched
	now     time.Duration
	client  map[SessionID]string
	backlog map[SessionID]int // tokens each credited session sends again
	served  map[string]int    // tokens per client in loops
}

func runTranscript(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tr := &transcript{}
	tr.reset(Config{})
	lines := strings.Split(string(data), "\n")
	var out strings.Builder
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		cmdLine := i + 1
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command without ----", path, cmdLine)
		}
		i += 2
		var want []string
		for ; i < len(lines) && lines[i] != ""; i++ {
			want = append(want, lines[i])
		}
		got := strings.TrimRight(tr.do(t, line), "\n")
		out.WriteString(line + "\n----\n" + got + "\n")
		if i < len(lines) {
			out.WriteString("\n")
		}
		if got != strings.Join(want, "\n") && !*rewrite {
			t.Errorf("%s:%d: %s\n got:\n%s\nwant:\n%s", path, cmdLine, line, got, strings.Join(want, "\n"))
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(out.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (tr *transcript) reset(c Config) error {
	s, err := New(c)
	if err != nil {
		return err
	}
	*tr = transcript{s: s, client: map[SessionID]string{}, backlog: map[SessionID]int{}, served: map[string]int{}}
	return nil
}

// do runs one command and returns its output.
func (tr *transcript) do(t *testing.T, line string) string {
	f := strings.Fields(line)
	args := map[string]string{}
	for _, a := range f[1:] {
		k, v, _ := strings.Cut(a, "=")
		args[k] = v
	}
	dur := func(k string) time.Duration {
		if args[k] == "" {
			return 0
		}
		if args[k] == "0" {
			return 0
		}
		d, err := time.ParseDuration(args[k])
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return d
	}
	num := func(k string) int {
		if args[k] == "" {
			return 0
		}
		n, err := strconv.Atoi(args[k])
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		return n
	}
	ids := func() []SessionID {
		var out []SessionID
		for _, p := range strings.Split(args["s"], ",") {
			n, err := strconv.ParseUint(p, 10, 64)
			if err != nil {
				t.Fatalf("%s: session %q: %v", line, p, err)
			}
			out = append(out, SessionID(n))
		}
		return out
	}
	if _, ok := args["t"]; ok {
		at := dur("t")
		if at < tr.now {
			t.Fatalf("%s: time goes back from %v", line, tr.now)
		}
		tr.now = at
	}
	switch f[0] {
	case "config":
		if err := tr.reset(Config{Credit: num("credit"), BatchTokens: num("batch"), MaxWindow: dur("maxwindow"), Compute: dur("compute")}); err != nil {
			return err.Error()
		}
		return "ok"
	case "open":
		_, limited := args["limited"]
		id := ids()[0]
		if err := tr.s.Open(id, args["client"], limited); err != nil {
			return err.Error()
		}
		tr.client[id] = args["client"]
		return "ok"
	case "arrive":
		var out []string
		for _, id := range ids() {
			j, err := tr.s.Arrive(tr.now, id, num("tok"), num("bytes"))
			if err != nil {
				out = append(out, err.Error())
				continue
			}
			out = append(out, fmt.Sprintf("j%d s%d tok=%d", j.ID, j.Session, j.Tokens))
		}
		return strings.Join(out, "\n")
	case "grant":
		if err := tr.s.Grant(ids()[0], num("n")); err != nil {
			return err.Error()
		}
		return "ok"
	case "next":
		return tr.next()
	case "done":
		return creditString(tr.s.Done(tr.now, dur("compute")))
	case "close":
		var out []string
		for _, j := range tr.s.Close(ids()[0]) {
			out = append(out, fmt.Sprintf("j%d", j.ID))
		}
		return "dropped [" + strings.Join(out, " ") + "]"
	case "room":
		return strconv.Itoa(tr.s.Room(ids()[0]))
	case "backlog":
		for _, id := range ids() {
			tr.backlog[id] = num("tok")
		}
		return "ok"
	case "loop":
		return tr.loop(num("n"), dur("compute"))
	case "stats":
		st := tr.s.Stats()
		return fmt.Sprintf("sessions=%d clients=%d queued=%d/%dtok/%dB running=%d window=%v compute=%v gap=%v batches=%d waits=%d",
			st.Sessions, st.Clients, st.QueuedJobs, st.QueuedTokens, st.QueuedBytes, st.Running, st.Window, st.Compute, st.Gap, st.Batches, st.Waits)
	}
	t.Fatalf("unknown command %q", line)
	return ""
}

func (tr *transcript) next() string {
	rd := tr.s.Next(tr.now)
	switch {
	case len(rd.Batch) > 0:
		return "run " + batchString(rd.Batch) + fmt.Sprintf(" window=%v", rd.Window)
	case rd.Wait > 0:
		return fmt.Sprintf("wait %v (window %v)", rd.Wait, rd.Window)
	case tr.s.Busy():
		return "busy"
	}
	return "idle"
}

// loop runs n decisions: each batch for compute, refilling backlogged
// sessions as their credit returns, and sums tokens per client.
func (tr *transcript) loop(n int, compute time.Duration) string {
	var out []string
	for range n {
		rd := tr.s.Next(tr.now)
		switch {
		case len(rd.Batch) > 0:
			tok := 0
			for _, j := range rd.Batch {
				tok += j.Tokens
				tr.served[tr.client[j.Session]] += j.Tokens
			}
			out = append(out, fmt.Sprintf("%v: run %s = %d tokens", tr.now, batchString(rd.Batch), tok))
			tr.now += compute
			for _, c := range tr.s.Done(tr.now, compute) {
				if tok := tr.backlog[c.Session]; tok > 0 {
					for range c.N {
						tr.s.Arrive(tr.now, c.Session, tok, 0)
					}
				}
			}
		case rd.Wait > 0:
			out = append(out, fmt.Sprintf("%v: wait %v", tr.now, rd.Wait))
			tr.now += rd.Wait
		default:
			out = append(out, fmt.Sprintf("%v: idle", tr.now))
		}
	}
	var names []string
	for c := range tr.served {
		names = append(names, c)
	}
	slices.Sort(names)
	var sums []string
	for _, c := range names {
		sums = append(sums, fmt.Sprintf("%s=%d", c, tr.served[c]))
	}
	out = append(out, "served: "+strings.Join(sums, " "))
	return strings.Join(out, "\n")
}

func batchString(b []Job) string {
	var parts []string
	for _, j := range b {
		parts = append(parts, fmt.Sprintf("j%d(s%d,%d)", j.ID, j.Session, j.Tokens))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

func creditString(cs []Credit) string {
	if len(cs) == 0 {
		return "credit none"
	}
	var parts []string
	for _, c := range cs {
		parts = append(parts, fmt.Sprintf("s%d+%d", c.Session, c.N))
	}
	return "credit " + strings.Join(parts, " ")
}
