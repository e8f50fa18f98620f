package scenario

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written as "50ms", "2m" or "1h30m". A
// bare number is seconds (as in sim/scale's files), so `delay: 50` is 50
// seconds, which Validate rejects as a delay.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalYAML reads a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, "want a duration such as \"50ms\"")
	}
	v, err := parseDuration(n.Value)
	if err != nil {
		return nodeErr(n, "%v", err)
	}
	*d = Duration(v)
	return nil
}

func parseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(f) || math.Abs(f) > math.MaxInt64/1e9 {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(math.Round(f * 1e9)), nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q: want e.g. \"50ms\", \"2m\" or seconds", s)
	}
	return v, nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// Bandwidth is a rate in bytes per second. It is written with a unit:
// bits ("100Mbit", "1.5Gbit/s", "512kbit", "20Mbps") or bytes
// ("10MB/s", "1MiB/s", "500KB", "5MBps"); a bare number is bytes
// per second. Prefixes k/K, M, G are powers of 1000; Ki, Mi, Gi of 1024.
// 0 means unlimited.
type Bandwidth int64

// UnmarshalYAML reads a rate.
func (b *Bandwidth) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, "want a rate such as \"100Mbit\" or \"10MB/s\"")
	}
	v, err := parseRate(n.Value)
	if err != nil {
		return nodeErr(n, "%v", err)
	}
	*b = Bandwidth(v)
	return nil
}

// String writes the rate in Mbit/s.
func (b Bandwidth) String() string {
	if b == 0 {
		return "unlimited"
	}
	return strconv.FormatFloat(float64(b)*8/1e6, 'g', 6, 64) + "Mbit"
}

// MarshalYAML writes the rate as bytes per second.
func (b Bandwidth) MarshalYAML() (any, error) { return int64(b), nil }

func parseRate(s string) (int64, error) {
	orig := s
	s = strings.TrimSpace(s)
	switch {
	case strings.HasSuffix(s, "bps"): // Mbps
		s = strings.TrimSuffix(s, "bps") + "bit"
	case strings.HasSuffix(s, "Bps"): // MBps
		s = strings.TrimSuffix(s, "ps")
	default:
		s = strings.TrimSuffix(s, "/s")
	}
	num, unit := splitNumber(s)
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("rate %q: want e.g. \"100Mbit\" or \"10MB/s\"", orig)
	}
	mult, ok := rateUnits[unit]
	if !ok {
		return 0, fmt.Errorf("rate %q: unknown unit %q (bit, kbit, Mbit, Gbit, B, KB, MB, GB, KiB, MiB, GiB)", orig, unit)
	}
	v := f * mult
	if v > 1e15 {
		return 0, fmt.Errorf("rate %q is too large", orig)
	}
	return int64(math.Round(v)), nil
}

// rateUnits are bytes per second per unit.
var rateUnits = map[string]float64{
	"": 1, "B": 1, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
	"bit": 1.0 / 8, "kbit": 1e3 / 8, "Kbit": 1e3 / 8, "Mbit": 1e6 / 8, "Gbit": 1e9 / 8,
}

// Size is a byte count written as "512MiB", "2GB" or a bare number.
type Size int64

// UnmarshalYAML reads a size.
func (z *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return nodeErr(n, "want a size such as \"512MiB\"")
	}
	num, unit := splitNumber(strings.TrimSpace(n.Value))
	f, err := strconv.ParseFloat(num, 64)
	mult, ok := sizeUnits[unit]
	if err != nil || !ok || f < 0 || math.IsNaN(f) || f*mult > 1<<62 {
		return nodeErr(n, "size %q: want e.g. \"512MiB\", \"2GB\" or bytes", n.Value)
	}
	*z = Size(math.Round(f * mult))
	return nil
}

// MarshalYAML writes the size in bytes.
func (z Size) MarshalYAML() (any, error) { return int64(z), nil }

var sizeUnits = map[string]float64{
	"": 1, "B": 1, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40,
}

// splitNumber splits "1.5Gbit" into "1.5" and "Gbit".
func splitNumber(s string) (string, string) {
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == 'e' && i > 0 && i+1 < len(s) && (s[i+1] >= '0' && s[i+1] <= '9' || s[i+1] == '-' || s[i+1] == '+') || (s[i] == '-' || s[i] == '+') && (i == 0 || s[i-1] == 'e')) {
		i++
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// Ints is one integer or a list of them: `in_flight: 4` or
// `in_flight: [1, 4]`.
type Ints []int

// UnmarshalYAML reads an integer or a sequence of integers.
func (v *Ints) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		var i int
		if err := n.Decode(&i); err != nil {
			return nodeErr(n, "want an integer or a list of integers")
		}
		*v = Ints{i}
		return nil
	case yaml.SequenceNode:
		var is []int
		if err := n.Decode(&is); err != nil {
			return err
		}
		*v = is
		return nil
	}
	return nodeErr(n, "want an integer or a list of integers")
}

// nodeErr is an error about a value of the file, with its line.
func nodeErr(n *yaml.Node, format string, a ...any) error {
	return fmt.Errorf("line %d: %s", n.Line, fmt.Sprintf(format, a...))
}
