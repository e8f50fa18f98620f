// Package pipebench reproduces the paper's pipeline tables on pipeshard
// (`pipeshard bench pipeline`): shard parity in one process (table a),
// and, on the real swarm inside sim/netem's emulated network (real node
// processes, real libp2p streams, delayed packets), micro-batching on
// nodes of one core each (b), the WAN table of naive against full-stack
// decoding (c) and the speculative K sweep (d).
//
// Every table is a set of ratios measured within one run: the contenders
// alternate repeat by repeat, and each figure is the median over the
// repeats. The swarm tables are phases of one sim/scenario run per delay,
// so the nodes and the network are the same for every row of a delay.
package pipebench
