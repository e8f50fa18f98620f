// Package sample turns logits into token ids: greedy argmax, or sampling
// with temperature, top-k and top-p from a seeded generator.
//
// Greedy decoding is the identity every pipeshard configuration is tested
// against: sharded, batched, speculative and failed-over generation must
// produce exactly the ids of plain greedy decoding. Ties break to the lowest
// id so that argmax is a function of the logits alone.
//
// Sampling is reproducible: the same seed, settings and logits give the
// same ids. [Sampler.Dist] exposes the filtered distribution itself, which
// speculative decoding's rejection sampling needs.
package sample
