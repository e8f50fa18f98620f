package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// textStream writes generated tokens as text as they come, and can take
// tokens back: verification that samples steps may find, after the
// fact, that tokens already shown came from a lying node (the sequence is
// then regenerated from the last honest token).
//
// What it does about text already shown depends on where it goes. On a
// terminal it streams every token at once and erases taken-back text
// (within the current line; across lines it says so on stderr). Into a
// pipe or file, where written bytes cannot be taken back, it holds text
// back until verification has covered it (hold reports how many generated
// tokens are verified) and writes the rest at the end.
type textStream struct {
	w, errw io.Writer
	tok     *tokenizer.Tokenizer // nil: token ids are written, not text
	prompt  []int
	quiet   bool // --json: collect, write nothing

	// hold, if set, reports how many generated tokens may be written.
	hold func() int
	tty  bool

	dec     *tokenizer.Decoder
	text    strings.Builder
	ids     []int // generated tokens
	ends    []int // text length after each generated token
	written int   // bytes of text written to w
}

func newTextStream(w, errw io.Writer, tok *tokenizer.Tokenizer, prompt []int, quiet bool) *textStream {
	s := &textStream{w: w, errw: errw, tok: tok, prompt: prompt, quiet: quiet}
	if f, ok := w.(*os.File); ok {
		s.tty = term.IsTerminal(int(f.Fd()))
	}
	if tok != nil {
		s.dec = tok.NewDecoder()
		var p strings.Builder
		for _, id := range prompt {
			p.WriteString(s.dec.Next(id))
		}
		if !quiet {
			fmt.Fprint(w, p.String())
		}
	}
	return s
}

// holdUntilVerified makes s hold text back until verified (a count of
// generated tokens) covers it, unless s writes to a terminal.
func (s *textStream) holdUntilVerified(verified func() int) {
	if !s.tty {
		s.hold = verified
	}
}

// token appends one generated token.
func (s *textStream) token(id int) {
	if s.dec == nil {
		fmt.Fprintf(&s.text, "%d ", id)
	} else {
		s.text.WriteString(s.dec.Next(id))
	}
	s.ids = append(s.ids, id)
	s.ends = append(s.ends, s.text.Len())
	s.emit(false)
}

// emit writes what may be written: everything, or at the end of the
// run, or up to the verified tokens when holding.
func (s *textStream) emit(final bool) {
	if s.quiet {
		return
	}
	upto := s.text.Len()
	if s.hold != nil && !final {
		n := min(s.hold(), len(s.ends))
		upto = 0
		if n > 0 {
			upto = s.ends[n-1]
		}
	}
	if upto > s.written {
		io.WriteString(s.w, s.text.String()[s.written:upto])
		s.written = upto
	}
}

// rewind keeps the first keep generated tokens and takes the rest back.
func (s *textStream) rewind(keep int) {
	keep = max(0, min(keep, len(s.ends)))
	cut := 0
	if keep > 0 {
		cut = s.ends[keep-1]
	}
	all := s.text.String()
	if s.written > cut && !s.quiet {
		gone := all[cut:s.written]
		n := utf8.RuneCountInString(gone)
		if s.tty && !strings.ContainsAny(gone, "\n\r\t") {
			fmt.Fprint(s.w, strings.Repeat("\b", n)+strings.Repeat(" ", n)+strings.Repeat("\b", n))
		} else {
			fmt.Fprintf(s.errw, "\n[verification took back the last %d tokens shown: they came from a node that lied; what follows replaces them]\n", len(s.ends)-keep)
		}
		s.written = cut
	}
	s.text.Reset()
	s.text.WriteString(all[:cut])
	s.ends = s.ends[:keep]
	s.ids = s.ids[:keep]
	if s.tok != nil {
		// The decoder's state (a leading space, split UTF-8) follows
		// the tokens: rebuild it from the prompt and the kept tokens,
		// whose text s.text already holds.
		s.dec = s.tok.NewDecoder()
		for _, id := range append(slices.Clone(s.prompt), s.ids...) {
			s.dec.Next(id)
		}
	}
}

// finish flushes the decoder and writes what is left; it returns the
// generated text.
func (s *textStream) finish() string {
	if s.dec != nil {
		s.text.WriteString(s.dec.Flush())
	}
	s.emit(true)
	return s.text.String()
}
