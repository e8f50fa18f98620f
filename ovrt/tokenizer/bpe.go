package tokenizer

import (
	"fmt"
	"math"
	"strings"
)

// Models, as Model returns them: GGUF's tokenizer.ggml.model values.
const (
	ModelLlama = "llama" // SentencePiece BPE by scores, with byte fallback (Llama 1 and 2)
	ModelGPT2  = "gpt2"  // byte-level BPE with ranked merges (Llama 3)
)

// PreLlama3 is the tokenizer.ggml.pre name of Llama 3's pre-tokenizer.
const PreLlama3 = "llama-bpe"

// byteRune maps each byte to the character that stands for it in a
// byte-level BPE token, GPT-2's table: the printable bytes 33–126, 161–172
// and 174–255 stand for themselves; the other 68 bytes, in increasing
// order, for U+0100, U+0101, ... U+0143. So a space (0x20, the 33rd
// unprintable byte) is "Ġ" (U+0120), "\n" is "Ċ" (U+010A), and "é"
// (C3 A9) is spelled "Ã©".
//
// runeByte is its inverse over the characters below U+0144, -1 for a
// character that stands for no byte.
var byteRune, runeByte = func() (fwd [256]rune, inv [0x144]int16) {
	for i := range inv {
		inv[i] = -1
	}
	n := rune(0)
	for b := range 256 {
		if 33 <= b && b <= 126 || 161 <= b && b <= 172 || 174 <= b {
			fwd[b] = rune(b)
		} else {
			fwd[b] = 0x100 + n
			n++
		}
		inv[fwd[b]] = int16(b)
	}
	return fwd, inv
}()

// bytesOfToken returns the bytes a byte-level token stands for, or false
// if some character of it stands for no byte.
func bytesOfToken(s string) (string, bool) {
	out := make([]byte, 0, len(s))
	for _, r := range s {
		if r >= rune(len(runeByte)) || runeByte[r] < 0 {
			return "", false // also U+FFFD, for invalid UTF-8
		}
		out = append(out, byte(runeByte[r]))
	}
	return string(out), true
}

// bpeModel is what a byte-level BPE tokenizer adds to Tokenizer.
type bpeModel struct {
	pre          string
	merges       []string            // as given, for Merges
	byteTok      [256]int32          // the single-byte Normal token of each byte
	rank         map[uint64]bpeMerge // (left id, right id) -> merge
	ignoreMerges bool                // a piece that is a token is taken whole
}

// bpeMerge is one merge rule: its rank (position in the list) and the id
// of the token it makes.
type bpeMerge struct {
	rank, id int32
}

func pairKey(l, r int32) uint64 { return uint64(uint32(l))<<32 | uint64(uint32(r)) }

// NewBPE builds a byte-level BPE tokenizer, Llama 3's, from the form
// GGUF's tokenizer.ggml.tokens, .merges, .token_type and .pre hold (model
// "gpt2"):
//
//   - tokens are spelled in GPT-2's byte-to-character table (" world" is
//     "Ġworld"); Control and Unknown tokens may be spelled anything
//     ("<|begin_of_text|>");
//   - every byte must have its single-character Normal token;
//   - merges are "left right", two Normal tokens whose concatenation is a
//     Normal token, the best first (lowest rank); a pair listed twice
//     keeps its first rank;
//   - kinds are Normal, Control or Unknown (GGUF types 1, 3, 2): byte-level
//     BPE has no Byte tokens;
//   - bos and eos must be ids in the vocabulary;
//   - pre names the pre-tokenizer: "llama-bpe" (PreLlama3), or "" for a
//     file that predates tokenizer.ggml.pre, taken as "llama-bpe". Others
//     fail with ErrUnsupported.
//
// When two Normal tokens have the same text, the encoder uses the lower id.
// NewBPE copies its arguments; NewBPE(t.Vocab() tokens, t.Merges(), kinds,
// t.BOS(), t.EOS(), t.Pre()) rebuilds an equivalent tokenizer.
func NewBPE(tokens []string, merges []string, kinds []Kind, bos, eos int, pre string) (*Tokenizer, error) {
	n := len(tokens)
	if pre != "" && pre != PreLlama3 {
		return nil, fmt.Errorf("%w: pre-tokenizer %q (only %q, Llama 3's, is implemented)", ErrUnsupported, pre, PreLlama3)
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: empty vocabulary", ErrVocab)
	}
	if n > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d tokens", ErrVocab, n)
	}
	if len(kinds) != n {
		return nil, fmt.Errorf("%w: %d tokens and %d kinds", ErrVocab, n, len(kinds))
	}
	if bos < 0 || bos >= n {
		return nil, fmt.Errorf("%w: BOS id %d outside the vocabulary of %d", ErrVocab, bos, n)
	}
	if eos < 0 || eos >= n {
		return nil, fmt.Errorf("%w: EOS id %d outside the vocabulary of %d", ErrVocab, eos, n)
	}
	m := &bpeModel{
		pre:          pre,
		merges:       append([]string(nil), merges...),
		rank:         make(map[uint64]bpeMerge, len(merges)),
		ignoreMerges: true, // llama.cpp and Hugging Face do so for Llama 3
	}
	t := &Tokenizer{
		pieces:  append([]string(nil), tokens...),
		surface: make([]string, n),
		scores:  make([]float32, n),
		kinds:   append([]Kind(nil), kinds...),
		bos:     bos, eos: eos, unk: -1,
		bpe: m,
	}
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	for i := range m.byteTok {
		m.byteTok[i] = -1
	}
	for i, s := range tokens {
		switch kinds[i] {
		case Normal:
			b, ok := bytesOfToken(s)
			if !ok {
				return nil, fmt.Errorf("%w: token %d (%q) is not spelled in the byte-level alphabet", ErrVocab, i, s)
			}
			t.surface[i] = b
		case Unknown:
			t.surface[i] = replacement
		case Control:
			t.surface[i] = ""
		case Byte:
			return nil, fmt.Errorf("%w: token %d (%q) has kind byte: byte-level BPE has no byte-fallback tokens", ErrVocab, i, s)
		default:
			return nil, fmt.Errorf("%w: token %d (%q) has kind %d; want normal (1), unknown (2) or control (3)", ErrVocab, i, s, uint8(kinds[i]))
		}
	}
	t.surface[bos] = ""
	t.surface[eos] = ""
	// Normal tokens by text, the lowest id first; BOS and EOS never come
	// from text whatever their kind.
	t.merge = make(map[string]int32, n)
	for i, s := range t.surface {
		if kinds[i] != Normal || s == "" || i == bos || i == eos {
			continue
		}
		if _, dup := t.merge[s]; !dup {
			t.merge[s] = int32(i)
			t.maxLen = max(t.maxLen, len(s))
		}
	}
	for b := range 256 {
		id, ok := t.merge[string([]byte{byte(b)})]
		if !ok {
			return nil, fmt.Errorf("%w: no token for byte 0x%02X (%q), so some text could not be encoded", ErrVocab, b, string(byteRune[b]))
		}
		m.byteTok[b] = id
	}
	if len(merges) > math.MaxInt32 {
		return nil, fmt.Errorf("%w: %d merges", ErrVocab, len(merges))
	}
	for r, s := range merges {
		ls, rs, ok := strings.Cut(s, " ")
		if !ok || ls == "" || rs == "" || strings.Contains(rs, " ") {
			return nil, fmt.Errorf("%w: merge %d (%q) is not two tokens separated by a space", ErrVocab, r, s)
		}
		var ids [3]int32
		for k, part := range [3]string{ls, rs, ls + rs} {
			b, ok := bytesOfToken(part)
			id, known := t.merge[b]
			if !ok || !known {
				return nil, fmt.Errorf("%w: merge %d (%q): %q is not a normal token", ErrVocab, r, s, part)
			}
			ids[k] = id
		}
		key := pairKey(ids[0], ids[1])
		if _, dup := m.rank[key]; !dup {
			m.rank[key] = bpeMerge{rank: int32(r), id: ids[2]}
		}
	}
	return t, nil
}

// Model returns the tokenizer's model, as GGUF's tokenizer.ggml.model
// names it: ModelLlama ("llama") for SentencePiece vocabularies, ModelGPT2
// ("gpt2") for byte-level BPE.
func (t *Tokenizer) Model() string {
	if t.bpe != nil {
		return ModelGPT2
	}
	return ModelLlama
}

// Pre returns a byte-level BPE tokenizer's pre-tokenizer name as given to
// NewBPE ("llama-bpe", or "" when the vocabulary did not name it), and ""
// for a SentencePiece tokenizer.
func (t *Tokenizer) Pre() string {
	if t.bpe == nil {
		return ""
	}
	return t.bpe.pre
}

// Merges returns a fresh copy of a byte-level BPE tokenizer's merges, as
// given to NewBPE, ready to be written as tokenizer.ggml.merges; nil for a
// SentencePiece tokenizer.
func (t *Tokenizer) Merges() []string {
	if t.bpe == nil {
		return nil
	}
	return append([]string(nil), t.bpe.merges...)
}

// encodeBPE is Encode for a byte-level BPE tokenizer. steps counts heap
// operations, for tests of the running time.
func (t *Tokenizer) encodeBPE(text string, bos bool) (ids []int, steps int) {
	m := t.bpe
	ids = make([]int, 0, 2+len(text)/4)
	if bos {
		ids = append(ids, t.bos)
	}
	if len(text) > math.MaxInt32 {
		panic("tokenizer: Encode: text longer than 2 GiB")
	}
	var sym []bpeSym
	var h bpeHeap
	for i := 0; i < len(text); {
		j := nextPiece(text, i)
		piece := text[i:j]
		i = j
		if m.ignoreMerges || len(piece) == 1 {
			if id, ok := t.merge[piece]; ok {
				ids = append(ids, int(id))
				continue
			}
		}
		// One symbol per byte, in a doubly linked list; merged-away
		// symbols get id -1. Indices follow text order.
		if cap(sym) < len(piece) {
			sym = make([]bpeSym, 0, max(len(piece), 64))
			h = make(bpeHeap, 0, len(piece))
		}
		sym = sym[:0]
		for k := 0; k < len(piece); k++ {
			sym = append(sym, bpeSym{id: m.byteTok[piece[k]], prev: int32(k - 1), next: int32(k + 1)})
		}
		sym[len(sym)-1].next = -1
		h = h[:0]
		for k := range int32(len(sym) - 1) {
			if q, ok := m.pair(sym, k, k+1); ok {
				h = append(h, q)
			}
		}
		h.init()
		steps += len(h)
		for len(h) > 0 {
			p := h.pop()
			steps++
			l, r := &sym[p.left], &sym[p.right]
			if l.id != p.lid || r.id != p.rid || l.next != p.right {
				continue // stale: a side has merged since
			}
			l.id = p.id
			r.id = -1
			l.next = r.next
			if r.next >= 0 {
				sym[r.next].prev = p.left
			}
			if l.prev >= 0 {
				if q, ok := m.pair(sym, l.prev, p.left); ok {
					h.push(q)
					steps++
				}
			}
			if l.next >= 0 {
				if q, ok := m.pair(sym, p.left, l.next); ok {
					h.push(q)
					steps++
				}
			}
		}
		for k := int32(0); k >= 0; k = sym[k].next {
			ids = append(ids, int(sym[k].id))
		}
	}
	return ids, steps
}

type bpeSym struct {
	id         int32 // -1 once merged into the left neighbour
	prev, next int32 // -1 at the ends
}

// pair returns the merge candidate of adjacent symbols l and r, if a rule
// merges them.
func (m *bpeModel) pair(sym []bpeSym, l, r int32) (bpePair, bool) {
	mg, ok := m.rank[pairKey(sym[l].id, sym[r].id)]
	return bpePair{rank: mg.rank, left: l, right: r, lid: sym[l].id, rid: sym[r].id, id: mg.id}, ok
}

// bpePair is a queued merge: symbols left and right, which held tokens lid
// and rid when queued, merge by the rule of this rank into token id.
type bpePair struct {
	rank, left, right int32
	lid, rid, id      int32
}

// before orders the heap: lowest rank first, then leftmost.
func (a *bpePair) before(b *bpePair) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.left < b.left)
}

// bpeHeap holds byte-level BPE merge candidates, lowest rank first.
type bpeHeap = heap[bpePair, *bpePair]
