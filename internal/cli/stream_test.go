package cli

import (
	"strings"
	"testing"
)

// TestTextStream: tokens are written as they come; a rewind erases the
// taken-back text on a terminal and says so elsewhere; with a hold, only
// verified tokens are written before the end. Tokens are written as ids
// (no tokenizer), "7 " for token 7.
func TestTextStream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tty      bool
		hold     []int // verified count before each token (nil: no hold)
		rewindAt int   // rewind after this many tokens to keep 1 (0: none)
		ids      []int
		wantOut  string
		wantErr  string
		wantText string
	}{
		{name: "plain", ids: []int{1, 2, 3}, wantOut: "1 2 3 ", wantText: "1 2 3 "},
		{name: "tty rewind erases", tty: true, rewindAt: 3, ids: []int{1, 2, 3, 4},
			wantOut: "1 2 3 \b\b\b\b    \b\b\b\b4 ", wantText: "1 4 "},
		{name: "pipe rewind says so", rewindAt: 3, ids: []int{1, 2, 3, 4},
			wantOut: "1 2 3 4 ", wantErr: "took back the last 2 tokens", wantText: "1 4 "},
		{name: "hold writes verified only", hold: []int{0, 0, 2, 2}, ids: []int{1, 2, 3, 4},
			wantOut: "1 2 |3 4 ", wantText: "1 2 3 4 "},
		{name: "hold and rewind write no lie", hold: []int{0, 1, 1, 1}, rewindAt: 3, ids: []int{1, 2, 3, 4},
			wantOut: "1 |4 ", wantText: "1 4 "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errw strings.Builder
			s := newTextStream(&out, &errw, nil, nil, false)
			s.tty = tc.tty
			verified := 0
			if tc.hold != nil {
				s.hold = func() int { return verified }
			}
			for i, id := range tc.ids {
				if tc.hold != nil {
					verified = tc.hold[i]
				}
				if tc.rewindAt > 0 && i == tc.rewindAt {
					s.rewind(1)
				}
				s.token(id)
			}
			if tc.hold != nil {
				out.WriteString("|") // what was written before the end
			}
			text := s.finish()
			got := out.String()
			if got != tc.wantOut {
				t.Errorf("wrote %q, want %q", got, tc.wantOut)
			}
			if !strings.Contains(errw.String(), tc.wantErr) || tc.wantErr == "" && errw.Len() > 0 {
				t.Errorf("stderr %q, want %q", errw.String(), tc.wantErr)
			}
			if text != tc.wantText {
				t.Errorf("text %q, want %q", text, tc.wantText)
			}
		})
	}
}
