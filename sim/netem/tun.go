package netem

import (
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// tunName is the name of the emulated interface in every host namespace,
// for both backends.
const tunName = "psim0"

// mtu of every emulated interface.
const mtu = 1500

// openTUN makes the TUN device tunName in the calling thread's network
// namespace (call it inside inNetns), configures it with addr/16, the MTU
// and a transmit queue long enough for bursts, brings it and lo up (which
// routes the subnet to it), and returns its non-blocking fd. The fd keeps
// working after the thread leaves the namespace; the device goes away when
// the fd is closed.
func openTUN(addr netip.Addr) (int, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: open /dev/net/tun: %w", ErrSetup, err)
	}
	ifr, err := unix.NewIfreq(tunName)
	if err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: %w", ErrSetup, err)
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: TUNSETIFF %s: %w", ErrSetup, tunName, err)
	}
	if err := configure(addr); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// configure sets up tunName and lo in the calling thread's namespace
// through ioctls on a socket opened there.
func configure(addr netip.Addr) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: socket: %w", ErrSetup, err)
	}
	defer unix.Close(s)

	// IPv6 would only add router solicitations that the delay line drops.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+tunName+"/disable_ipv6", []byte("1"), 0)

	set := func(what string, req uint, fill func(*unix.Ifreq) error) error {
		ifr, err := unix.NewIfreq(tunName)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		if err := fill(ifr); err != nil {
			return fmt.Errorf("%w: %s: %w", ErrSetup, what, err)
		}
		if err := unix.IoctlIfreq(s, req, ifr); err != nil {
			return fmt.Errorf("%w: %s %s: %w", ErrSetup, what, tunName, err)
		}
		return nil
	}
	a4 := addr.As4()
	mask := netip.MustParseAddr("255.255.0.0").As4()
	steps := []struct {
		what string
		req  uint
		fill func(*unix.Ifreq) error
	}{
		{"set MTU", unix.SIOCSIFMTU, func(r *unix.Ifreq) error { r.SetUint32(mtu); return nil }},
		{"set txqueuelen", unix.SIOCSIFTXQLEN, func(r *unix.Ifreq) error { r.SetUint32(4096); return nil }},
		{"set address", unix.SIOCSIFADDR, func(r *unix.Ifreq) error { return r.SetInet4Addr(a4[:]) }},
		{"set netmask", unix.SIOCSIFNETMASK, func(r *unix.Ifreq) error { return r.SetInet4Addr(mask[:]) }},
	}
	for _, st := range steps {
		if err := set(st.what, st.req, st.fill); err != nil {
			return err
		}
	}
	for _, name := range []string{"lo", tunName} {
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrSetup, err)
		}
		if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
			return fmt.Errorf("%w: get flags %s: %w", ErrSetup, name, err)
		}
		ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
		if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
			return fmt.Errorf("%w: bring up %s: %w", ErrSetup, name, err)
		}
	}
	return nil
}
