package idle

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Proc reads samples on Linux: the machine's CPU time from /proc/stat,
// the process's own from /proc/self/stat, and the power supply from
// /sys/class/power_supply. Root is the file system root ("/" unless a
// test says otherwise).
type Proc struct {
	Root string
	Now  func() time.Time
}

// Sample reads the counters.
func (p Proc) Sample() (Sample, error) {
	root := p.Root
	if root == "" {
		root = "/"
	}
	now := p.Now
	if now == nil {
		now = time.Now
	}
	s := Sample{At: now()}
	stat, err := os.ReadFile(filepath.Join(root, "proc/stat"))
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrSample, err)
	}
	if s.Total, s.Busy, err = ParseStat(stat); err != nil {
		return s, err
	}
	self, err := os.ReadFile(filepath.Join(root, "proc/self/stat"))
	if err != nil {
		return s, fmt.Errorf("%w: %w", ErrSample, err)
	}
	if s.Self, err = ParseSelfStat(self); err != nil {
		return s, err
	}
	s.OnBattery = onBattery(filepath.Join(root, "sys/class/power_supply"))
	return s, nil
}

// ParseStat reads the aggregate "cpu" line of /proc/stat: all ticks, and
// the ticks not spent idle or waiting for I/O.
func ParseStat(b []byte) (total, busy uint64, err error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return 0, 0, fmt.Errorf("%w: /proc/stat does not start with a cpu line", ErrSample)
	}
	var idle uint64
	for i, s := range f[1:] {
		if i >= 8 { // guest time is already counted in user time
			break
		}
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: /proc/stat field %d: %v", ErrSample, i+1, err)
		}
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return total, total - idle, nil
}

// ParseSelfStat reads a process's user and system ticks from its
// /proc/PID/stat (fields 14 and 15, after the command name in parens).
func ParseSelfStat(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: /proc/self/stat has no command name", ErrSample)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: /proc/self/stat has %d fields", ErrSample, len(f)+2)
	}
	var sum uint64
	for _, s := range f[11:13] {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: /proc/self/stat: %v", ErrSample, err)
		}
		sum += v
	}
	return sum, nil
}

// onBattery reports whether a battery is discharging and no mains supply
// is online.
func onBattery(dir string) bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	discharging, mains := false, false
	for _, e := range ents {
		d := filepath.Join(dir, e.Name())
		typ := readTrim(filepath.Join(d, "type"))
		switch typ {
		case "Battery":
			if readTrim(filepath.Join(d, "status")) == "Discharging" {
				discharging = true
			}
		case "Mains", "USB":
			if readTrim(filepath.Join(d, "online")) == "1" {
				mains = true
			}
		}
	}
	return discharging && !mains
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}
