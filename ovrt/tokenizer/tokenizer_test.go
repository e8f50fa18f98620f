package tokenizer

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pipeshard/pipeshard/internal/testmodel"
)

func TestOracleEncodings(t *testing.T) {
	tok := realTokenizer(t)
	ref, _ := testmodel.LoadRef(t, "stories15M")
	if len(ref.Encodings) == 0 {
		t.Fatal("oracle has no encodings")
	}
	for name, want := range ref.Encodings {
		t.Run(name, func(t *testing.T) {
			text := ""
			if want.Text != nil {
				text = *want.Text
			}
			got := tok.Encode(text, true)
			if !slices.Equal(got, want.IDs) {
				t.Fatalf("Encode(%q) = %v, want %v", text, got, want.IDs)
			}
			if want.Pieces != nil {
				var pieces []string
				for _, id := range got[1:] {
					pieces = append(pieces, tok.Piece(id))
				}
				if !slices.Equal(pieces, want.Pieces) {
					t.Errorf("pieces %q, want %q", pieces, want.Pieces)
				}
			}
			if dec := tok.Decode(got); dec != text {
				t.Errorf("Decode = %q, want %q", dec, text)
			}
		})
	}
}

func TestRealVocabulary(t *testing.T) {
	tok := realTokenizer(t)
	if tok.VocabSize() != 32000 || tok.BOS() != 1 || tok.EOS() != 2 || tok.Unk() != 0 {
		t.Fatalf("size %d bos %d eos %d unk %d", tok.VocabSize(), tok.BOS(), tok.EOS(), tok.Unk())
	}
	pieces, scores, kinds := tok.Vocab()
	counts := map[Kind]int{}
	for _, k := range kinds {
		counts[k]++
	}
	want := map[Kind]int{Unknown: 1, Control: 2, Byte: 256, Normal: 32000 - 259}
	if !reflect.DeepEqual(counts, want) {
		t.Errorf("kind counts %v, want %v", counts, want)
	}
	for i, p := range []string{"<unk>", "<s>", "</s>"} {
		if string(pieces[i]) != p {
			t.Errorf("piece %d = %q, want %q", i, pieces[i], p)
		}
	}
	seen := map[string]int{}
	for i, p := range pieces {
		if j, dup := seen[string(p)]; dup {
			t.Errorf("pieces %d and %d are both %q: llama.cpp would refuse them", j, i, p)
		}
		seen[string(p)] = i
		if i >= 3 && i < 259 {
			b := byte(i - 3)
			if kinds[i] != Byte || string(p) != byteToken(b) {
				t.Errorf("token %d = %q (%v), want byte token %s", i, p, kinds[i], byteToken(b))
			}
			// A byte token decodes to its raw byte, whatever the file stored.
			if got := tok.Decode([]int{i}); b < 0x80 && got != string([]byte{b}) {
				t.Errorf("Decode(%d) = %q", i, got)
			}
		}
		if i >= 259 && (kinds[i] != Normal || strings.Contains(string(p), " ")) {
			t.Errorf("token %d = %q (%v), want a Normal piece spelled with ▁", i, p, kinds[i])
		}
	}
	// The file's 204 strings stored twice (byte token and Normal piece)
	// must both survive, and text must use the Normal piece.
	stored := map[string]int{} // Normal pieces by their text
	for i := 259; i < len(pieces); i++ {
		stored[strings.ReplaceAll(string(pieces[i]), "▁", " ")] = i
	}
	dups := 0
	for b := range 256 {
		if _, ok := stored[string(rune(b))]; ok {
			dups++
		}
	}
	if dups != 204 {
		t.Errorf("%d byte tokens have a Normal twin, want 204", dups)
	}
	for _, c := range []string{"!", "ü"} {
		ids := tok.Encode("Hi"+c, false)
		if last := ids[len(ids)-1]; last != stored[c] {
			t.Errorf("Encode(%q) = %v, want it to end with Normal piece %d", "Hi"+c, ids, stored[c])
		}
	}
	if scores[259] != -1e9 || scores[260] != -1 {
		t.Errorf("scores[259:261] = %v", scores[259:261])
	}
}

// TestRealKnown checks encodings derivable from the vocabulary and the
// rules (and agreeing with Llama 2's published behaviour).
func TestRealKnown(t *testing.T) {
	tok := realTokenizer(t)
	for _, c := range []struct {
		text string
		bos  bool
		want []int
	}{
		{"", false, []int{}},
		{"", true, []int{1}},
		{"Hello world", true, []int{1, 15043, 3186}},
		{"😀", false, []int{29871, 3 + 0xF0, 3 + 0x9F, 3 + 0x98, 3 + 0x80}}, // not in the vocabulary: bytes
		{"\n", false, []int{29871, 3 + '\n'}},
		{"a\nb", false, []int{263, 3 + '\n', 29890}},
		{" ", false, []int{259}},                 // "▁▁"
		{"<s>", false, []int{529, 29879, 29958}}, // control text is plain text
		{"\xff", false, []int{29871, 3 + 0xff}},  // invalid UTF-8: its byte
	} {
		got := tok.Encode(c.text, c.bos)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q, %v) = %v, want %v", c.text, c.bos, got, c.want)
		}
	}
}

func TestSynthEncode(t *testing.T) {
	tok := synthTokenizer(t)
	id := func(p string) int {
		for i := range tok.VocabSize() {
			if tok.Piece(i) == p && tok.Kind(i) != Byte {
				return i
			}
		}
		t.Fatalf("no piece %q", p)
		return -1
	}
	b := func(c byte) int { return 3 + int(c) }
	for _, c := range []struct {
		text string
		want []int
	}{
		{"the cat", []int{id("▁the"), id("▁cat")}},
		{"and", []int{id("▁and")}},
		{"abc", []int{id("▁a"), id("bc")}},                         // "▁a" outranks the tied "ab"/"bc"
		{"xabc", []int{id("▁"), id("x"), id("ab"), id("c")}},       // tie: leftmost wins
		{"xbcab", []int{id("▁"), id("x"), id("bc"), id("ab")}},     // both merge
		{"é", []int{id("▁é")}},                                     // multi-byte piece
		{"日本", []int{id("▁"), id("日"), b(0xE6), b(0x9C), b(0xAC)}}, // 本 not in vocab
		{"<s>", []int{id("▁"), b('<'), id("s"), b('>')}},           // Normal "<s>" cannot form: "<" is no piece
		{"  ", []int{id("▁▁"), id("▁")}},
		{"A!", []int{id("▁"), b('A'), id("!")}},
		{"be x", []int{id("▁"), id("b"), id("e▁"), id("x")}}, // a merge across a word end
		{"be cat", []int{id("▁"), id("b"), id("e"), id("▁cat")}},
	} {
		got := tok.Encode(c.text, false)
		if !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
		if !slices.Equal(got, newNaive(tok).encode(c.text, false)) {
			t.Errorf("Encode(%q) differs from the naive encoder", c.text)
		}
		if dec := tok.Decode(append([]int{1}, got...)); dec != c.text {
			t.Errorf("Decode(Encode(%q)) = %q", c.text, dec)
		}
	}
}

// TestEncodeMatchesNaive compares the heap encoder with the quadratic
// reference on random text.
func TestEncodeMatchesNaive(t *testing.T) {
	for _, nt := range testTokenizers(t) {
		tok := nt.Tokenizer
		t.Run(nt.name, func(t *testing.T) {
			naive := newNaive(tok)
			r := rand.New(rand.NewPCG(1, 2))
			for i := 0; i < 300; i++ {
				s := randomText(r, r.IntN(300))
				if i%50 == 0 {
					s = storyText(2000 + i)
				}
				bos := i%2 == 0
				got, want := tok.Encode(s, bos), naive.encode(s, bos)
				if !slices.Equal(got, want) {
					t.Fatalf("Encode(%q) = %v, naive %v", s, got, want)
				}
				if bos {
					if dec := tok.Decode(got); dec != s {
						t.Fatalf("Decode(Encode(%q)) = %q", s, dec)
					}
				}
			}
		})
	}
}

func TestRoundTripRandom(t *testing.T) {
	for _, nt := range testTokenizers(t) {
		tok := nt.Tokenizer
		r := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 500; i++ {
			s := randomText(r, r.IntN(200))
			if got := tok.Decode(tok.Encode(s, true)); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q", s, got)
			}
			// Without BOS the dummy prefix stays.
			if got := tok.Decode(tok.Encode(s, false)); s != "" && got != " "+s {
				t.Fatalf("Decode(Encode(%q, false)) = %q", s, got)
			}
		}
	}
}

type namedTokenizer struct {
	name string
	*Tokenizer
}

// testTokenizers returns the synthetic tokenizer and, when the model files
// are present, the real one. A missing model skips only the "stories15M"
// probe subtest (and fails it under CI), not the caller.
func testTokenizers(t *testing.T) []namedTokenizer {
	toks := []namedTokenizer{{"synthetic", synthTokenizer(t)}}
	var real *Tokenizer
	t.Run("stories15M", func(t *testing.T) { real = realTokenizer(t) })
	if real != nil {
		toks = append(toks, namedTokenizer{"stories15M", real})
	}
	return toks
}

func TestDecodeRules(t *testing.T) {
	tok := synthTokenizer(t)
	the := tok.Encode("the", false)[0]
	cat := tok.Encode("cat", false)[0]
	b := func(c byte) int { return 3 + int(c) }
	for _, c := range []struct {
		name string
		ids  []int
		want string
	}{
		{"after BOS", []int{1, the, cat}, "the cat"},
		{"no BOS", []int{the, cat}, " the cat"},
		{"BOS mid-stream", []int{the, 1, cat}, " thecat"},
		{"control between", []int{1, 2, the}, "the"},
		{"byte space after BOS", []int{1, b(' '), b('x')}, "x"},
		{"only one space", []int{1, tok.Encode("  ", false)[0]}, " "},
		{"split character", []int{b(0xE6), b(0x97), b(0xA5)}, "日"},
		{"lone continuation", []int{b(0x80), the}, "\uFFFD the"},
		{"cut character", []int{b(0xE6), b(0x97), the}, "\uFFFD the"},
		{"cut at end", []int{the, b(0xF0), b(0x9F), b(0x98)}, " the\uFFFD"},
		{"surrogate", []int{b(0xED), b(0xA0), b(0x80)}, "\uFFFD\uFFFD\uFFFD"},
		{"overlong", []int{b(0xC0), b(0xAF)}, "\uFFFD\uFFFD"},
		{"unknown", []int{1, 0, the}, "\uFFFD the"},
		{"out of range", []int{-1, 99999}, "\uFFFD\uFFFD"},
		{"empty", nil, ""},
	} {
		if got := tok.Decode(c.ids); got != c.want {
			t.Errorf("%s: Decode(%v) = %q, want %q", c.name, c.ids, got, c.want)
		}
		if got := refDecode(tok, c.ids); got != c.want {
			t.Errorf("%s: refDecode(%v) = %q, want %q (test bug)", c.name, c.ids, got, c.want)
		}
	}
}

func TestDecodeChecked(t *testing.T) {
	tok := synthTokenizer(t)
	if s, err := tok.DecodeChecked([]int{1, 300}); err != nil || s == "" {
		t.Errorf("DecodeChecked = %q, %v", s, err)
	}
	n := tok.VocabSize()
	_, err := tok.DecodeChecked([]int{1, 300, 40000})
	if !errors.Is(err, ErrTokenID) || !strings.Contains(err.Error(), "token id 40000 at position 2 outside the vocabulary of "+strconv.Itoa(n)) {
		t.Errorf("DecodeChecked error = %v", err)
	}
	err = tok.CheckID(-3)
	if !errors.Is(err, ErrTokenID) || !strings.Contains(err.Error(), "token id -3 outside the vocabulary of "+strconv.Itoa(n)) {
		t.Errorf("CheckID error = %v", err)
	}
	if tok.CheckID(n-1) != nil || tok.CheckID(0) != nil {
		t.Error("CheckID rejects a valid id")
	}
}

// TestStreamingEquivalence checks, for random id sequences and for text
// whose characters are split into byte tokens, that the streamed output
// equals the independent reference after every token: what Next has
// emitted plus what Flush would add is the reference decoding of the
// prefix, and Next holds back only an incomplete character.
func TestStreamingEquivalence(t *testing.T) {
	for _, nt := range testTokenizers(t) {
		tok := nt.Tokenizer
		r := rand.New(rand.NewPCG(5, 6))
		n := tok.VocabSize()
		ref := newRefDecoder(tok)
		for iter := 0; iter < 400; iter++ {
			var ids []int
			switch iter % 3 {
			case 0: // random ids, weighted towards byte tokens and specials
				for range r.IntN(40) {
					switch r.IntN(6) {
					case 0:
						ids = append(ids, r.IntN(4))
					case 1, 2:
						ids = append(ids, 3+r.IntN(256))
					case 3:
						ids = append(ids, n+r.IntN(3)-1) // sometimes out of range
					default:
						ids = append(ids, r.IntN(n))
					}
				}
			default: // real text with every character spelled as byte tokens
				s := randomText(r, r.IntN(60))
				ids = append(ids, 1)
				for _, id := range tok.Encode(s, false) {
					if r.IntN(2) == 0 && tok.Kind(id) == Normal {
						for _, c := range []byte(tok.Decode([]int{id})) {
							ids = append(ids, 3+int(c))
						}
					} else {
						ids = append(ids, id)
					}
				}
			}
			d := tok.NewDecoder()
			var out strings.Builder
			for i, id := range ids {
				out.WriteString(d.Next(id))
				if len(d.pending) > 3 || (len(d.pending) > 0 && partialLen(d.pending) != len(d.pending)) {
					t.Fatalf("ids %v: after %d tokens the decoder holds %x", ids, i+1, d.pending)
				}
				c := *d
				c.pending = slices.Clone(d.pending)
				if got, want := out.String()+c.Flush(), ref.decode(ids[:i+1]); got != want {
					t.Fatalf("ids %v: after %d tokens streamed %q, reference %q", ids, i+1, got, want)
				}
			}
			out.WriteString(d.Flush())
			if got, want := out.String(), tok.Decode(ids); got != want {
				t.Fatalf("ids %v: streamed %q, Decode %q", ids, got, want)
			}
			if !utf8.ValidString(out.String()) {
				t.Fatalf("ids %v: invalid UTF-8 %q", ids, out.String())
			}
			// The decoder is reusable after Flush.
			if got := d.Next(1) + d.Next(ids0(tok)) + d.Flush(); got != ref.decode([]int{1, ids0(tok)}) {
				t.Fatalf("reuse after Flush: %q", got)
			}
		}
	}
}

func ids0(tok *Tokenizer) int { return tok.Encode("the", false)[0] }

func TestNextEmitsEagerly(t *testing.T) {
	tok := synthTokenizer(t)
	d := tok.NewDecoder()
	steps := []struct {
		id   int
		want string
	}{
		{1, ""}, {3 + 0xE6, ""}, {3 + 0x97, ""}, {3 + 0xA5, "日"},
		{3 + 0xF0, ""}, {3 + 0x9F, ""}, {3 + 0x98, ""}, {3 + 0x80, "😀"},
		{3 + 0xE6, ""}, {3 + 'x', "\uFFFDx"}, {3 + 0xFF, "\uFFFD"}, {3 + 0xC3, ""},
	}
	for i, s := range steps {
		if got := d.Next(s.id); got != s.want {
			t.Fatalf("step %d: Next(%d) = %q, want %q", i, s.id, got, s.want)
		}
	}
	if got := d.Flush(); got != "\uFFFD" {
		t.Errorf("Flush = %q", got)
	}
	if got := d.Flush(); got != "" {
		t.Errorf("second Flush = %q", got)
	}
}

func TestParseSynthetic(t *testing.T) {
	v := synthVocab()
	want := synthTokenizer(t)
	for name, spell := range map[string]func(byte) string{
		"chr":    nil,
		"raw":    func(b byte) string { return string([]byte{b}) },
		"hex":    byteToken,
		"hexlow": func(b byte) string { return strings.ToLower(byteToken(b)[:5]) + ">" },
	} {
		data := llama2cBytes(v, spell)
		for _, size := range []int{InferVocab, len(v.pieces)} {
			tok, err := Parse(data, size)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			assertSame(t, name, tok, want)
		}
	}
}

// assertSame compares two tokenizers' complete state.
func assertSame(t *testing.T, name string, got, want *Tokenizer) {
	t.Helper()
	if !reflect.DeepEqual(got.pieces, want.pieces) || !reflect.DeepEqual(got.surface, want.surface) ||
		!reflect.DeepEqual(got.scores, want.scores) || !reflect.DeepEqual(got.kinds, want.kinds) ||
		got.byteID != want.byteID || !reflect.DeepEqual(got.merge, want.merge) || got.maxLen != want.maxLen ||
		got.bos != want.bos || got.eos != want.eos || got.unk != want.unk {
		t.Fatalf("%s: tokenizers differ", name)
	}
}

func TestVocabRoundTrip(t *testing.T) {
	for _, nt := range testTokenizers(t) {
		tok := nt.Tokenizer
		p, s, k := tok.Vocab()
		back, err := New(p, s, k, tok.BOS(), tok.EOS(), tok.Unk())
		if err != nil {
			t.Fatal(err)
		}
		assertSame(t, "New(Vocab())", back, tok)
		// Vocab returns copies.
		p[5][0] = 'X'
		s[5] = 7
		k[5] = Normal
		if tok.Piece(5) != "<0x02>" || tok.Score(5) != 0 || tok.Kind(5) != Byte {
			t.Error("Vocab shares memory with the tokenizer")
		}
	}
}

func TestAccessors(t *testing.T) {
	tok := synthTokenizer(t)
	if tok.Piece(-1) != "" || tok.Piece(tok.VocabSize()) != "" || tok.Kind(-1) != 0 || tok.Score(1<<40) != 0 {
		t.Error("out-of-range accessors")
	}
	if tok.Piece(3+0x0A) != "<0x0A>" || tok.Kind(3+0x0A) != Byte || tok.Piece(1) != "<s>" {
		t.Error("byte/control pieces")
	}
	for _, k := range []Kind{Normal, Unknown, Control, Byte, 9} {
		if k.String() == "" {
			t.Error("empty kind name")
		}
	}
	if Kind(9).String() != "Kind(9)" || Byte.String() != "byte" {
		t.Error("Kind.String")
	}
}

func TestNewErrors(t *testing.T) {
	base := synthVocab()
	clone := func() testVocab {
		var v testVocab
		for _, p := range base.pieces {
			v.pieces = append(v.pieces, slices.Clone(p))
		}
		v.scores = slices.Clone(base.scores)
		v.kinds = slices.Clone(base.kinds)
		return v
	}
	for _, c := range []struct {
		name          string
		edit          func(v *testVocab)
		bos, eos, unk int
		msg           string
	}{
		{"empty", func(v *testVocab) { *v = testVocab{} }, 1, 2, 0, "empty vocabulary"},
		{"lengths", func(v *testVocab) { v.scores = v.scores[:10] }, 1, 2, 0, "10 scores"},
		{"bos", nil, 500, 2, 0, "BOS id 500 outside the vocabulary of " + strconv.Itoa(len(base.pieces))},
		{"eos", nil, 1, -1, 0, "EOS id -1"},
		{"unk", nil, 1, 2, len(base.pieces), "unknown-token id " + strconv.Itoa(len(base.pieces))},
		{"nan", func(v *testVocab) { v.scores[263] = float32(math.NaN()) }, 1, 2, 0, "token 263 (\"▁a\"): score NaN is not finite"},
		{"inf", func(v *testVocab) { v.scores[3] = float32(math.Inf(-1)) }, 1, 2, 0, "score -Inf"},
		{"byte spelling", func(v *testVocab) { v.pieces[13] = []byte("\n") }, 1, 2, 0, "byte token 13 is spelled \"\\n\""},
		{"byte twice", func(v *testVocab) { v.pieces[14] = []byte("<0x0a>") }, 1, 2, 0, "tokens 13 and 14 both stand for byte 0x0A"},
		{"kind", func(v *testVocab) { v.kinds[300] = 4 }, 1, 2, 0, "kind 4"},
		{"no unk, missing byte", func(v *testVocab) { v.kinds[3+0x41] = Normal }, 1, 2, -1, "no byte token for 0x41"},
	} {
		v := clone()
		if c.edit != nil {
			c.edit(&v)
		}
		_, err := New(v.pieces, v.scores, v.kinds, c.bos, c.eos, c.unk)
		if !errors.Is(err, ErrVocab) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err = %v, want ErrVocab containing %q", c.name, err, c.msg)
		}
	}
	// Without an unknown token but with every byte, New is fine.
	v := clone()
	if _, err := New(v.pieces, v.scores, v.kinds, 1, 2, -1); err != nil {
		t.Errorf("no unk: %v", err)
	}
	// Without byte tokens, unknown characters become <unk>.
	var pieces [][]byte
	var scores []float32
	var kinds []Kind
	for i := range v.pieces {
		if v.kinds[i] != Byte {
			pieces, scores, kinds = append(pieces, v.pieces[i]), append(scores, v.scores[i]), append(kinds, v.kinds[i])
		}
	}
	tok, err := New(pieces, scores, kinds, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode("A本", false)
	if len(ids) != 5 || ids[1] != 0 || ids[4] != 0 || tok.Decode(ids) != " \uFFFD\uFFFD\uFFFD\uFFFD" {
		t.Errorf("no byte fallback: %v %q", ids, tok.Decode(ids))
	}
}

// hostile builds a tokenizer.bin from raw records.
func hostile(maxLen int32, recs ...any) []byte {
	out := binary.LittleEndian.AppendUint32(nil, uint32(maxLen))
	for _, r := range recs {
		switch r := r.(type) {
		case float32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(r))
		case int32:
			out = binary.LittleEndian.AppendUint32(out, uint32(r))
		case string:
			out = append(out, r...)
		}
	}
	return out
}

func TestParseErrors(t *testing.T) {
	ok3 := []any{float32(0), int32(5), "<unk>", float32(0), int32(3), "<s>", float32(0), int32(4), "</s>"}
	if _, err := Parse(hostile(5, ok3...), 3); err != nil {
		t.Fatalf("minimal file: %v", err)
	}
	for _, c := range []struct {
		name string
		data []byte
		size int
		err  error
		msg  string
	}{
		{"empty", nil, 3, ErrTruncated, "tokenizer.bin: 0 bytes, shorter than the 4-byte max_token_length header"},
		{"negative max", hostile(-1, ok3...), 3, ErrMalformed, "max_token_length -1 at offset 0 is negative"},
		{"huge max", hostile(1<<30, ok3...), 3, ErrMalformed, "max_token_length 1073741824 at offset 0 exceeds the file (36 bytes after the header)"},
		{"huge length", hostile(5, append(ok3, float32(0), int32(0x7fffffff), "x")...), 4, ErrTruncated, "token 3 at offset 40: length 2147483647 exceeds the file (1 bytes left)"},
		{"negative length", hostile(5, append(ok3, float32(0), int32(-8), "x")...), 4, ErrMalformed, "token 3 at offset 40: length -8 is negative"},
		{"length over max", hostile(4, ok3...), 3, ErrMalformed, "token 0 at offset 4: length 5 exceeds max_token_length 4"},
		{"nan", hostile(5, append(ok3, float32(math.NaN()), int32(1), "x")...), 4, ErrMalformed, "token 3 at offset 40: score NaN is not finite"},
		{"partial header", hostile(5, append(ok3, float32(0), "ab")...), 4, ErrTruncated, "token 3 at offset 40: record header needs 8 bytes, 6 left"},
		{"too few", hostile(5, ok3[:6]...), InferVocab, ErrMalformed, "holds 2 tokens; a llama2.c tokenizer needs at least"},
		{"fewer than model", hostile(5, ok3...), 4, ErrMismatch, "tokenizer.bin holds 3 tokens, the model's vocabulary has 4"},
		{"more than model", hostile(5, ok3...), 2, ErrMismatch, "tokenizer.bin holds 3 tokens, the model's vocabulary has 2"},
		{"negative vocab", hostile(5, ok3...), -1, ErrMismatch, "vocabulary size -1 is negative"},
		{"too large", make([]byte, MaxFileSize+1), 3, ErrMalformed, "more than the"},
	} {
		_, err := Parse(c.data, c.size)
		if !errors.Is(err, c.err) || !strings.Contains(err.Error(), c.msg) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
			t.Errorf("%s: err = %v, want %v containing %q", c.name, err, c.err, c.msg)
		}
	}
}

func TestParseTruncatedEverywhere(t *testing.T) {
	v := synthVocab()
	data := llama2cBytes(v, nil)
	n := len(v.pieces)
	// Record boundaries and the token count before each.
	bounds := map[int]int{}
	for off, i := 4, 0; ; i++ {
		bounds[off] = i
		if off >= len(data) {
			break
		}
		off += 8 + int(binary.LittleEndian.Uint32(data[off+4:]))
	}
	for k := 0; k < len(data); k++ {
		cut := data[:k:k]
		_, err := Parse(cut, n)
		if err == nil {
			t.Fatalf("prefix of %d bytes accepted for a %d-token model", k, n)
		}
		if !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrMismatch) && !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d bytes: unexpected error %v", k, err)
		}
		tok, err := Parse(cut, InferVocab)
		if count, boundary := bounds[k]; boundary && count >= 3 && k >= 4+int(binary.LittleEndian.Uint32(data)) {
			if err != nil || tok.VocabSize() != count {
				t.Fatalf("prefix of %d bytes (%d whole tokens): %v", k, count, err)
			}
		} else if err == nil {
			t.Fatalf("prefix of %d bytes parsed", k)
		}
	}
}

func TestRealFileErrors(t *testing.T) {
	_, path := testmodel.Stories15M(t)
	for _, size := range []int{31999, 32001} {
		_, err := LoadFor(path, size)
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "holds 32000 tokens, the model's vocabulary has "+strconv.Itoa(size)) ||
			!strings.Contains(err.Error(), path) {
			t.Errorf("LoadFor(%d): %v", size, err)
		}
	}
	tok, err := Load(path)
	if err != nil || tok.VocabSize() != 32000 {
		t.Fatalf("Load: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Parse(data[:len(data)-3], 32000)
	if !errors.Is(err, ErrTruncated) || !strings.Contains(err.Error(), "token 31999 at offset") {
		t.Errorf("truncated real file: %v", err)
	}
	if _, err := Load(path + ".missing"); !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "tokenizer: ") {
		t.Errorf("missing file: %v", err)
	}
	// A model checkpoint given by mistake.
	model, _ := testmodel.Stories15M(t)
	if _, err := LoadFor(model, 32000); err == nil {
		t.Error("stories15M.bin parsed as a tokenizer")
	}
}

// TestEncodeWork checks that encoding is linear in heap operations on long
// and adversarial text (prose, random text, runs of one letter, of spaces,
// of emoji, numbers), and that such text round-trips. Each merge pushes at
// most two candidates and pops at most one, so a text of n bytes takes at
// most about 3n pushes and 3n pops. A quadratic regression (re-queuing
// every pair after each merge, say) shows up here without timing anything;
// BenchmarkEncode100KB measures the speed.
func TestEncodeWork(t *testing.T) {
	toks := map[string]*Tokenizer{"synthetic": synthTokenizer(t)}
	for name, tok := range bpeTokenizers(t) {
		toks["bpe-"+name] = tok
	}
	t.Run("stories15M", func(t *testing.T) { toks["stories15M"] = realTokenizer(t) })
	// Counts do not depend on the machine, so a modest size shows a
	// quadratic algorithm as clearly as a large one would.
	const n = 32 << 10
	texts := map[string]string{
		"story":  storyText(n),
		"a":      strings.Repeat("a", n),
		"spaces": strings.Repeat(" ", n),
		"emoji":  strings.Repeat("😀", n/4),
		"digits": strings.Repeat("1234567890", n/10),
		"random": randomText(rand.New(rand.NewPCG(7, 8)), n),
	}
	for name, tok := range toks {
		for tname, text := range texts {
			var ids []int
			var steps int
			if tok.bpe != nil {
				ids, steps = tok.encodeBPE(text, true)
			} else {
				ids, steps = tok.encodeSP(text, true)
			}
			if limit := 6 * (len(text) + 1); steps > limit {
				t.Errorf("%s/%s: %d heap operations for %d bytes, over %d", name, tname, steps, len(text), limit)
			}
			if got := tok.Decode(ids); got != text {
				t.Errorf("%s/%s: does not round-trip", name, tname)
			}
			t.Logf("%s/%s: %d bytes -> %d tokens, %d heap operations", name, tname, len(text), len(ids), steps)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	tok := synthTokenizer(t)
	want := tok.Encode(storyText(5000), true)
	done := make(chan bool)
	for range 4 {
		go func() {
			ok := slices.Equal(tok.Encode(storyText(5000), true), want) && tok.Decode(want) == storyText(5000)
			done <- ok
		}()
	}
	for range 4 {
		if !<-done {
			t.Error("concurrent Encode/Decode disagree")
		}
	}
}

func FuzzParse(f *testing.F) {
	v := synthVocab()
	f.Add(llama2cBytes(v, nil))
	f.Add(llama2cBytes(v, byteToken)[:100])
	f.Add(hostile(5, float32(0), int32(5), "<unk>", float32(0), int32(3), "<s>", float32(0), int32(4), "</s>", float32(1), int32(2), "ab"))
	f.Add(hostile(-1))
	f.Add(hostile(3, float32(0), int32(0x7fffffff)))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, size := range []int{InferVocab, 3, 4, len(v.pieces)} {
			tok, err := Parse(data, size)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "tokenizer: ") {
					t.Fatalf("error without prefix: %v", err)
				}
				continue
			}
			if size != InferVocab && tok.VocabSize() != size {
				t.Fatalf("VocabSize %d, want %d", tok.VocabSize(), size)
			}
			p, s, k := tok.Vocab()
			if _, err := New(p, s, k, tok.BOS(), tok.EOS(), tok.Unk()); err != nil {
				t.Fatalf("New(Vocab()) of a parsed file: %v", err)
			}
			ids := tok.Encode("the cat ü 日本 \xff", true)
			for _, id := range ids {
				if tok.CheckID(id) != nil {
					t.Fatalf("Encode produced id %d", id)
				}
			}
			if !utf8.ValidString(tok.Decode(append(ids, -1, 1<<20))) {
				t.Fatal("Decode produced invalid UTF-8")
			}
		}
	})
}

func FuzzEncodeDecode(f *testing.F) {
	for _, s := range []string{"", "Once upon a time", "😀 日本語 ü", "<s> </s> <unk>", "  \n\t x", "\u2581a", "a\u0301"} {
		f.Add(s)
	}
	real := realTokenizer(f)
	synth := synthTokenizer(f)
	naive := map[*Tokenizer]*naiveEncoder{real: newNaive(real), synth: newNaive(synth)}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for _, tok := range []*Tokenizer{real, synth} {
			ids := tok.Encode(s, true)
			if got := tok.Decode(ids); got != s {
				t.Fatalf("Decode(Encode(%q)) = %q", s, got)
			}
			if len(s) <= 512 && !slices.Equal(ids, naive[tok].encode(s, true)) {
				t.Fatalf("Encode(%q) differs from the naive encoder", s)
			}
			d := tok.NewDecoder()
			var b bytes.Buffer
			for _, id := range ids {
				b.WriteString(d.Next(id))
			}
			b.WriteString(d.Flush())
			if b.String() != s {
				t.Fatalf("streamed %q, want %q", b.String(), s)
			}
		}
	})
}

func BenchmarkEncode1KB(b *testing.B)  { benchEncode(b, 1<<10) }
func BenchmarkEncode64KB(b *testing.B) { benchEncode(b, 64<<10) }

func benchEncode(b *testing.B, n int) {
	tok := realTokenizer(b)
	text := storyText(n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		tok.Encode(text, true)
	}
}

// BenchmarkEncode100KB measures encoding 100 KB of prose, of random text
// and of one repeated letter, with each model.
func BenchmarkEncode100KB(b *testing.B) {
	const n = 100 << 10
	texts := []struct{ name, text string }{
		{"story", storyText(n)},
		{"random", randomText(rand.New(rand.NewPCG(7, 8)), n)},
		{"a", strings.Repeat("a", n)},
	}
	run := func(b *testing.B, tok func(testing.TB) *Tokenizer) {
		for _, c := range texts {
			b.Run(c.name, func(b *testing.B) {
				tk := tok(b)
				b.SetBytes(int64(len(c.text)))
				b.ReportAllocs()
				for b.Loop() {
					tk.Encode(c.text, true)
				}
			})
		}
	}
	b.Run("stories15M", func(b *testing.B) { run(b, realTokenizer) })
	b.Run("bpe", func(b *testing.B) { run(b, func(t testing.TB) *Tokenizer { return trainedVocab().build(t) }) })
}

func BenchmarkDecoderNext(b *testing.B) {
	tok := realTokenizer(b)
	ids := tok.Encode(storyText(64<<10)+" 😀 日本", true)
	d := tok.NewDecoder()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		d.Next(ids[i])
		if i++; i == len(ids) {
			i = 0
			d.Flush()
		}
	}
}
