package tokenizer

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Decode turns token ids into text. It is exactly the concatenation of a
// fresh Decoder's Next for every id and its Flush; see Decoder for the
// rules. Ids outside the vocabulary decode to U+FFFD; use DecodeChecked to
// reject them instead.
func (t *Tokenizer) Decode(ids []int) string {
	d := Decoder{t: t}
	var b strings.Builder
	for _, id := range ids {
		b.WriteString(d.Next(id))
	}
	b.WriteString(d.Flush())
	return b.String()
}

// DecodeChecked is Decode, but fails with an error wrapping ErrTokenID if
// any id lies outside the vocabulary, e.g. "token id 40000 at position 3
// outside the vocabulary of 32000".
func (t *Tokenizer) DecodeChecked(ids []int) (string, error) {
	for i, id := range ids {
		if id < 0 || id >= len(t.pieces) {
			return "", fmt.Errorf("%w: token id %d at position %d outside the vocabulary of %d", ErrTokenID, id, i, len(t.pieces))
		}
	}
	return t.Decode(ids), nil
}

// Decoder turns a stream of token ids into text as the tokens arrive, for
// printing generated text. Feeding it ids one by one with Next and ending
// with Flush yields exactly Decode of the whole sequence.
//
// Rules:
//   - A Normal token contributes its text, with "▁" as a space; in a
//     byte-level BPE vocabulary, the bytes its characters stand for ("Ġ" is
//     a space), which need not be whole UTF-8 characters.
//   - A Byte token contributes its single raw byte. Bytes are held back
//     until they complete a UTF-8 character, so a character split over
//     several tokens is emitted whole, once its last byte arrives.
//     Bytes that can no longer become valid UTF-8 are emitted as one U+FFFD
//     per maximal invalid subsequence (the Unicode "substitution of maximal
//     subparts" practice), as soon as that is certain.
//   - BOS, EOS and other Control tokens contribute nothing.
//   - An Unknown token, and an id outside the vocabulary, contribute U+FFFD.
//   - After BOS, the leading space of the next token that contributes text
//     is dropped: it is the dummy prefix Encode adds (SentencePiece's rule;
//     llama2.c strips a leading space after BOS). No space is dropped at the
//     start of a stream without BOS, so a decoder fed only the continuation
//     of a prompt prints " upon a time" after "Once".
//     A byte-level BPE tokenizer (Llama 3) adds no dummy prefix and so
//     drops nothing.
//
// A Decoder is not safe for concurrent use. Its zero value is not usable;
// create one with Tokenizer.NewDecoder.
type Decoder struct {
	t       *Tokenizer
	pending []byte // bytes of an incomplete UTF-8 character
	strip   bool   // BOS seen, no text since
}

// NewDecoder returns a streaming decoder for t.
func (t *Tokenizer) NewDecoder() *Decoder { return &Decoder{t: t} }

// Next consumes one token and returns the text that became complete, which
// may be empty.
func (d *Decoder) Next(id int) string {
	t := d.t
	var s string
	switch {
	case id < 0 || id >= len(t.surface):
		s = replacement
	case id == t.bos:
		d.strip = t.bpe == nil // only SentencePiece has a dummy prefix
		return ""
	default:
		s = t.surface[id]
		if s == "" {
			return "" // control token
		}
	}
	if d.strip {
		d.strip = false
		if s[0] == ' ' {
			s = s[1:]
		}
	}
	if len(d.pending) == 0 && utf8.ValidString(s) {
		return s // the common case: a whole piece, no copying
	}
	d.pending = append(d.pending, s...)
	return d.drain(false)
}

// Flush ends the stream: it returns the held-back bytes of an incomplete
// character as U+FFFD (or "" if there are none) and resets the decoder for
// a new stream.
func (d *Decoder) Flush() string {
	out := d.drain(true)
	d.pending = d.pending[:0]
	d.strip = false
	return out
}

// drain returns the complete prefix of the pending bytes, with invalid
// sequences replaced, and keeps the incomplete tail (none if final).
func (d *Decoder) drain(final bool) string {
	p := d.pending
	var out strings.Builder
	i := 0
	for i < len(p) {
		r, w := utf8.DecodeRune(p[i:])
		if r != utf8.RuneError || w > 1 {
			out.Write(p[i : i+w])
			i += w
			continue
		}
		k := partialLen(p[i:])
		if k > 0 && i+k == len(p) && !final {
			break // could still complete: wait for more bytes
		}
		out.WriteString(replacement)
		i += max(k, 1)
	}
	d.pending = p[:copy(p, p[i:])]
	return out.String()
}

// partialLen returns the length of the longest prefix of b that is a proper
// prefix of some valid UTF-8 encoding (0 if b[0] cannot begin one). b must
// not begin with a complete valid encoding.
func partialLen(b []byte) int {
	for k := 1; k <= len(b) && k <= 3; k++ {
		if utf8.FullRune(b[:k]) {
			return k - 1
		}
	}
	return min(len(b), 3)
}
