package tokenizer

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

// whiteSpace is Unicode's White_Space property (PropList.txt), written out
// by hand: the \s of Oniguruma, which Hugging Face's tokenizers run Llama
// 3's expression with. Go's regexp \s is ASCII only, so the reference
// below spells the class with these ranges.
var whiteSpace = [][2]rune{
	{0x09, 0x0D}, {0x20, 0x20}, {0x85, 0x85}, {0xA0, 0xA0}, {0x1680, 0x1680},
	{0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
}

// wsClass is whiteSpace as the inside of a regexp character class.
var wsClass = func() string {
	var b strings.Builder
	for _, r := range whiteSpace {
		fmt.Fprintf(&b, `\x{%X}-\x{%X}`, r[0], r[1])
	}
	return b.String()
}()

// The reference pre-tokenizer: Llama 3's expression run by Go's regexp,
// whose leftmost-first matching picks what a backtracking engine picks,
// with the one alternative Go cannot express, \s+(?!\S), done by brute
// force: every length of the whitespace run, longest first, is tried
// against the lookahead.
var (
	refAlts1to5 = regexp.MustCompile(`^(?:(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^` +
		wsClass + `\p{L}\p{N}]+[\r\n]*|[` + wsClass + `]*[\r\n]+)`)
	refSpaceRun = regexp.MustCompile(`^[` + wsClass + `]+`)
	refIsSpace  = regexp.MustCompile(`^[` + wsClass + `]`)
)

// refMatch returns the length of the match at the start of s (non-empty).
func refMatch(s string) int {
	if loc := refAlts1to5.FindStringIndex(s); loc != nil {
		return loc[1] // alternatives 1-5; none matches the empty string
	}
	loc := refSpaceRun.FindStringIndex(s)
	if loc == nil {
		panic(fmt.Sprintf("no alternative matches %q", s))
	}
	var ends []int // the byte offset after each character of the run
	for i, r := range s[:loc[1]] {
		ends = append(ends, i+utf8.RuneLen(r))
	}
	for k := len(ends) - 1; k >= 0; k-- { // \s+ is greedy: longest first
		if e := ends[k]; e == len(s) || refIsSpace.MatchString(s[e:]) { // (?!\S)
			return e
		}
	}
	return loc[1] // \s+
}

func refPretokenize(s string) []string {
	var out []string
	for len(s) > 0 {
		n := refMatch(s)
		out = append(out, s[:n])
		s = s[n:]
	}
	return out
}

// TestWhiteSpaceClass checks that unicode.IsSpace, which the scanner uses
// for \s, is exactly the White_Space set written out above.
func TestWhiteSpaceClass(t *testing.T) {
	in := func(r rune) bool {
		for _, w := range whiteSpace {
			if w[0] <= r && r <= w[1] {
				return true
			}
		}
		return false
	}
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if in(r) != unicode.IsSpace(r) {
			t.Errorf("U+%04X: White_Space %v, unicode.IsSpace %v", r, in(r), unicode.IsSpace(r))
		}
	}
}

// TestPretokenizeExamples checks hand-worked cases; the comment on each
// gives the alternatives that produce its pieces (numbered as in
// pretokenize.go: 1 contractions, 2 letters with one optional leading
// character, 3 numbers, 4 other characters, 5 whitespace to the last
// newline, 6 whitespace but the last character, 7 whitespace).
func TestPretokenizeExamples(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		// 2 takes "Hello"; at the space, 2 takes the space as its
		// optional character and then "world".
		{"Hello world", []string{"Hello", " world"}},
		// At the first space, 2 fails (the next character is a space, no
		// letter), 3 and 4 fail, 5 finds no newline, 6 takes the run "  "
		// but gives back its last space, which must precede non-space.
		// Then 2 takes " x".
		{"  x", []string{" ", " x"}},
		// 3 takes at most three numbers.
		{"12345", []string{"123", "45"}},
		{"1234567", []string{"123", "456", "7"}},
		// 2 stops at the apostrophe (not a letter); there 1 matches "'t".
		{"don't", []string{"don", "'t"}},
		// 5: \s* takes "\n\n", gives back one for [\r\n]+, which then
		// takes it again: the whole run.
		{"a\n\nb", []string{"a", "\n\n", "b"}},
		// 5 ends at the last newline of the run " \n\n  "; the two spaces
		// left are 6 (" ") and 2 (" b").
		{"a \n\n  b", []string{"a", " \n\n", " ", " b"}},
		// 6 at the end of the text: the lookahead holds at the end, so
		// nothing is given back.
		{"x   ", []string{"x", "   "}},
		{"Hello  world", []string{"Hello", " ", " world"}},
		// Contractions are case-insensitive, and 1 comes before 2.
		{"I'M", []string{"I", "'M"}},
		{"we'll've", []string{"we", "'ll", "'ve"}},
		{"'tis", []string{"'t", "is"}},
		{"it's.", []string{"it", "'s", "."}},
		{"y'RE", []string{"y", "'RE"}},
		// No contraction ("'r" needs an e): 2 takes the apostrophe as
		// its optional character.
		{"'rx", []string{"'rx"}},
		{"o'clock", []string{"o", "'clock"}},
		// A curly apostrophe is no contraction either.
		{"don’t", []string{"don", "’t"}},
		// U+017F (long s) folds to s, so (?i) matches it.
		{"'ſx", []string{"'ſ", "x"}},
		// 4: punctuation takes a leading space and trailing newlines.
		{"Hi!!\n\nx", []string{"Hi", "!!\n\n", "x"}},
		{"a ...", []string{"a", " ..."}},
		{"$1", []string{"$", "1"}},
		// 2's optional character may be a tab or punctuation, never a
		// newline or a number.
		{"\tword", []string{"\tword"}},
		{"(hi)", []string{"(hi", ")"}},
		{"\nword", []string{"\n", "word"}},
		{"1word", []string{"1", "word"}},
		// 4's optional leading character is only an ASCII space, so a tab
		// before "!" is 7 on its own.
		{"\t!", []string{"\t", "!"}},
		{"a\n!", []string{"a", "\n", "!"}},
		{"x \n y", []string{"x", " \n", " y"}},
		{"\r\n\r\n", []string{"\r\n\r\n"}},
		// Unicode classes: letters (é, 日本語), numbers (½ is No, Ⅻ Nl,
		// ٣ Nd), whitespace (NBSP is White_Space), a combining accent
		// (Mn) is no letter.
		{"café 日本語", []string{"café", " 日本語"}},
		{"½Ⅻ٣4", []string{"½Ⅻ٣", "4"}},
		{"a\u00a0b", []string{"a", "\u00a0b"}},
		{"e\u0301x", []string{"e", "\u0301x"}},
		{"😀 😀!", []string{"😀", " 😀!"}},
		// Invalid UTF-8 is one "other" character per byte.
		{"a\xffb", []string{"a", "\xffb"}},
		{"\xff\xfe ", []string{"\xff\xfe", " "}},
	} {
		if got := pretokenize(c.in); !slices.Equal(got, c.want) {
			t.Errorf("pretokenize(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := refPretokenize(c.in); !slices.Equal(got, c.want) {
			t.Errorf("reference(%q) = %q, want %q (test bug)", c.in, got, c.want)
		}
	}
}

// pretokAlphabet is weighted towards what the alternatives care about:
// apostrophes and contraction letters in both cases, every kind of space
// and newline, letters, numbers and symbols from beyond ASCII.
var pretokAlphabet = []string{
	"'", "'", "'", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D", "ſ", "K",
	"a", "z", "Q", "é", "ß", "日", "Ω", "ǅ", "ー",
	"0", "7", "9", "½", "٣", "Ⅻ", "²",
	" ", " ", " ", " ", "\t", "\r", "\n", "\n", "\v", "\f", "\u00a0", "\u0085", "\u2028", "\u3000", "\u200b",
	"!", ".", ",", "-", "_", "(", "’", "😀", "\u0301", "\x00", "\x1c", "\uFFFD",
	"\xff", "\xe6\x97", "\xc3",
}

func randomPretokText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(pretokAlphabet[r.IntN(len(pretokAlphabet))])
	}
	return b.String()
}

func TestPretokenizeMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for i := 0; i < 5000; i++ {
		s := randomPretokText(r, r.IntN(40))
		checkPretokenize(t, s)
	}
	// Longer runs of a few characters, where runs of spaces, numbers and
	// newlines get long.
	for i := 0; i < 500; i++ {
		alpha := []string{" ", "\n", "a", "1", "!", "'", "s", "\t"}[:2+r.IntN(7)]
		var b strings.Builder
		for range r.IntN(200) {
			b.WriteString(alpha[r.IntN(len(alpha))])
		}
		checkPretokenize(t, b.String())
	}
}

func checkPretokenize(t testing.TB, s string) {
	t.Helper()
	got := pretokenize(s)
	if want := refPretokenize(s); !slices.Equal(got, want) {
		t.Fatalf("pretokenize(%q) = %q, reference %q", s, got, want)
	}
	if strings.Join(got, "") != s {
		t.Fatalf("pieces of %q do not concatenate to it: %q", s, got)
	}
	for _, p := range got {
		if p == "" {
			t.Fatalf("pretokenize(%q) has an empty piece: %q", s, got)
		}
	}
}

func FuzzPretokenize(f *testing.F) {
	for _, s := range []string{"", "Hello world", "  x", "12345", "don't", "a\n\nb", "I'M we'll", "x \n y  ", "'ſx", "\xff\t!", "😀 ½"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkPretokenize(t, s)
	})
}
