// Package generate is the autoregressive decoding loop shared by the
// single-process runner and the swarm client: prefill the prompt, then
// sample one token at a time, streaming each to a callback.
//
// The loop does not know where the model runs. It drives a [Forwarder]:
// a local ovrt model ([Local]) or a route of remote stages. Timing is
// taken from an injected clock so tests are exact.
package generate
