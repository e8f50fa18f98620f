package idle

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// load builds samples one second apart in which other processes use the
// given share of 2 cores (200 ticks a second) and the node uses self.
func load(start time.Time, others, self []float64) []Sample {
	var out []Sample
	s := Sample{At: start}
	out = append(out, s)
	for i := range others {
		s.At = s.At.Add(time.Second)
		s.Total += 200
		s.Self += uint64(self[i] * 200)
		s.Busy += uint64((others[i] + self[i]) * 200)
		out = append(out, s)
	}
	return out
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func TestWatcher(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := Config{BusyAbove: 0.5, IdleBelow: 0.2, BusyFor: 3 * time.Second, IdleFor: 5 * time.Second}
	for _, tc := range []struct {
		name         string
		others, self []float64
		want         []State // after each sample but the first
	}{
		{"idle machine, busy node", repeat(0.05, 6), repeat(0.95, 6),
			[]State{Serve, Serve, Serve, Serve, Serve, Serve}},
		{"owner comes back", repeat(0.8, 5), repeat(0.1, 5),
			[]State{Serve, Serve, Yield, Yield, Yield}},
		{"a short spike is ignored", []float64{0.9, 0.9, 0.1, 0.9, 0.9, 0.1}, repeat(0, 6),
			[]State{Serve, Serve, Serve, Serve, Serve, Serve}},
		{"yield, then idle long enough", append(repeat(0.9, 3), repeat(0.1, 6)...), repeat(0, 9),
			[]State{Serve, Serve, Yield, Yield, Yield, Yield, Yield, Serve, Serve}},
		{"hysteresis: between the thresholds stays yielded", append(repeat(0.9, 3), repeat(0.3, 8)...), repeat(0, 11),
			[]State{Serve, Serve, Yield, Yield, Yield, Yield, Yield, Yield, Yield, Yield, Yield}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := NewWatcher(cfg)
			ss := load(t0, tc.others, tc.self)
			w.Observe(ss[0])
			for i, s := range ss[1:] {
				if got, _ := w.Observe(s); got != tc.want[i] {
					t.Fatalf("sample %d (load %.2f): %v, want %v (%s)", i+1, w.Load, got, tc.want[i], w.Why)
				}
			}
		})
	}
}

func TestWatcherBattery(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := NewWatcher(Config{IdleFor: 2 * time.Second})
	ss := load(t0, repeat(0, 6), repeat(0, 6))
	w.Observe(ss[0])
	ss[1].OnBattery = true
	if st, changed := w.Observe(ss[1]); st != Yield || !changed || w.Why != "on battery" {
		t.Fatalf("on battery: %v %v %q", st, changed, w.Why)
	}
	// Back on mains: serve again after IdleFor of idleness.
	var got []State
	for _, s := range ss[2:] {
		st, _ := w.Observe(s)
		got = append(got, st)
	}
	if want := []State{Yield, Serve, Serve, Serve, Serve}; !equal(got, want) {
		t.Fatalf("after mains: %v, want %v", got, want)
	}
	if w := NewWatcher(Config{IgnoreBattery: true}); func() State { s := ss[1]; st, _ := w.Observe(s); return st }() != Serve {
		t.Fatal("IgnoreBattery yielded on battery")
	}
}

func equal(a, b []State) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// script is a Source that replays samples, then repeats the last.
type script struct {
	ss []Sample
	i  int
}

func (s *script) Sample() (Sample, error) {
	x := s.ss[min(s.i, len(s.ss)-1)]
	x.At = time.Now()
	if s.i >= len(s.ss) { // hold the last load
		last := s.ss[len(s.ss)-1]
		prev := s.ss[len(s.ss)-2]
		n := uint64(s.i - len(s.ss) + 1)
		x.Total += n * (last.Total - prev.Total)
		x.Busy += n * (last.Busy - prev.Busy)
		x.Self += n * (last.Self - prev.Self)
	}
	s.i++
	return x, nil
}

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		src := &script{ss: load(time.Now(), append(repeat(0.9, 12), repeat(0.0, 1)...), repeat(0, 13))}
		var changes []State
		ctx, cancel := context.WithCancel(t.Context())
		go Run(ctx, src, Config{BusyFor: 5 * time.Second, IdleFor: 10 * time.Second}, time.Second, func(s State, why string) {
			changes = append(changes, s)
		})
		time.Sleep(30 * time.Second)
		cancel()
		synctest.Wait()
		if want := []State{Yield, Serve}; !equal(changes, want) {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	})
}

func TestProc(t *testing.T) {
	s, err := Proc{}.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if s.Total == 0 || s.Busy > s.Total {
		t.Fatalf("implausible sample %+v", s)
	}
	// A fake root with a discharging battery and no mains.
	root := t.TempDir()
	write := func(p, v string) {
		p = filepath.Join(root, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("proc/stat", "cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 1 2 3 4\n")
	write("proc/self/stat", "42 (pipe shard) S 1 2 3 4 5 6 7 8 9 10 30 12 0 0\n")
	write("sys/class/power_supply/BAT0/type", "Battery\n")
	write("sys/class/power_supply/BAT0/status", "Discharging\n")
	write("sys/class/power_supply/AC/type", "Mains\n")
	write("sys/class/power_supply/AC/online", "0\n")
	s, err = Proc{Root: root}.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 1000 || s.Busy != 150 || s.Self != 42 || !s.OnBattery {
		t.Fatalf("sample %+v", s)
	}
	write("sys/class/power_supply/AC/online", "1\n")
	if s, _ = (Proc{Root: root}).Sample(); s.OnBattery {
		t.Fatal("on battery with mains online")
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("cpu  100 0 50 800 50 0 0 0 0 0\n"), []byte("42 (x) S 1 2 3 4 5 6 7 8 9 10 30 12 0\n"))
	f.Add([]byte("cpu 1\n"), []byte("(()"))
	f.Fuzz(func(t *testing.T, stat, self []byte) {
		if total, busy, err := ParseStat(stat); err == nil && busy > total {
			t.Fatalf("busy %d > total %d", busy, total)
		}
		ParseSelfStat(self)
	})
}
