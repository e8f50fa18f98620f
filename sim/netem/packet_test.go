package netem

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
)

// ipv4 builds an IPv4 packet from src to dst with payload bytes of payload
// and ihl 32-bit words of header.
func ipv4(src, dst netip.Addr, ihl, payload int) []byte {
	p := make([]byte, ihl*4+payload)
	p[0] = 4<<4 | byte(ihl)
	binary.BigEndian.PutUint16(p[2:4], uint16(len(p)))
	p[8], p[9] = 64, 17
	s, d := src.As4(), dst.As4()
	copy(p[12:16], s[:])
	copy(p[16:20], d[:])
	return p
}

func TestParseIPv4(t *testing.T) {
	a, b := hostAddr(0), hostAddr(1)
	good := ipv4(a, b, 5, 100)
	padded := append(ipv4(a, b, 5, 10), 0, 0, 0, 0)
	opts := ipv4(a, b, 15, 0)
	for _, tc := range []struct {
		name string
		p    []byte
		len  int
		err  error
	}{
		{"good", good, 120, nil},
		{"padded", padded, 30, nil},
		{"options", opts, 60, nil},
		{"empty", nil, 0, errShort},
		{"short", good[:19], 0, errShort},
		{"ipv6", append([]byte{0x60}, good[1:]...), 0, errVersion},
		{"ihl<5", append([]byte{0x44}, good[1:]...), 0, errHeader},
		{"ihl>len", append([]byte{0x4f}, good[1:30]...), 0, errHeader},
		{"total>len", good[:100], 0, errLength},
		{"total<ihl", func() []byte { p := ipv4(a, b, 5, 0); p[3] = 19; return p }(), 0, errLength},
	} {
		h, err := parseIPv4(tc.p)
		if !errors.Is(err, tc.err) {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.err)
			continue
		}
		if err == nil && (h.length != tc.len || h.src != a || h.dst != b) {
			t.Errorf("%s: %+v, want length %d %v → %v", tc.name, h, tc.len, a, b)
		}
	}
}

func TestHostAddr(t *testing.T) {
	for _, tc := range []struct {
		i    int
		addr string
	}{{0, "10.77.0.1"}, {1, "10.77.0.2"}, {254, "10.77.0.255"}, {255, "10.77.1.0"}, {511, "10.77.2.0"}} {
		a := hostAddr(tc.i)
		if a.String() != tc.addr {
			t.Errorf("hostAddr(%d) = %v, want %s", tc.i, a, tc.addr)
		}
		if got := hostIndex(a, 65534); got != tc.i {
			t.Errorf("hostIndex(%v) = %d, want %d", a, got, tc.i)
		}
	}
	for _, s := range []string{"10.77.0.0", "10.77.0.3", "10.78.0.1", "127.0.0.1", "10.77.255.255", "::1"} {
		if got := hostIndex(netip.MustParseAddr(s), 2); got != -1 {
			t.Errorf("hostIndex(%s, 2) = %d, want -1", s, got)
		}
	}
}

// FuzzParseIPv4: the parser never panics, and what it accepts is
// consistent with the bytes.
func FuzzParseIPv4(f *testing.F) {
	f.Add(ipv4(hostAddr(0), hostAddr(1), 5, 100))
	f.Add(ipv4(hostAddr(3), hostAddr(2), 15, 3))
	f.Add([]byte{0x45, 0, 0, 20})
	f.Add([]byte{0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, p []byte) {
		h, err := parseIPv4(p)
		if err != nil {
			return
		}
		ihl := int(p[0]&0x0f) * 4
		if p[0]>>4 != 4 || ihl < 20 || h.length < ihl || h.length > len(p) {
			t.Fatalf("accepted %x as %+v", p, h)
		}
		if h.dst != netip.AddrFrom4([4]byte(p[16:20])) || h.src != netip.AddrFrom4([4]byte(p[12:16])) {
			t.Fatalf("addresses of %x: %+v", p, h)
		}
		if i := hostIndex(h.dst, 65534); i >= 0 && hostAddr(i) != h.dst {
			t.Fatalf("hostIndex(%v) = %d, whose address is %v", h.dst, i, hostAddr(i))
		}
	})
}
