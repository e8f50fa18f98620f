// Package teststore builds content-addressed stores of stories15M for
// tests: the model imported with its tokenizer, then cut into the layouts
// a test asks for, as `pipeshard shards import` and `shards split` would.
// Tests of node, swarm and sim start nodes on copies of such a store.
package teststore
