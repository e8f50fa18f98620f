package netem

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Errors of ParseIPv4. They are counted as Invalid packets in Stats.
var (
	errShort   = errors.New("netem: packet shorter than an IPv4 header")
	errVersion = errors.New("netem: not an IPv4 packet")
	errHeader  = errors.New("netem: bad IPv4 header length")
	errLength  = errors.New("netem: bad IPv4 total length")
)

// header is what the delay line needs of an IPv4 packet.
type header struct {
	src, dst netip.Addr
	length   int // total length from the header: the bytes on the wire
}

// parseIPv4 reads the IPv4 header at the start of p. It checks the
// version, the header length and the total length against len(p); it does
// not check the header checksum (the receiving kernel does) and accepts
// options. A packet whose total length is shorter than len(p) (padding) is
// accepted and its length is the header's.
func parseIPv4(p []byte) (header, error) {
	if len(p) < 20 {
		return header{}, errShort
	}
	if p[0]>>4 != 4 {
		return header{}, errVersion
	}
	ihl := int(p[0]&0x0f) * 4
	if ihl < 20 || ihl > len(p) {
		return header{}, errHeader
	}
	total := int(binary.BigEndian.Uint16(p[2:4]))
	if total < ihl || total > len(p) {
		return header{}, errLength
	}
	return header{
		src:    netip.AddrFrom4([4]byte(p[12:16])),
		dst:    netip.AddrFrom4([4]byte(p[16:20])),
		length: total,
	}, nil
}

// subnet is the emulated network: host i is 10.77.0.0 + i + 1, so up to
// 65,534 hosts fit; pipeshard uses at most MaxHosts of them.
var subnet = netip.MustParsePrefix("10.77.0.0/16")

// hostAddr is host i's address.
func hostAddr(i int) netip.Addr {
	b := subnet.Addr().As4()
	n := uint32(i + 1)
	b[2], b[3] = byte(n>>8), byte(n)
	return netip.AddrFrom4(b)
}

// hostIndex is the host that owns a, or -1 when a is no host of a network
// of hosts hosts (outside the subnet, the network or broadcast address, or
// beyond the last host).
func hostIndex(a netip.Addr, hosts int) int {
	if !a.Is4() || !subnet.Contains(a) {
		return -1
	}
	b := a.As4()
	i := int(b[2])<<8 | int(b[3]) - 1
	if i < 0 || i >= hosts {
		return -1
	}
	return i
}
