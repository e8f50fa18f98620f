// Package dashboard serves a live map of a swarm: one page, embedded in
// the binary (go:embed) and drawn with inline SVG and JavaScript written
// here — no external CDN, no build step — and the JSON it polls.
//
// GET / is the page; GET /api/swarm is a Snapshot: the nodes of the
// model's signed status records (internal/status; their layer ranges,
// load, free KV cache, throughput, draining flag), the layer coverage
// they add up to, the live routes this process serves (a node) or uses (a
// client), and this process's throughput over time, sampled each
// Config.Every into a ring buffer of Config.History samples by Run.
//
// The page draws layer coverage as one bar per node over the layer axis,
// the load of each node, the live routes as paths over a map of the nodes
// (placed by layer), and throughput over time. It sets
// data-loaded="true" (and data-nodes, data-routes) on <body> once the
// first snapshot is drawn, and data-coverage-rect with the coverage
// chart's page rectangle, which is what tests check in headless Chromium.
//
// The package reads its sources through functions in Config, so it
// imports neither node nor swarm; `pipeshard node --ui` and `pipeshard
// swarm serve` wire them (internal/cli).
package dashboard
