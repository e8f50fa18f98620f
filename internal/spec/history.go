package spec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
)

// ErrHistory marks a history file that cannot be read.
var ErrHistory = errors.New("spec: bad history file")

// History is a pool of sequences a model produced before: the earlier
// prompts and answers of one client, or text a user gave it. [NGram]
// looks a sequence's suffix up in it as well as in the context, so
// phrases the model said in earlier answers are drafted in later ones
// (retrieval-based drafting, as in REST, He et al. 2024). It needs no
// model, and greedy output does not depend on it: only how many drafts
// are accepted does.
//
// A History keeps its newest Max tokens. It is safe for concurrent use.
type History struct {
	fileMu sync.Mutex // serializes Append's writes (within this process)
	mu     sync.RWMutex
	max    int
	toks   []int32            // sequences, each followed by histSep
	next   map[uint64][]int32 // a bigram's key → the positions right after its occurrences, oldest first
	uni    map[int32][]int32  // a token → the positions right after it, oldest first
}

// histSep ends each sequence in History.toks: no n-gram spans two.
const histSep = -1

// DefaultHistoryTokens is how many tokens a History keeps by default
// (4 bytes each on disk, about 3 times that in memory).
const DefaultHistoryTokens = 1 << 20

// scanLimit bounds the occurrences of a suffix one lookup compares: the
// newest ones.
const scanLimit = 4096

// NewHistory returns an empty history keeping the newest max tokens
// (DefaultHistoryTokens when max <= 0).
func NewHistory(max int) *History {
	if max <= 0 {
		max = DefaultHistoryTokens
	}
	return &History{max: max, next: map[uint64][]int32{}, uni: map[int32][]int32{}}
}

// Len returns the number of tokens held, separators included.
func (h *History) Len() int {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return len(h.toks)
}

// Add remembers seq (a prompt and its answer, say).
func (h *History) Add(seq []int) {
	if len(seq) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.toks)+len(seq)+1 > h.max {
		// Keep the newest half (at least room for seq), and index again.
		keep := max(0, min(len(h.toks), h.max/2-len(seq)-1))
		old := h.toks[len(h.toks)-keep:]
		if i := slices.Index(old, histSep); i >= 0 {
			old = old[i+1:] // start at a sequence boundary
		} else {
			old = nil
		}
		h.toks = nil
		clear(h.next)
		clear(h.uni)
		h.add32(old)
	}
	if len(seq)+1 > h.max {
		seq = seq[len(seq)+1-h.max:]
	}
	s := make([]int32, 0, len(seq)+1)
	for _, t := range seq {
		s = append(s, int32(t))
	}
	h.add32(append(s, histSep))
}

// add32 appends tokens (separators included) and indexes them.
func (h *History) add32(ts []int32) {
	for _, t := range ts {
		h.toks = append(h.toks, t)
		i := int32(len(h.toks)) // the position after t
		if t == histSep {
			continue
		}
		h.uni[t] = append(h.uni[t], i)
		if i >= 2 && h.toks[i-2] != histSep {
			k := bigram(h.toks[i-2], t)
			h.next[k] = append(h.next[k], i)
		}
	}
}

func bigram(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// matches calls f with the position after each of the newest occurrences
// of seq's suffix (its last two tokens, or its last one when seq is
// that short or the pair never occurred) and the length of the match,
// at most maxN. Called with h.mu held for reading.
func (h *History) matches(seq []int, maxN int, f func(at, n int)) {
	L := len(seq)
	if L == 0 {
		return
	}
	var at []int32
	if L >= 2 {
		at = h.next[bigram(int32(seq[L-2]), int32(seq[L-1]))]
	}
	if len(at) == 0 {
		at = h.uni[int32(seq[L-1])]
	}
	for i := len(at) - 1; i >= max(0, len(at)-scanLimit); i-- {
		p := int(at[i])
		n := 0
		for n < maxN && n < L && p-1-n >= 0 && h.toks[p-1-n] == int32(seq[L-1-n]) {
			n++
		}
		f(p, n)
	}
}

// History file format: the magic "PSHIST1\n", then little-endian
// uint32 token ids, each sequence followed by 0xFFFFFFFF.
var histMagic = []byte("PSHIST1\n")

// DecodeHistory parses a history file's bytes. vocab bounds the ids.
func DecodeHistory(b []byte, vocab int) ([]int32, error) {
	if !bytes.HasPrefix(b, histMagic) {
		return nil, fmt.Errorf("%w: no PSHIST1 header", ErrHistory)
	}
	b = b[len(histMagic):]
	if len(b)%4 != 0 {
		// A writer that died mid-append: keep the whole sequences.
		b = b[:len(b)-len(b)%4]
	}
	out := make([]int32, 0, len(b)/4)
	for i := 0; i < len(b); i += 4 {
		v := binary.LittleEndian.Uint32(b[i:])
		switch {
		case v == 0xFFFFFFFF:
			out = append(out, histSep)
		case int64(v) >= int64(vocab):
			return nil, fmt.Errorf("%w: token id %d at byte %d, vocabulary %d", ErrHistory, v, len(histMagic)+i, vocab)
		default:
			out = append(out, int32(v))
		}
	}
	// An unterminated last sequence was cut short: drop it.
	return trimPartial(out), nil
}

// trimPartial drops what follows the last separator.
func trimPartial(ts []int32) []int32 {
	for len(ts) > 0 && ts[len(ts)-1] != histSep {
		ts = ts[:len(ts)-1]
	}
	return ts
}

// LoadHistory reads the history file at path (none yet is an empty
// history), keeping its newest max tokens. A file past max is rewritten
// with only those.
func LoadHistory(path string, vocab, max int) (*History, error) {
	h := NewHistory(max)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, err
	}
	ts, err := DecodeHistory(b, vocab)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(ts) > h.max {
		ts = ts[len(ts)-h.max:]
		if i := slices.Index(ts, histSep); i >= 0 {
			ts = ts[i+1:]
		}
		h.add32(ts)
		return h, h.rewrite(path)
	}
	h.add32(ts)
	return h, nil
}

// Append remembers seq and appends it to the file at path (created with
// its directory if need be), in one write.
func (h *History) Append(path string, seq []int) error {
	h.Add(seq)
	h.fileMu.Lock()
	defer h.fileMu.Unlock()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	var b []byte
	if st.Size() == 0 {
		b = append(b, histMagic...)
	}
	for _, t := range seq {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	b = binary.LittleEndian.AppendUint32(b, 0xFFFFFFFF)
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rewrite replaces the file at path with the history's tokens.
func (h *History) rewrite(path string) error {
	h.mu.RLock()
	b := slices.Clone(histMagic)
	for _, t := range h.toks {
		b = binary.LittleEndian.AppendUint32(b, uint32(t))
	}
	h.mu.RUnlock()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
