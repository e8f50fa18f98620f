// Package idle decides when a volunteer's machine is idle enough to serve
// and when its owner needs it back: the point of hosting on idle PCs.
//
// A [Watcher] is a pure state machine. It is fed [Sample]s (cumulative CPU
// time of the whole machine and of the node's own process, and whether
// the machine runs on battery) and answers with a [State]: Serve or
// Yield. Only the load of *other* processes counts, so the node's own
// inference never makes it yield. The machine turns busy when others use
// more than BusyAbove of all cores for BusyFor, or when it runs on
// battery; it turns idle again when others use less than IdleBelow for
// IdleFor (and it is on mains power). The two thresholds and the two
// hold times give hysteresis, so a node does not flap.
//
// [Run] drives a Watcher from a [Source] every period and calls back on
// each change; [Proc] is the Linux source (/proc/stat, /proc/self/stat
// and /sys/class/power_supply). The node drains on Yield (sessions move
// to other nodes) and takes sessions again on Serve: `pipeshard node
// --idle-only`.
//
// Where the OS reports no battery, OnBattery is false; other systems
// than Linux would add their own Source.
package idle
