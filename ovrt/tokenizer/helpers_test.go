package tokenizer

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pipeshard/pipeshard/internal/testmodel"
)

// testVocab is a small vocabulary in GGUF conventions, laid out as a
// llama2.c/SentencePiece one: <unk>, <s>, </s>, 256 byte tokens, then
// Normal pieces.
type testVocab struct {
	pieces [][]byte
	scores []float32
	kinds  []Kind
}

// synthNormals are the synthetic vocabulary's Normal pieces, best first.
// "ab" and "bc" tie, to exercise the leftmost rule; "é" and "日" are
// multi-byte characters in the vocabulary, "本" is not; "e▁" and "e▁c"
// span a word end.
var synthNormals = []struct {
	piece string
	score float32
}{
	{"▁t", -1}, {"he", -2}, {"▁the", -3}, {"in", -4}, {"▁a", -5}, {"an", -6},
	{"nd", -7}, {"▁and", -8}, {"er", -9}, {"ab", -10}, {"bc", -10}, {"▁▁", -11},
	{"ll", -12}, {"▁c", -13}, {"▁ca", -14}, {"▁cat", -15}, {"é", -16}, {"▁é", -17},
	{"日", -18}, {"<s>", -19}, {"!", -20}, {"e▁", -21}, {"e▁c", -22}, {"▁", -100},
}

func synthVocab() testVocab {
	var v testVocab
	add := func(p string, s float32, k Kind) {
		v.pieces = append(v.pieces, []byte(p))
		v.scores = append(v.scores, s)
		v.kinds = append(v.kinds, k)
	}
	add("<unk>", 0, Unknown)
	add("<s>", 0, Control)
	add("</s>", 0, Control)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, Byte)
	}
	for _, n := range synthNormals {
		add(n.piece, n.score, Normal)
	}
	for i, c := range "abcdefghijklmnopqrstuvwxyz.," {
		add(string(c), float32(-200-i), Normal)
	}
	return v
}

func synthTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	v := synthVocab()
	tok, err := New(v.pieces, v.scores, v.kinds, 1, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// llama2cBytes writes a vocabulary as a llama2.c tokenizer.bin. Spaces
// become ' ', BOS/EOS become "\n<s>\n"/"\n</s>\n", and byte tokens are
// spelled by spell (nil: the older export's chr(b) as UTF-8).
func llama2cBytes(v testVocab, spell func(b byte) string) []byte {
	texts := make([]string, len(v.pieces))
	maxLen := 0
	for i, p := range v.pieces {
		s := string(p)
		switch {
		case i == 1:
			s = "\n<s>\n"
		case i == 2:
			s = "\n</s>\n"
		case v.kinds[i] == Byte:
			b, _ := parseByteToken(s)
			if spell != nil {
				s = spell(b)
			} else {
				s = string(rune(b))
			}
		default:
			s = strings.ReplaceAll(s, "▁", " ")
		}
		texts[i] = s
		maxLen = max(maxLen, len(s))
	}
	out := binary.LittleEndian.AppendUint32(nil, uint32(maxLen))
	for i, s := range texts {
		out = binary.LittleEndian.AppendUint32(out, math.Float32bits(v.scores[i]))
		out = binary.LittleEndian.AppendUint32(out, uint32(len(s)))
		out = append(out, s...)
	}
	return out
}

var (
	realOnce sync.Once
	realTok  *Tokenizer
	realErr  error
)

// realTokenizer loads stories15M's tokenizer (skipping, or failing under
// CI, when it is missing).
func realTokenizer(t testing.TB) *Tokenizer {
	t.Helper()
	_, path := testmodel.Stories15M(t)
	realOnce.Do(func() { realTok, realErr = LoadFor(path, 32000) })
	if realErr != nil {
		t.Fatal(realErr)
	}
	return realTok
}

// naiveEncoder is an independent, quadratic implementation of the encoding
// rules, built only from the public vocabulary (Vocab's output).
type naiveEncoder struct {
	merge  map[string]int
	scores []float32
	bytes  [256]int
	bos    int
	unk    int
}

func newNaive(tok *Tokenizer) *naiveEncoder {
	pieces, scores, kinds := tok.Vocab()
	n := &naiveEncoder{merge: map[string]int{}, scores: scores, bos: tok.BOS(), unk: tok.Unk()}
	for i := range n.bytes {
		n.bytes[i] = tok.Unk()
	}
	for i, p := range pieces {
		switch kinds[i] {
		case Normal:
			if i == tok.BOS() || i == tok.EOS() {
				continue
			}
			s := strings.ReplaceAll(string(p), "▁", " ")
			if _, ok := n.merge[s]; !ok && s != "" {
				n.merge[s] = i
			}
		case Byte:
			var b byte
			if _, err := fmt.Sscanf(string(p), "<0x%02X>", &b); err != nil {
				panic(err)
			}
			n.bytes[b] = i
		}
	}
	return n
}

func (n *naiveEncoder) encode(text string, bos bool) []int {
	ids := []int{}
	if bos {
		ids = append(ids, n.bos)
	}
	if text == "" {
		return ids
	}
	s := " " + text
	var syms []string
	for len(s) > 0 {
		_, w := utf8.DecodeRuneInString(s)
		syms = append(syms, s[:w])
		s = s[w:]
	}
	for {
		best, bestScore := -1, float32(0)
		for i := 0; i+1 < len(syms); i++ {
			if id, ok := n.merge[syms[i]+syms[i+1]]; ok && (best < 0 || n.scores[id] > bestScore) {
				best, bestScore = i, n.scores[id]
			}
		}
		if best < 0 {
			break
		}
		syms[best] += syms[best+1]
		syms = append(syms[:best+1], syms[best+2:]...)
	}
	for _, s := range syms {
		if id, ok := n.merge[s]; ok {
			ids = append(ids, id)
			continue
		}
		for j := 0; j < len(s); j++ {
			ids = append(ids, n.bytes[s[j]])
		}
	}
	return ids
}

// refDecode is an independent implementation of the decoding rules: the
// token bytes are concatenated (dropping one leading space of the first
// text after BOS), then ill-formed UTF-8 is replaced by maximal subparts
// following Unicode's Table 3-7.
func refDecode(tok *Tokenizer, ids []int) string { return newRefDecoder(tok).decode(ids) }

type refDecoder struct {
	pieces   [][]byte
	kinds    []Kind
	bos, eos int
}

func newRefDecoder(tok *Tokenizer) *refDecoder {
	pieces, _, kinds := tok.Vocab()
	return &refDecoder{pieces, kinds, tok.BOS(), tok.EOS()}
}

func (r *refDecoder) decode(ids []int) string {
	pieces, kinds := r.pieces, r.kinds
	var buf []byte
	strip := false
	for _, id := range ids {
		var b []byte
		switch {
		case id < 0 || id >= len(pieces):
			b = []byte("\uFFFD")
		case id == r.bos:
			strip = true
			continue
		case id == r.eos || kinds[id] == Control:
			continue
		case kinds[id] == Unknown:
			b = []byte("\uFFFD")
		case kinds[id] == Byte:
			var c byte
			fmt.Sscanf(string(pieces[id]), "<0x%02X>", &c)
			b = []byte{c}
		default:
			b = []byte(strings.ReplaceAll(string(pieces[id]), "▁", " "))
			if len(b) == 0 {
				continue
			}
		}
		if strip && len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
		strip = false
		buf = append(buf, b...)
	}
	return sanitize(buf)
}

func sanitize(b []byte) string {
	var out strings.Builder
	for i := 0; i < len(b); {
		c := b[i]
		need, lo, hi := 0, byte(0x80), byte(0xBF)
		switch {
		case c < 0x80:
			out.WriteByte(c)
			i++
			continue
		case 0xC2 <= c && c <= 0xDF:
			need = 1
		case c == 0xE0:
			need, lo = 2, 0xA0
		case 0xE1 <= c && c <= 0xEC, c == 0xEE, c == 0xEF:
			need = 2
		case c == 0xED:
			need, hi = 2, 0x9F
		case c == 0xF0:
			need, lo = 3, 0x90
		case 0xF1 <= c && c <= 0xF3:
			need = 3
		case c == 0xF4:
			need, hi = 3, 0x8F
		default:
			out.WriteString("\uFFFD")
			i++
			continue
		}
		j, got := i+1, 0
		for got < need && j < len(b) {
			l, h := byte(0x80), byte(0xBF)
			if got == 0 {
				l, h = lo, hi
			}
			if b[j] < l || b[j] > h {
				break
			}
			j++
			got++
		}
		if got == need {
			out.Write(b[i:j])
		} else {
			out.WriteString("\uFFFD")
		}
		i = j
	}
	return out.String()
}

// randomText returns valid UTF-8 mixing words, spaces, newlines, accents,
// CJK, emoji and other characters, most of them in Llama's vocabulary and
// some not.
func randomText(r *rand.Rand, n int) string {
	words := []string{"the", "cat", "and", "a", "in", "Lily", "dragon", "Once", "upon", "time", "happy", "é", "café", "日本", "😀", "🦙", "ab", "bc", "abc", "<s>", "</s>", "▁", "\t", "\n", "  ", "!", ".", ",", "Ω", "ß", "\u0301", "\x00", "\x7f", "\uFFFD", "ｱ"}
	var b strings.Builder
	for b.Len() < n {
		switch r.IntN(10) {
		case 0:
			b.WriteRune(rune(r.IntN(0x800)))
		case 1:
			c := rune(r.IntN(0x10FFFF))
			if utf8.ValidRune(c) {
				b.WriteRune(c)
			}
		default:
			b.WriteString(words[r.IntN(len(words))])
		}
		if r.IntN(3) > 0 {
			b.WriteByte(' ')
		}
	}
	return b.String()
}

// storyText returns about n bytes of English prose.
func storyText(n int) string {
	const para = "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. " +
		"One day, she saw a big, red ball in the park. She ran to it and kicked it very hard! The ball flew " +
		"over the fence and into the garden of an old man. Lily was scared, but she knocked on the door. " +
		"\"I'm sorry,\" she said. The man smiled and gave her the ball back. They became good friends.\n"
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(para)
		fmt.Fprintf(&b, "Chapter %d: Tom and his dog went to the park. They played until %d o'clock.\n", i, i%12+1)
	}
	return b.String()[:n]
}
