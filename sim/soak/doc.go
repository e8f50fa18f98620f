// Package soak holds pipeshard's soak and chaos test (soak_test.go): a
// swarm of eight real `pipeshard node` processes on loopback, serving
// stories15M in overlapping layer ranges with two providers each, takes a
// steady load of greedy generations through a swarm client that fails
// over, while a seeded chaos loop SIGKILLs nodes at random and restarts
// them on the same home and port. It never takes down every provider of
// a range at once.
//
// The test asserts that every request either produces exactly the tokens
// a local, unsplit run of the model produces, or fails with one of the
// swarm's typed errors (counted by name; a tenth of the requests at
// most), and that the nodes that were never killed do not grow in
// goroutines or memory between a sample after the warm-up and one at the
// end, beyond a tolerance that a per-request leak exceeds. RSS and
// threads come from /proc/PID/status; goroutines from the go_goroutines
// gauge each node serves with `pipeshard node --metrics`.
//
// It runs in CI for under two minutes (a 40 s chaos phase).
// PIPESHARD_SOAK, or the test flag -soak.duration, sets the length of
// the chaos phase (a Go duration, e.g. 10m), and PIPESHARD_SOAK_SEED the
// random seed; run with -v to see the figures:
//
//	PIPESHARD_SOAK=10m go test -v -run TestSoak -timeout 30m ./sim/soak
//
// docs/benchmarks.md ("Soak") records a ten-minute run.
package soak
