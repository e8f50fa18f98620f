// Package generate is the autoregressive decoding loop shared by the
// single-process runner and the swarm client: prefill the prompt, then
// sample one token at a time, streaming each to a callback.
//
// The loop does not know where the model runs. It drives a [Backend]: a
// local ovrt model ([Local]) or a route of remote stages (a swarm
// session). Timing is taken from an injected clock so tests are exact.
//
// [RunSpeculative] is the same loop with speculative decoding: a drafter
// from internal/spec guesses K tokens, one step verifies all of them (the
// last token and the K guesses at once, one output row per position), and
// a rejected guess is dropped by starting the next step at its position.
// Greedy output, and sampled output with point-mass drafts, are Run's
// token for token; drafts with distributions are verified by rejection
// sampling. See docs/speculative.md.
package generate
