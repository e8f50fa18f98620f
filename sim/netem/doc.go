// Package netem emulates a wide-area network between processes on one
// Linux machine, so that a pipeshard swarm of real nodes (real libp2p,
// real TCP and QUIC) can be run with WAN delays, jitter, loss and
// bandwidth limits between its hosts.
//
// Each emulated host is a network namespace with one interface, psim0,
// and one address in 10.77.0.0/16 (host i is 10.77.0.0+i+1: host 0 is
// 10.77.0.1). Only those namespaces are touched; the machine's own
// interfaces and routes never are. It needs root (euid 0): Start returns
// ErrNotRoot otherwise.
//
// # Use
//
//	n, err := netem.Start(ctx, netem.Spec{
//		Hosts: 4,
//		Link: func(from, to int) netem.Link {
//			return netem.Link{Delay: 20 * time.Millisecond, Loss: 0.001, Rate: 2 << 20}
//		},
//		Seed: 1,
//	})
//	if err != nil { ... }
//	defer n.Close()
//
//	// A program in host 2 (through `ip netns exec`):
//	cmd := n.Command(ctx, 2, "pipeshard", "node", "--listen", "/ip4/"+n.Addr(2).String()+"/tcp/4001")
//
//	// Or a socket of this process, opened in host 0:
//	var ln net.Listener
//	err = n.Do(0, func() (err error) {
//		ln, err = net.Listen("tcp", n.Addr(0).String()+":4001")
//		return err
//	})
//
// Do switches a locked OS thread into the host's namespace, runs the
// function and switches back (a thread that cannot be switched back is
// thrown away). A socket keeps the namespace it was made in, so it can be
// used from any goroutine afterwards; goroutines the function starts are
// not in the namespace, and name resolution should not be done in it.
//
// # Links
//
// Spec.Link gives what each direction of each pair sees; it is called
// once per ordered pair during Start. A Link is:
//
//   - Delay: one-way propagation delay.
//   - Jitter: each packet's delay is drawn uniformly from
//     [Delay−Jitter, Delay+Jitter] (netem's default distribution), never
//     below zero. The delayline backend does not reorder a pair's
//     packets: a packet that draws a shorter delay than the one before it
//     waits for it, so when packets are closer together than 2·Jitter the
//     mean delay rises above Delay. netem does reorder.
//   - Loss: each packet is dropped independently with this probability.
//   - Rate: bytes per second of whole IP packets (IP and transport
//     headers count, link-layer framing does not); 0 is unlimited. A bulk
//     TCP transfer therefore gets Rate × MSS/MTU of payload, 96.5% of
//     Rate for a 1448-byte MSS in a 1500-byte MTU.
//   - Queue: the drop-tail buffer, in bytes, of packets waiting for Rate
//     (like a router's), 0 for DefaultQueue: 200 ms of Rate, at least
//     64 KiB and at most 8 MiB. Packets travelling their Delay do not
//     count in it.
//
// Every direction of every pair is its own link: Rate is per pair, not a
// host's uplink shared by its peers.
//
// # Backends
//
// Spec.Backend picks how packets are carried; Net.Backend tells which one
// was.
//
// "delayline" works on any kernel with TUN devices, and is the one that
// runs (and is tested) on pipeshard's development machines and CI, whose
// kernels have no sch_netem. The emulating process opens a TUN device as
// psim0 in every namespace (MTU 1500, the /16 routed to it) and forwards
// the packets itself: one reader thread per host reads its TUN, looks up
// the destination host, drops the packet with the pair's Loss, passes it
// through the pair's serializer (a FIFO at Rate whose backlog is bounded
// by Queue), adds Delay ± Jitter, and queues it in one heap; one release
// thread, woken by a timerfd, writes each packet into its destination's
// TUN when it is due. Loss and jitter are drawn from a PCG stream per
// pair seeded by Spec.Seed, so that the same traffic meets the same fate
// in every run. Only IPv4 is carried (IPv6 is turned off on psim0);
// other packets, and packets to no host, are counted as Invalid and
// dropped. All packets held at once are bounded at 64 MiB.
//
// Its timing is that of a user-space process: the threads run at nice
// −20, and on an otherwise idle machine packets leave within tens of
// microseconds of their time. On a loaded 2-core machine they leave a few
// hundred microseconds late on the median and now and then milliseconds
// late; the tests measure a 20 ms round trip as 20.4–20.8 ms there.
// Throughput at a few MB/s costs little CPU; the emulator is not meant
// for hundreds of MB/s.
//
// "netem" uses the kernel's qdisc where it exists: a namespace
// psim-…-hub holds a bridge with one veth per host (GSO off on the
// hosts' side, so netem sees real packets); on the port towards each
// host, an htb root sorts packets by source address (u32 filters) into
// one class per impaired sender, whose leaf is netem with that pair's
// Link (rate counted on IP bytes with packetoverhead −14, limit in
// packets covering the queue and what travels the delay). The kernel's
// netem is not seeded here, and reorders under jitter. This backend could
// not be run where it was written: only its plumbing (namespaces, veths,
// bridge, classes and filters, with pfifo in place of netem) is tested.
// Its Stats come from the kernel's counters, read on each call: totals,
// and per impaired pair what its leaf sent and dropped.
//
// "auto" (or "") picks netem when HasNetem says the kernel has it, and
// delayline otherwise. HasNetem probes by adding netem to lo in a
// throwaway namespace.
//
// # Bounds
//
// A Net stops by itself. After Spec.MaxDuration (default 30 minutes) it
// closes as if Close were called, and so it does when the context given
// to Start ends. After Spec.MaxBytes (default 16 GiB) of IP packets
// offered to it (lost ones included) it forwards nothing more: further
// packets are counted as Capped (the netem backend checks its ports every
// 500 ms and takes the bridge down). Err and Stats.Stopped say why
// forwarding stopped; Done is closed once the Net has closed.
//
// # Cleanup
//
// Close stops forwarding, closes the TUNs and removes every namespace
// (and so every device) of the Net; it is idempotent and may be called
// from any goroutine, a signal handler's included. Programs started with
// Command keep their namespace alive until they exit: end them first
// (their context does).
//
// Namespaces are named psim-<pid>-<run>-<host> (and psim-<pid>-<run>-hub)
// after the process that made them. If that process dies without Close,
// its TUN devices go with it but its namespaces stay. Cleanup removes
// those of processes that are no longer alive (and those of this process
// that no live Net owns, after a pid is reused); Start calls it first,
// and `ip netns list` shows what is left.
package netem
