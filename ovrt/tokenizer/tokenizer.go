package tokenizer

import (
	"fmt"
	"math"
	"strings"
)

// Kind is the role of a token. The values are GGUF's
// tokenizer.ggml.token_type codes, so an importer or exporter can convert
// with a plain type conversion.
type Kind uint8

const (
	Normal  Kind = 1 // an ordinary piece: takes part in merges, decodes to its text
	Unknown Kind = 2 // <unk>: stands for text the vocabulary cannot spell
	Control Kind = 3 // <s>, </s> and the like: never produced from text, decodes to nothing
	Byte    Kind = 6 // byte-fallback token <0xNN>: decodes to the single raw byte NN
)

// String returns the kind's name.
func (k Kind) String() string {
	switch k {
	case Normal:
		return "normal"
	case Unknown:
		return "unknown"
	case Control:
		return "control"
	case Byte:
		return "byte"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// spaceMark is SentencePiece's visible space, U+2581 LOWER ONE EIGHTH BLOCK.
const spaceMark = "\u2581"

// replacement is what an unknown token and an id outside the vocabulary
// decode to.
const replacement = "\uFFFD"

// Tokenizer is a tokenizer of one of two models: SentencePiece-style BPE by
// scores with byte fallback (Llama 1 and 2; built by New, Parse and Load) or
// byte-level BPE with ranked merges (Llama 3; built by NewBPE). Model tells
// which. Both share one API, so callers need not care. It is immutable once
// built, so one Tokenizer may serve any number of goroutines; a Decoder, in
// contrast, belongs to one stream.
type Tokenizer struct {
	pieces  []string // SentencePiece/GGUF form: "▁Once", "<0x0A>", "<s>"
	surface []string // what the token decodes to: " Once", "\n", ""
	scores  []float32
	kinds   []Kind

	bos, eos, unk int
	byteID        [256]int32 // id of the byte token for each byte, -1 if none

	merge  map[string]int32    // surface text of Normal pieces -> id (lowest id wins)
	maxLen int                 // longest key of merge, in bytes
	adj    map[uint64]struct{} // pairs of characters adjacent in some merge key (SentencePiece only)

	bpe *bpeModel // the byte-level BPE model (NewBPE), nil for SentencePiece
}

// New builds a tokenizer from an explicit vocabulary in SentencePiece/GGUF
// conventions, the form tokenizer.ggml.tokens, tokenizer.ggml.scores and
// tokenizer.ggml.token_type hold:
//
//   - Normal pieces spell spaces as "▁" (U+2581);
//   - Byte tokens are spelled "<0xNN>" (two hex digits) and are recognised by
//     their kind, not their text; each byte may have at most one;
//   - Control and Unknown tokens may be spelled anything ("<s>", "<unk>").
//
// bos and eos must be ids in the vocabulary; they decode to nothing whatever
// their kind. unk may be -1 when the vocabulary has no unknown token, but
// then every byte needs a byte token, or some text could not be encoded.
// Scores must be finite. When two Normal pieces have the same text, the
// encoder uses the lower id. New copies its arguments; New(t.Vocab()) with
// t's BOS, EOS and unknown ids rebuilds an equivalent tokenizer.
func New(pieces [][]byte, scores []float32, kinds []Kind, bos, eos, unk int) (*Tokenizer, error) {
	n := len(pieces)
	if n == 0 {
		return nil, fmt.Errorf("%w: empty vocabulary", ErrVocab)
	}
	if len(scores) != n || len(kinds) != n {
		return nil, fmt.Errorf("%w: %d pieces, %d scores and %d kinds", ErrVocab, n, len(scores), len(kinds))
	}
	if bos < 0 || bos >= n {
		return nil, fmt.Errorf("%w: BOS id %d outside the vocabulary of %d", ErrVocab, bos, n)
	}
	if eos < 0 || eos >= n {
		return nil, fmt.Errorf("%w: EOS id %d outside the vocabulary of %d", ErrVocab, eos, n)
	}
	if unk < -1 || unk >= n {
		return nil, fmt.Errorf("%w: unknown-token id %d outside the vocabulary of %d", ErrVocab, unk, n)
	}
	t := &Tokenizer{
		pieces:  make([]string, n),
		surface: make([]string, n),
		scores:  make([]float32, n),
		kinds:   make([]Kind, n),
		bos:     bos, eos: eos, unk: unk,
	}
	copy(t.scores, scores)
	copy(t.kinds, kinds)
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	for i, p := range pieces {
		s := string(p)
		t.pieces[i] = s
		if f := float64(scores[i]); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: token %d (%q): score %v is not finite", ErrVocab, i, s, scores[i])
		}
		switch kinds[i] {
		case Normal:
			t.surface[i] = strings.ReplaceAll(s, spaceMark, " ")
		case Unknown:
			t.surface[i] = replacement
		case Control:
			t.surface[i] = ""
		case Byte:
			b, ok := parseByteToken(s)
			if !ok {
				return nil, fmt.Errorf("%w: byte token %d is spelled %q, not <0xNN>", ErrVocab, i, s)
			}
			if prev := t.byteID[b]; prev >= 0 {
				return nil, fmt.Errorf("%w: tokens %d and %d both stand for byte 0x%02X", ErrVocab, prev, i, b)
			}
			t.byteID[b] = int32(i)
			t.surface[i] = string([]byte{b})
		default:
			return nil, fmt.Errorf("%w: token %d (%q) has kind %d; want normal (1), unknown (2), control (3) or byte (6)", ErrVocab, i, s, uint8(kinds[i]))
		}
	}
	if unk < 0 {
		for b, id := range t.byteID {
			if id < 0 {
				return nil, fmt.Errorf("%w: no unknown token and no byte token for 0x%02X, so some text could not be encoded", ErrVocab, b)
			}
		}
	}
	t.finish()
	return t, nil
}

// finish makes BOS and EOS silent and builds the merge table.
func (t *Tokenizer) finish() {
	t.surface[t.bos] = ""
	t.surface[t.eos] = ""
	t.merge = make(map[string]int32, len(t.pieces))
	for i, s := range t.surface {
		if t.kinds[i] != Normal || s == "" || i == t.bos || i == t.eos {
			continue
		}
		if _, dup := t.merge[s]; dup {
			continue
		}
		t.merge[s] = int32(i)
		t.maxLen = max(t.maxLen, len(s))
	}
	t.indexAdjacent()
}

// parseByteToken parses "<0xNN>" (hex digits of either case).
func parseByteToken(s string) (byte, bool) {
	if len(s) != 6 || s[:3] != "<0x" || s[5] != '>' {
		return 0, false
	}
	hi, ok1 := hexDigit(s[3])
	lo, ok2 := hexDigit(s[4])
	return hi<<4 | lo, ok1 && ok2
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// byteToken spells byte b as SentencePiece and GGUF do.
func byteToken(b byte) string {
	const hex = "0123456789ABCDEF"
	return string([]byte{'<', '0', 'x', hex[b>>4], hex[b&15], '>'})
}

// VocabSize returns the number of tokens.
func (t *Tokenizer) VocabSize() int { return len(t.pieces) }

// BOS returns the beginning-of-sequence id.
func (t *Tokenizer) BOS() int { return t.bos }

// EOS returns the end-of-sequence id.
func (t *Tokenizer) EOS() int { return t.eos }

// Unk returns the unknown-token id, or -1 when the vocabulary has none. A
// byte-level BPE tokenizer has none: it spells every byte.
func (t *Tokenizer) Unk() int { return t.unk }

// Piece returns token id's piece as the vocabulary spells it: in
// SentencePiece form ("▁Once", "<0x0A>", "<s>"), or for byte-level BPE in
// GPT-2's byte alphabet ("Ġworld", "Ċ", "<|begin_of_text|>"); "" for an id
// outside the vocabulary.
func (t *Tokenizer) Piece(id int) string {
	if id < 0 || id >= len(t.pieces) {
		return ""
	}
	return t.pieces[id]
}

// Kind returns token id's kind, or 0 for an id outside the vocabulary.
func (t *Tokenizer) Kind(id int) Kind {
	if id < 0 || id >= len(t.kinds) {
		return 0
	}
	return t.kinds[id]
}

// Score returns token id's merge score, or 0 for an id outside the
// vocabulary. Byte-level BPE ranks merges instead, and its scores are 0.
func (t *Tokenizer) Score(id int) float32 {
	if id < 0 || id >= len(t.scores) {
		return 0
	}
	return t.scores[id]
}

// CheckID reports whether id is in the vocabulary. Its error wraps
// ErrTokenID and reads "token id 40000 outside the vocabulary of 32000".
func (t *Tokenizer) CheckID(id int) error {
	if id < 0 || id >= len(t.pieces) {
		return fmt.Errorf("%w: token id %d outside the vocabulary of %d", ErrTokenID, id, len(t.pieces))
	}
	return nil
}

// Vocab returns fresh copies of the vocabulary in SentencePiece/GGUF
// conventions, ready to be written as tokenizer.ggml.tokens, .scores and
// .token_type: "▁" for spaces, "<0xNN>" for byte tokens, and for a
// llama2.c tokenizer.bin "<unk>", "<s>" and "</s>" for ids 0, 1 and 2. The
// pieces of a llama2.c file are all distinct in this form even though its
// stored strings are not.
//
// For a byte-level BPE tokenizer, pieces are its tokens as given to NewBPE
// (tokenizer.ggml.tokens), the scores are 0, and Merges, Model and Pre
// give the rest of its GGUF keys.
func (t *Tokenizer) Vocab() (pieces [][]byte, scores []float32, kinds []Kind) {
	pieces = make([][]byte, len(t.pieces))
	for i, p := range t.pieces {
		pieces[i] = []byte(p)
	}
	scores = append([]float32(nil), t.scores...)
	kinds = append([]Kind(nil), t.kinds...)
	return pieces, scores, kinds
}
