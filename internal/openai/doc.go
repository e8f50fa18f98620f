// Package openai serves an OpenAI-compatible HTTP API (GET /v1/models,
// POST /v1/completions, POST /v1/chat/completions) over a Generator, the
// interface this package declares for whatever runs sequences: the swarm
// (Swarm, which opens one failover-capable session per sequence on a
// shared route, so that concurrent requests are batched by the stages),
// or anything a test supplies.
//
// The handlers validate requests and answer errors in OpenAI's JSON shape
// ({"error": {"message", "type", "param", "code"}}) with 400 for bad
// input, 404 for unknown paths, 405 for wrong methods, 413 for bodies over
// the limit and 503 when no route serves the model. With "stream": true
// they send server-sent events: one OpenAI chunk object per token and
// choice ("data: {...}\n\n"), a usage chunk with no choices when
// stream_options.include_usage is set (else the last finish chunk carries
// the usage), and "data: [DONE]".
//
// A request runs under its HTTP request's context: when the client goes
// away, its sequences are cancelled and their swarm sessions closed.
//
// Chat prompts use the model's chat template when Config.ChatTemplate is
// set. Without one (stories15M has none), the prompt is the plain
// continuation of the messages: their contents in order, joined by "\n",
// encoded with a leading BOS. See docs/api.md.
package openai
