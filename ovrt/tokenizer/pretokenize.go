package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// This file is Llama 3's pre-tokenizer, the regular expression
//
//	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//
// written as a scanner, because Go's regexp has no lookahead. The text is
// cut into the successive matches of the expression, each taken at the end
// of the previous one. At each position the alternatives are tried in
// order, the first that matches wins (leftmost-first, as in a backtracking
// engine, not the longest), and each quantifier is greedy, giving back
// only what the rest of its alternative needs:
//
//  1. (?i:'s|'t|'re|'ve|'m|'ll|'d): an ASCII apostrophe and a contraction
//     suffix, in any case ("'S", "'Re"; Unicode simple case folding, so
//     U+017F "ſ" counts as an s). "don't" → "don" "'t".
//  2. [^\r\n\p{L}\p{N}]?\p{L}+: a run of letters, with at most one
//     preceding character that is neither \r, \n, a letter nor a number
//     (a space, a tab, punctuation). "Hello world" → "Hello" " world";
//     "(hi" → "(hi"; "'tis" → "'t" "is" (alternative 1 comes first).
//  3. \p{N}{1,3}: one to three numbers. "12345" → "123" "45".
//  4. ` ?[^\s\p{L}\p{N}]+[\r\n]*`: a run of characters that are neither
//     whitespace, letters nor numbers, with at most one preceding ASCII
//     space and any following \r and \n. "Hi!!\n\nx" → "Hi" "!!\n\n" "x";
//     " ..." → " ...".
//  5. \s*[\r\n]+: in a run of whitespace holding \r or \n, everything up
//     to and including the last \r or \n. "a \n\n  b" → "a" " \n\n" " " " b"
//     (the two spaces after the newlines go on to alternatives 6 and 2).
//  6. \s+(?!\S): a run of whitespace up to the end of the text, or else
//     all of it but its last character, which is left to precede the next
//     word. "  x" → " " " x"; "x   " → "x" "   ".
//  7. \s+: a single whitespace character before a non-space one that
//     alternative 2 did not take: "\t!" → "\t" "!"; "a\n!" is "a" "\n" "!"
//     by alternative 5.
//
// Every character matches some alternative (letters 2, numbers 3,
// whitespace 5–7, anything else 4), so the pieces tile the text.
//
// The classes are Unicode's: \p{L} is unicode.IsLetter, \p{N} is
// unicode.IsNumber (Nd, Nl and No: "½" and "Ⅻ" are numbers), and \s is the
// White_Space property, unicode.IsSpace (ASCII \t \n \v \f \r and space,
// U+0085, U+00A0, U+1680, U+2000–U+200A, U+2028, U+2029, U+202F, U+205F,
// U+3000), as Oniguruma, the engine of Hugging Face's tokenizers, defines
// \s. A byte of invalid UTF-8 counts as one character of none of these
// classes, as U+FFFD would. The scanner is linear: each position is read
// at most a bounded number of times.

// rclass is a character's class for the pre-tokenizer.
type rclass uint8

const (
	cOther   rclass = iota // not a letter, number or whitespace; also invalid UTF-8
	cLetter                // \p{L}
	cNumber                // \p{N}
	cSpace                 // \s other than \r and \n
	cNewline               // \r or \n
)

var asciiClass = func() (t [utf8.RuneSelf]rclass) {
	for c := range t {
		r := rune(c)
		switch {
		case r == '\r' || r == '\n':
			t[c] = cNewline
		case unicode.IsSpace(r):
			t[c] = cSpace
		case unicode.IsLetter(r):
			t[c] = cLetter
		case unicode.IsNumber(r):
			t[c] = cNumber
		}
	}
	return t
}()

// classAt returns the class and byte width of the character at s[i]
// (i < len(s)).
func classAt(s string, i int) (rclass, int) {
	if c := s[i]; c < utf8.RuneSelf {
		return asciiClass[c], 1
	}
	r, w := utf8.DecodeRuneInString(s[i:])
	switch {
	case r == utf8.RuneError && w == 1:
		return cOther, 1
	case unicode.IsLetter(r):
		return cLetter, w
	case unicode.IsNumber(r):
		return cNumber, w
	case unicode.IsSpace(r): // no non-ASCII space is \r or \n
		return cSpace, w
	}
	return cOther, w
}

// runEnd returns the end of the run of characters of class c (or, with
// c2 != c, of either class) starting at s[i].
func runEnd(s string, i int, c, c2 rclass) int {
	for i < len(s) {
		k, w := classAt(s, i)
		if k != c && k != c2 {
			break
		}
		i += w
	}
	return i
}

// nextPiece returns the end of the pre-tokenizer piece that starts at s[i]
// (i < len(s)); see the comment at the top of this file.
func nextPiece(s string, i int) int {
	c0, w0 := classAt(s, i)
	j := i + w0 // after the first character

	// 1. Contractions.
	if s[i] == '\'' {
		if n := contraction(s[j:]); n > 0 {
			return j + n
		}
	}
	// 2. Letters, with an optional non-letter, non-number, non-newline
	// character before them; 3. numbers. A letter or a number cannot be
	// the optional character, so they start their own run here.
	switch c0 {
	case cLetter:
		return runEnd(s, j, cLetter, cLetter)
	case cNumber:
		for k := 1; k < 3 && j < len(s); k++ {
			c, w := classAt(s, j)
			if c != cNumber {
				break
			}
			j += w
		}
		return j
	case cOther, cSpace:
		if j < len(s) {
			if c1, w1 := classAt(s, j); c1 == cLetter {
				return runEnd(s, j+w1, cLetter, cLetter)
			}
		}
	}
	// 4. Other characters, with an optional leading ASCII space, then
	// newlines. A space is whitespace, so it can only be the option.
	start := -1
	if c0 == cOther {
		start = i
	} else if s[i] == ' ' && j < len(s) {
		if c1, _ := classAt(s, j); c1 == cOther {
			start = j
		}
	}
	if start >= 0 {
		e := runEnd(s, start, cOther, cOther)
		return runEnd(s, e, cNewline, cNewline)
	}
	// s[i] is whitespace. Scan its run, noting where the last newline
	// ends and where the last character starts.
	e, lastNL, last := i, -1, i
	for e < len(s) {
		c, w := classAt(s, e)
		if c != cSpace && c != cNewline {
			break
		}
		if c == cNewline {
			lastNL = e + w
		}
		last = e
		e += w
	}
	switch {
	case lastNL >= 0: // 5. \s*[\r\n]+: greedy \s* gives back down to the last newline
		return lastNL
	case e == len(s): // 6. \s+(?!\S) at the end of the text
		return e
	case last > i: // 6. \s+(?!\S): all but the last character, which is followed by non-space
		return last
	}
	return e // 7. \s+: one whitespace character before non-space
}

// contraction returns the length of the contraction suffix ("s", "t",
// "re", "ve", "m", "ll", "d" in any case) at the start of s, or 0.
func contraction(s string) int {
	r1, w1 := utf8.DecodeRuneInString(s)
	var want rune
	switch {
	case foldEq(r1, 's'), foldEq(r1, 't'), foldEq(r1, 'm'), foldEq(r1, 'd'):
		return w1
	case foldEq(r1, 'r'), foldEq(r1, 'v'):
		want = 'e'
	case foldEq(r1, 'l'):
		want = 'l'
	default:
		return 0
	}
	r2, w2 := utf8.DecodeRuneInString(s[w1:])
	if foldEq(r2, want) {
		return w1 + w2
	}
	return 0
}

// foldEq reports whether r equals the lower-case ASCII letter c under
// Unicode simple case folding, as (?i) compares.
func foldEq(r, c rune) bool {
	if r == c || r == c-'a'+'A' {
		return true
	}
	if r < utf8.RuneSelf {
		return false
	}
	for f := unicode.SimpleFold(c); f != c; f = unicode.SimpleFold(f) {
		if f == r {
			return true
		}
	}
	return false
}

// pretokenize returns the pieces of s, for tests and tools; the encoder
// walks them with nextPiece instead.
func pretokenize(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		j := nextPiece(s, i)
		out = append(out, s[i:j])
		i = j
	}
	return out
}
