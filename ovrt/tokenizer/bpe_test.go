package tokenizer

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

// testByteChar is GPT-2's byte-to-character table, built here from its
// definition for the tests: the printable bytes stand for themselves, the
// others, in order, for U+0100 onwards.
func testByteChar(b byte) string {
	printable := func(c int) bool { return 33 <= c && c <= 126 || 161 <= c && c <= 172 || 174 <= c && c <= 255 }
	if printable(int(b)) {
		return string(rune(b))
	}
	n := 0
	for c := 0; c < int(b); c++ {
		if !printable(c) {
			n++
		}
	}
	return string(rune(0x100 + n))
}

// testSpell spells raw bytes in the byte-level alphabet.
func testSpell(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		b.WriteString(testByteChar(s[i]))
	}
	return b.String()
}

// testUnspell is the inverse of testSpell.
func testUnspell(s string) string {
	inv := map[rune]byte{}
	for b := range 256 {
		r, _ := utf8.DecodeRuneInString(testByteChar(byte(b)))
		inv[r] = byte(b)
	}
	var out []byte
	for _, r := range s {
		c, ok := inv[r]
		if !ok {
			panic("not a byte-level token: " + s)
		}
		out = append(out, c)
	}
	return string(out)
}

func TestByteTable(t *testing.T) {
	// Well-known spellings from GPT-2's and Llama 3's vocabularies.
	for _, c := range []struct{ raw, spelled string }{
		{" ", "Ġ"}, {"\n", "Ċ"}, {"\t", "ĉ"}, {"\x00", "Ā"}, {"\x7f", "ġ"}, {"\xad", "Ń"},
		{"A", "A"}, {"~", "~"}, {"é", "Ã©"}, {"😀", "ðŁĺĢ"}, {" world", "Ġworld"},
	} {
		if got := testSpell(c.raw); got != c.spelled {
			t.Errorf("testSpell(%q) = %q, want %q (test bug)", c.raw, got, c.spelled)
		}
		if got, ok := bytesOfToken(c.spelled); !ok || got != c.raw {
			t.Errorf("bytesOfToken(%q) = %q, %v, want %q", c.spelled, got, ok, c.raw)
		}
	}
	seen := map[rune]bool{}
	for b := range 256 {
		r := byteRune[b]
		if string(r) != testByteChar(byte(b)) || runeByte[r] != int16(b) || seen[r] {
			t.Errorf("byte 0x%02X: table %U, want %q", b, r, testByteChar(byte(b)))
		}
		seen[r] = true
	}
	for _, s := range []string{" ", "x y", "\uFFFD", "\u0144" /* one past the table */, "\xff"} {
		if _, ok := bytesOfToken(s); ok {
			t.Errorf("bytesOfToken(%q) accepted", s)
		}
	}
}

// bpeVocab is a byte-level BPE vocabulary in GGUF form.
type bpeVocab struct {
	tokens   []string
	merges   []string
	kinds    []Kind
	bos, eos int
}

func (v bpeVocab) build(t testing.TB) *Tokenizer {
	t.Helper()
	tok, err := NewBPE(v.tokens, v.merges, v.kinds, v.bos, v.eos, PreLlama3)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// id returns the id of a token given by its spelling.
func (v bpeVocab) id(t testing.TB, spelled string) int {
	t.Helper()
	i := slices.Index(v.tokens, spelled)
	if i < 0 {
		t.Fatalf("no token %q", spelled)
	}
	return i
}

// handMerges are the hand vocabulary's merges, best first; every merged
// token is added to the vocabulary in this order.
var handMerges = []string{
	"Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", // 0-4: " world"
	"l l", "e ll", "h ell", // 5-7: "hell"
	"a a", "aa aa", // 8-9
	"ð Ł", "ðŁ ĺ", "ðŁĺ Ģ", // 10-12: 😀 is F0 9F 98 80, spelled ðŁĺĢ
	"Ã ©", "c a", "f Ã©", "ca fÃ©", // 13-16: "café"; é is C3 A9, spelled Ã©
	"1 2", "12 3", // 17-18
	"Ċ Ċ",        // 19: "\n\n"
	"' t",        // 20
	"b c", "a b", // 21-22: "bc" outranks "ab"
	"x y", "y z", // 23-24
}

// handVocab: the 256 byte tokens in a scrambled order (id k is byte
// 167k+13 mod 256), the merged tokens, "Hello" (which no merge makes), and
// three control tokens.
func handVocab() bpeVocab {
	var v bpeVocab
	add := func(s string, k Kind) {
		v.tokens = append(v.tokens, s)
		v.kinds = append(v.kinds, k)
	}
	for k := range 256 {
		add(testByteChar(byte(k*167+13)), Normal)
	}
	for _, m := range handMerges {
		add(strings.Replace(m, " ", "", 1), Normal)
	}
	add("Hello", Normal)
	v.bos = len(v.tokens)
	add("<|begin_of_text|>", Control)
	v.eos = len(v.tokens)
	add("<|end_of_text|>", Control)
	add("<|eot_id|>", Control)
	v.merges = slices.Clone(handMerges)
	return v
}

// TestBPEHand checks encodings worked out by hand from handVocab.
func TestBPEHand(t *testing.T) {
	v := handVocab()
	tok := v.build(t)
	ref := newRefBPE(tok)
	for _, c := range []struct {
		text string
		want []string // token spellings
	}{
		{"", nil},
		// A piece that is a token is taken whole (Llama 3 ignores merges
		// then): "Hello" has no merge path, " world" has one.
		{"Hello world", []string{"Hello", "Ġworld"}},
		// " worlds" is no token: Ġ w o r l d s merge by rank: Ġw (0), or
		// (1), Ġwor (2), ld (3), Ġworld (4); no rule joins "s".
		{" worlds", []string{"Ġworld", "s"}},
		// h e l l o: ll (5), ell (6), hell (7); no "hell o".
		{"hello", []string{"hell", "o"}},
		// H is not h: only ll (5) and ell (6) apply.
		{"Hellos", []string{"H", "ell", "o", "s"}},
		// Ties between equal pairs go to the leftmost: a a a -> aa a.
		{"aaa", []string{"aa", "a"}},
		// a a a a a: aa (leftmost), then aa again at 2-3, then aaaa (9).
		{"aaaaa", []string{"aaaa", "a"}},
		{"aaaaaa", []string{"aaaa", "aa"}},
		// "bc" (21) outranks "ab" (22), so a b c -> a bc even though "ab"
		// is further left.
		{"abc", []string{"a", "bc"}},
		// "xy" (23) outranks "yz" (24).
		{"xyz", []string{"xy", "z"}},
		// The emoji is one "other" piece, a token: whole. Two of them are
		// one piece of eight bytes: merges 10, 11, 12 twice.
		{"😀", []string{"ðŁĺĢ"}},
		{"😀😀", []string{"ðŁĺĢ", "ðŁĺĢ"}},
		// 😁 is F0 9F 98 81: the last byte, ģ, merges with nothing.
		{"😁", []string{"ðŁĺ", "ģ"}},
		// é is Ã©; c a f Ã © s: Ã© (13), ca (14), fÃ© (15), cafÃ© (16).
		{"cafés", []string{"cafÃ©", "s"}},
		{"café", []string{"cafÃ©"}},
		// " café" is one piece (a space before letters), not a token, so
		// it merges; no rule joins Ġ and c.
		{" café", []string{"Ġ", "cafÃ©"}},
		// Numbers go by three: "123" is a token, "45" merges nothing.
		{"12345", []string{"123", "4", "5"}},
		// "don't" -> "don" "'t"; "'t" is a token.
		{"don't", []string{"d", "o", "n", "'t"}},
		{"a\n\nb", []string{"a", "ĊĊ", "b"}},
		// Control text is plain text: pieces "<|", "eot", "_id", "|>".
		{"<|eot_id|>", []string{"<", "|", "e", "o", "t", "_", "i", "d", "|", ">"}},
		// Invalid UTF-8 is encoded byte for byte.
		{"a\xff", []string{"a", "ÿ"}},
	} {
		var want []int
		for _, s := range c.want {
			want = append(want, v.id(t, s))
		}
		got := tok.Encode(c.text, false)
		if !slices.Equal(got, want) {
			t.Errorf("Encode(%q) = %v, want %v (%q)", c.text, got, want, c.want)
		}
		if r := ref.encode(c.text, false); !slices.Equal(r, got) {
			t.Errorf("Encode(%q) = %v, reference %v", c.text, got, r)
		}
		withBOS := tok.Encode(c.text, true)
		if withBOS[0] != v.bos || !slices.Equal(withBOS[1:], got) {
			t.Errorf("Encode(%q, true) = %v", c.text, withBOS)
		}
		if utf8.ValidString(c.text) {
			if dec := tok.Decode(withBOS); dec != c.text {
				t.Errorf("Decode(Encode(%q, true)) = %q", c.text, dec)
			}
		}
	}
}

func TestBPEDecode(t *testing.T) {
	v := handVocab()
	tok := v.build(t)
	id := func(s string) int { return v.id(t, s) }
	for _, c := range []struct {
		name string
		ids  []int
		want string
	}{
		// No dummy prefix: nothing is dropped after BOS.
		{"space after BOS", []int{v.bos, id("Ġworld")}, " world"},
		{"controls", []int{v.bos, id("Hello"), v.eos, id("<|eot_id|>")}, "Hello"},
		{"newlines", []int{id("a"), id("ĊĊ")}, "a\n\n"},
		{"split emoji", []int{id("ðŁĺ"), id("Ģ")}, "😀"},
		{"cut emoji", []int{id("ðŁĺ"), id("a")}, "\uFFFDa"},
		{"cut at end", []int{id("Hello"), id("ðŁ")}, "Hello\uFFFD"},
		{"lone continuation", []int{id("©")}, "\uFFFD"},
		{"out of range", []int{-1, len(v.tokens)}, "\uFFFD\uFFFD"},
	} {
		if got := tok.Decode(c.ids); got != c.want {
			t.Errorf("%s: Decode(%v) = %q, want %q", c.name, c.ids, got, c.want)
		}
		if got := refBPEDecode(v, c.ids); got != c.want {
			t.Errorf("%s: reference decode %q, want %q (test bug)", c.name, got, c.want)
		}
	}
	// The streaming decoder holds back the partial character.
	d := tok.NewDecoder()
	for i, s := range []struct {
		id   int
		want string
	}{{v.bos, ""}, {id("Ġ"), " "}, {id("ðŁ"), ""}, {id("ĺ"), ""}, {id("Ģ"), "😀"}, {id("Ã"), ""}, {id("©"), "é"}, {id("ð"), ""}} {
		if got := d.Next(s.id); got != s.want {
			t.Fatalf("step %d: Next = %q, want %q", i, got, s.want)
		}
	}
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q", got)
	}
}

// refBPE is an independent, quadratic implementation of byte-level BPE
// encoding, built from the public vocabulary: the reference
// pre-tokenizer, the test's byte table, string symbols and a scan for the
// best merge.
type refBPE struct {
	ids  map[string]int // Normal token spelling -> lowest id
	rank map[string]int // "left right" -> first rank
	bos  int
}

func newRefBPE(tok *Tokenizer) *refBPE {
	pieces, _, kinds := tok.Vocab()
	r := &refBPE{ids: map[string]int{}, rank: map[string]int{}, bos: tok.BOS()}
	for i, p := range pieces {
		if _, dup := r.ids[string(p)]; kinds[i] == Normal && i != tok.BOS() && i != tok.EOS() && !dup {
			r.ids[string(p)] = i
		}
	}
	for i, m := range tok.Merges() {
		if _, dup := r.rank[m]; !dup {
			r.rank[m] = i
		}
	}
	return r
}

func (r *refBPE) encode(text string, bos bool) []int {
	ids := []int{}
	if bos {
		ids = append(ids, r.bos)
	}
	for _, piece := range refPretokenize(text) {
		spelled := testSpell(piece)
		if id, ok := r.ids[spelled]; ok {
			ids = append(ids, id)
			continue
		}
		var syms []string
		for _, c := range spelled {
			syms = append(syms, string(c))
		}
		for {
			best, bestRank := -1, 0
			for i := 0; i+1 < len(syms); i++ {
				if rk, ok := r.rank[syms[i]+" "+syms[i+1]]; ok && (best < 0 || rk < bestRank) {
					best, bestRank = i, rk
				}
			}
			if best < 0 {
				break
			}
			syms[best] += syms[best+1]
			syms = slices.Delete(syms, best+1, best+2)
		}
		for _, s := range syms {
			id, ok := r.ids[s]
			if !ok {
				panic("reference: no token " + s)
			}
			ids = append(ids, id)
		}
	}
	return ids
}

// refBPEDecode concatenates the bytes of the tokens (nothing for control
// tokens, U+FFFD for unknown ids) and replaces ill-formed UTF-8.
func refBPEDecode(v bpeVocab, ids []int) string {
	var buf []byte
	for _, id := range ids {
		switch {
		case id < 0 || id >= len(v.tokens):
			buf = append(buf, "\uFFFD"...)
		case v.kinds[id] == Normal && id != v.bos && id != v.eos:
			buf = append(buf, testUnspell(v.tokens[id])...)
		}
	}
	return sanitize(buf)
}

// trainedCorpus is text with English, accents, CJK, emoji, numbers,
// contractions and runs of spaces and newlines, for trainBPE.
func trainedCorpus() string {
	return storyText(6000) + strings.Repeat("Le café naïve — 日本語のテキスト 😀🦙 Ωmega 1234567 don't I'M we'll\n\n\t  tabs   spaces\r\n", 20)
}

// trainBPE learns nMerges merges from corpus the usual way: pieces of the
// reference pre-tokenizer, spelled in the byte alphabet, repeatedly join
// their most frequent adjacent pair (ties to the smallest pair). Tokens
// are the 256 byte characters, the merged tokens, and the control tokens
// BOS, EOS and <|eot_id|>.
func trainBPE(corpus string, nMerges int) bpeVocab {
	counts := map[string]int{}
	for _, p := range refPretokenize(corpus) {
		counts[testSpell(p)]++
	}
	type word struct {
		syms []string
		n    int
	}
	var words []word
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		var syms []string
		for _, c := range k {
			syms = append(syms, string(c))
		}
		words = append(words, word{syms, counts[k]})
	}
	var v bpeVocab
	seen := map[string]bool{}
	add := func(s string, k Kind) {
		if !seen[s] {
			seen[s] = true
			v.tokens = append(v.tokens, s)
			v.kinds = append(v.kinds, k)
		}
	}
	for b := range 256 {
		add(testByteChar(byte(b)), Normal)
	}
	for len(v.merges) < nMerges {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.n
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || n == bestN && p[0]+" "+p[1] < best[0]+" "+best[1] {
				best, bestN = p, n
			}
		}
		if bestN == 0 {
			break
		}
		v.merges = append(v.merges, best[0]+" "+best[1])
		add(best[0]+best[1], Normal)
		for wi := range words {
			s := words[wi].syms
			var out []string
			for i := 0; i < len(s); i++ {
				if i+1 < len(s) && s[i] == best[0] && s[i+1] == best[1] {
					out = append(out, s[i]+s[i+1])
					i++
				} else {
					out = append(out, s[i])
				}
			}
			words[wi].syms = out
		}
	}
	v.bos = len(v.tokens)
	add("<|begin_of_text|>", Control)
	v.eos = len(v.tokens)
	add("<|end_of_text|>", Control)
	add("<|eot_id|>", Control)
	return v
}

var (
	trainedOnce sync.Once
	trainedV    bpeVocab
)

// trainedVocab is trainBPE's vocabulary with 600 merges, built once.
func trainedVocab() bpeVocab {
	trainedOnce.Do(func() { trainedV = trainBPE(trainedCorpus(), 600) })
	return trainedV
}

func bpeTokenizers(t testing.TB) map[string]*Tokenizer {
	return map[string]*Tokenizer{"hand": handVocab().build(t), "trained": trainedVocab().build(t)}
}

// TestBPEMatchesReference compares the heap encoder with the quadratic
// reference on random text and checks the round trip.
func TestBPEMatchesReference(t *testing.T) {
	for name, tok := range bpeTokenizers(t) {
		t.Run(name, func(t *testing.T) {
			ref := newRefBPE(tok)
			r := rand.New(rand.NewPCG(21, 22))
			for i := 0; i < 800; i++ {
				var s string
				switch i % 4 {
				case 0:
					s = randomText(r, r.IntN(300))
				case 1:
					s = randomPretokText(r, r.IntN(60))
				case 2:
					s = storyText(1 + r.IntN(500))
				default:
					s = randomUnicode(r, r.IntN(50))
				}
				bos := i%2 == 0
				got := tok.Encode(s, bos)
				if want := ref.encode(s, bos); !slices.Equal(got, want) {
					t.Fatalf("Encode(%q) = %v, reference %v", s, got, want)
				}
				checkBPEIDs(t, tok, s, got)
			}
		})
	}
}

// randomUnicode returns n random valid characters from all of Unicode.
func randomUnicode(r *rand.Rand, n int) string {
	var b strings.Builder
	for b.Len() < 4*n {
		var c rune
		switch r.IntN(3) {
		case 0:
			c = rune(r.IntN(0x80))
		case 1:
			c = rune(r.IntN(0x3000))
		default:
			c = rune(r.IntN(0x110000))
		}
		if utf8.ValidRune(c) {
			b.WriteRune(c)
		}
	}
	return b.String()
}

// checkBPEIDs checks what must hold for any text: ids in range and never
// control tokens (after a leading BOS), decoding (whole and streamed) gives
// the text back with ill-formed UTF-8 replaced, so valid text exactly.
func checkBPEIDs(t testing.TB, tok *Tokenizer, s string, ids []int) {
	t.Helper()
	for i, id := range ids {
		if tok.CheckID(id) != nil || (tok.Kind(id) != Normal && !(i == 0 && id == tok.BOS())) {
			t.Fatalf("Encode(%q) = %v: id %d at %d", s, ids, id, i)
		}
	}
	want := sanitize([]byte(s))
	if got := tok.Decode(ids); got != want {
		t.Fatalf("Decode(Encode(%q)) = %q, want %q", s, got, want)
	}
	if utf8.ValidString(s) && want != s {
		t.Fatalf("sanitize changed valid %q (test bug)", s)
	}
	d := tok.NewDecoder()
	var b strings.Builder
	for _, id := range ids {
		out := d.Next(id)
		if !utf8.ValidString(out) {
			t.Fatalf("Next emitted invalid UTF-8 %q", out)
		}
		b.WriteString(out)
	}
	b.WriteString(d.Flush())
	if b.String() != want {
		t.Fatalf("streamed %q, want %q", b.String(), want)
	}
}

// TestBPEStreamingSplits decodes text whose tokens are replaced at random
// by their single-byte tokens, so characters split across tokens anywhere.
func TestBPEStreamingSplits(t *testing.T) {
	v := trainedVocab()
	tok := v.build(t)
	r := rand.New(rand.NewPCG(23, 24))
	for range 300 {
		s := randomText(r, r.IntN(80))
		var ids []int
		for _, id := range tok.Encode(s, true) {
			if r.IntN(2) == 0 && tok.Kind(id) == Normal {
				for _, c := range []byte(testUnspell(tok.Piece(id))) {
					ids = append(ids, v.id(t, testByteChar(c)))
				}
			} else {
				ids = append(ids, id)
			}
		}
		d := tok.NewDecoder()
		var out strings.Builder
		for i, id := range ids {
			out.WriteString(d.Next(id))
			// Only an incomplete character is ever held back.
			if len(d.pending) > 3 || len(d.pending) > 0 && partialLen(d.pending) != len(d.pending) {
				t.Fatalf("after %d tokens the decoder holds %x", i+1, d.pending)
			}
		}
		out.WriteString(d.Flush())
		if out.String() != s || tok.Decode(ids) != s {
			t.Fatalf("streamed %q, Decode %q, want %q", out.String(), tok.Decode(ids), s)
		}
	}
}

func TestBPEAccessors(t *testing.T) {
	v := handVocab()
	tok := v.build(t)
	if tok.Model() != "gpt2" || tok.Pre() != "llama-bpe" || !slices.Equal(tok.Merges(), handMerges) {
		t.Errorf("Model %q, Pre %q, Merges %q", tok.Model(), tok.Pre(), tok.Merges())
	}
	if tok.VocabSize() != len(v.tokens) || tok.BOS() != v.bos || tok.EOS() != v.eos || tok.Unk() != -1 {
		t.Errorf("size %d bos %d eos %d unk %d", tok.VocabSize(), tok.BOS(), tok.EOS(), tok.Unk())
	}
	if tok.Piece(v.bos) != "<|begin_of_text|>" || tok.Kind(v.bos) != Control || tok.Piece(v.id(t, "Ġworld")) != "Ġworld" || tok.Score(300) != 0 {
		t.Error("Piece, Kind or Score")
	}
	pieces, scores, kinds := tok.Vocab()
	for i := range pieces {
		if string(pieces[i]) != v.tokens[i] || scores[i] != 0 || kinds[i] != v.kinds[i] {
			t.Fatalf("Vocab entry %d: %q %v %v", i, pieces[i], scores[i], kinds[i])
		}
	}
	// Copies, not the tokenizer's own slices.
	m := tok.Merges()
	m[0] = "x"
	pieces[0][0] = 'X'
	if tok.Merges()[0] != handMerges[0] || tok.Piece(0) != v.tokens[0] {
		t.Error("Merges or Vocab shares memory with the tokenizer")
	}
	// Rebuilding from the accessors gives the same tokenizer.
	var tokens []string
	for _, p := range pieces {
		tokens = append(tokens, string(p))
	}
	tokens[0] = v.tokens[0]
	back, err := NewBPE(tokens, tok.Merges(), kinds, tok.BOS(), tok.EOS(), tok.Pre())
	if err != nil {
		t.Fatal(err)
	}
	assertSame(t, "NewBPE(accessors)", back, tok)
	if !reflect.DeepEqual(back.bpe, tok.bpe) {
		t.Error("rebuilt BPE model differs")
	}
	// A SentencePiece tokenizer reports its model too.
	sp := synthTokenizer(t)
	if sp.Model() != "llama" || sp.Pre() != "" || sp.Merges() != nil {
		t.Errorf("SentencePiece: Model %q, Pre %q, Merges %q", sp.Model(), sp.Pre(), sp.Merges())
	}
	// An empty pre-tokenizer name (files before tokenizer.ggml.pre) is
	// Llama 3's and is kept as given.
	old, err := NewBPE(v.tokens, v.merges, v.kinds, v.bos, v.eos, "")
	if err != nil || old.Pre() != "" || !slices.Equal(old.Encode("Hello worlds", false), tok.Encode("Hello worlds", false)) {
		t.Errorf("empty pre: %v", err)
	}
}

func TestNewBPEErrors(t *testing.T) {
	base := handVocab()
	clone := func() bpeVocab {
		return bpeVocab{slices.Clone(base.tokens), slices.Clone(base.merges), slices.Clone(base.kinds), base.bos, base.eos}
	}
	n := len(base.tokens)
	for _, c := range []struct {
		name string
		edit func(v *bpeVocab)
		pre  string
		err  error
		msg  string
	}{
		{"pre", nil, "qwen2", ErrUnsupported, `pre-tokenizer "qwen2"`},
		{"empty", func(v *bpeVocab) { *v = bpeVocab{} }, "", ErrVocab, "empty vocabulary"},
		{"kinds", func(v *bpeVocab) { v.kinds = v.kinds[:5] }, "", ErrVocab, "5 kinds"},
		{"bos", func(v *bpeVocab) { v.bos = -1 }, "", ErrVocab, "BOS id -1 outside the vocabulary"},
		{"eos", func(v *bpeVocab) { v.eos = n }, "", ErrVocab, "EOS id"},
		{"alphabet", func(v *bpeVocab) { v.tokens[260] = "hello world" }, "", ErrVocab, `token 260 ("hello world") is not spelled in the byte-level alphabet`},
		{"byte kind", func(v *bpeVocab) { v.kinds[7] = Byte }, "", ErrVocab, "token 7"},
		{"user-defined", func(v *bpeVocab) { v.kinds[270] = 4 }, "", ErrVocab, "kind 4"},
		{"missing byte", func(v *bpeVocab) { v.tokens[0] = "<|x|>"; v.kinds[0] = Control }, "", ErrVocab, "no token for byte 0x0D"},
		{"merge format", func(v *bpeVocab) { v.merges[3] = "ld" }, "", ErrVocab, `merge 3 ("ld") is not two tokens`},
		{"merge spaces", func(v *bpeVocab) { v.merges[3] = "l d x" }, "", ErrVocab, "merge 3"},
		{"merge part", func(v *bpeVocab) { v.merges[3] = "l dd" }, "", ErrVocab, `merge 3 ("l dd"): "dd" is not a normal token`},
		{"merge result", func(v *bpeVocab) { v.merges[3] = "l q" }, "", ErrVocab, `"lq" is not a normal token`},
		{"merge control", func(v *bpeVocab) { v.merges[3] = "<|eot_id|> a" }, "", ErrVocab, "<|eot_id|>"},
	} {
		v := clone()
		if c.edit != nil {
			c.edit(&v)
		}
		pre := PreLlama3
		if c.pre != "" {
			pre = c.pre
		}
		_, err := NewBPE(v.tokens, v.merges, v.kinds, v.bos, v.eos, pre)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("%s: err = %v, want %v containing %q", c.name, err, c.err, c.msg)
		}
	}
	// An Unknown token is allowed; it decodes to U+FFFD and is never
	// produced.
	v := clone()
	v.tokens = append(v.tokens, "<unk>")
	v.kinds = append(v.kinds, Unknown)
	tok := v.build(t)
	if got := tok.Decode([]int{n, tok.Encode("a", false)[0]}); got != "\uFFFDa" {
		t.Errorf("unknown token decodes to %q", got)
	}
	// A duplicate merge keeps its first rank; duplicate tokens use the
	// lower id.
	v = clone()
	v.merges = append(v.merges, "a b", "b c")
	v.tokens = append(v.tokens, "Hello")
	v.kinds = append(v.kinds, Normal)
	tok = v.build(t)
	if got, want := tok.Encode("abc\nHello", false), []int{base.id(t, "a"), base.id(t, "bc"), base.id(t, "Ċ"), base.id(t, "Hello")}; !slices.Equal(got, want) {
		t.Errorf("duplicates: Encode = %v, want %v", got, want)
	}
}

func FuzzBPE(f *testing.F) {
	for _, s := range []string{"", "Hello world", "  x\n\n\ty", "😀😁 café 日本語", "don't I'M", "12345", "<|eot_id|>", "a\xffb\xe6\x97", "aaaaaaa"} {
		f.Add(s)
	}
	toks := bpeTokenizers(f)
	refs := map[*Tokenizer]*refBPE{}
	for _, tok := range toks {
		refs[tok] = newRefBPE(tok)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, tok := range toks {
			ids := tok.Encode(s, true)
			checkBPEIDs(t, tok, s, ids)
			if len(s) <= 512 && !slices.Equal(ids, refs[tok].encode(s, true)) {
				t.Fatalf("Encode(%q) differs from the reference", s)
			}
		}
	})
}
