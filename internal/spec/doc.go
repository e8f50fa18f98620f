// Package spec is speculative decoding without I/O: drafters that guess
// the next tokens cheaply, the rules that decide which guesses the target
// model accepts, and the choice of how many to guess.
//
// # The idea
//
// A route of stages costs one round trip per traversal whatever the
// number of tokens in it, and each stage reads its weights once per
// traversal. So the client guesses K tokens, sends the last accepted token
// and the K guesses in one forward (generate.Step with All set), and gets
// back the target's choice after every one of the K+1 positions. The
// longest prefix of guesses the target agrees with is kept, plus the
// target's own token at the first disagreement (or a bonus token when all
// K agree): between 1 and K+1 tokens per traversal. The rejected guesses
// are never rolled back explicitly: the next forward starts at the first
// position to overwrite, and every stage drops its cache from there (the
// ovrt runtime's one rule).
//
// # Drafters
//
// A [Drafter] proposes up to k tokens to follow a sequence, and the
// distributions it drew them from (nil for a point-mass draft: a guess
// with no probability attached).
//
//   - [NGram] (prompt lookup) finds the most recent earlier occurrence of
//     the sequence's last n tokens (n from MaxN down to MinN) and proposes
//     what followed it. It needs no model, is deterministic, and shines on
//     text that repeats its context (names, code, summaries, loops).
//   - [DraftModel] runs a small model with the target's vocabulary in the
//     client (an ovrt model). It keeps its own KV cache and needs no
//     accept hook: on each call it rewinds to the longest common prefix of
//     what it holds and the sequence it is given, so rejected guesses are
//     dropped by position, as on the stages.
//
// # Acceptance
//
// Greedy: a guess is accepted while it equals the target's argmax. With
// sampling, two rules keep the output distributed exactly as the target's
// (Leviathan et al. 2023, Chen et al. 2023):
//
//   - point-mass drafts ([AcceptPointMass]): the target samples y_i from
//     its own filtered distribution p_i at every position (the last stage
//     already does, with one client uniform per row); x_i is accepted iff
//     y_i == x_i, else y_i is emitted and the round ends. Each emitted
//     token is a draw from p_i, so the output is the target's. Greedy
//     verification is the same rule with argmax for the draw.
//   - drafts with a distribution q ([AcceptDistributions]): x_i ~ q_i is
//     accepted with probability min(1, p_i(x_i)/q_i(x_i)); on rejection a
//     token is drawn from norm(max(0, p_i − q_i)). This needs p_i, so the
//     client must receive every verified row's logits: (K+1)·vocab·4
//     bytes per traversal (1.15 MB for K = 8 and a 32000-token
//     vocabulary), against 4 bytes per row for ids. Greedy never needs
//     them, nor do point-mass drafts.
//
// # How many drafts
//
// With an acceptance rate α per guess, K guesses yield on average
// E(K) = (1 − α^{K+1})/(1 − α) tokens per traversal, and a traversal costs
// Fixed + (K+1)·PerToken + K·Draft ([Costs]). [BestK] maximizes tokens per
// second; [Tuner] measures the costs and α as generation goes and asks
// BestK. [PaperK] is the fixed rule it is compared with: 6 on a LAN, 10
// when a hop takes 50 ms or more.
//
// The package is the client's logic only; internal/generate drives it
// against a backend, and docs/speculative.md explains the design.
package spec
