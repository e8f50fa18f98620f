package spec

import (
	"context"
	"errors"
)

// Sentinel errors.
var (
	ErrDraft      = errors.New("spec: bad draft")
	ErrDraftModel = errors.New("spec: unusable draft model")
	ErrParse      = errors.New("spec: cannot parse")
)

// Drafter proposes tokens to follow a sequence.
//
// Draft returns at most k tokens to follow seq (the prompt and every token
// accepted so far), and, for drafts drawn from a distribution, that
// distribution per token (q[i] has one probability per vocabulary id and
// tokens[i] was drawn from it). q is nil for point-mass drafts. Fewer than
// k tokens, or none, is a valid answer: the next traversal is then
// shorter. A Drafter may keep state between calls but must not assume the
// previous call's tokens were accepted: seq says what was. It is not
// required to be safe for concurrent use.
type Drafter interface {
	Draft(ctx context.Context, seq []int, k int) (tokens []int, q [][]float64, err error)
}
