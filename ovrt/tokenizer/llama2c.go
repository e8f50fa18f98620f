package tokenizer

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// InferVocab, passed to Parse as the vocabulary size, accepts however many
// tokens the data holds (for standalone use, without a model).
const InferVocab = 0

// MaxFileSize bounds the tokenizer files Load reads. A llama2.c
// tokenizer.bin for a 128k-token vocabulary is under 2 MiB; the bound only
// stops a model file given by mistake from being read into memory whole.
const MaxFileSize = 64 << 20

// Load reads a llama2.c tokenizer.bin and takes the number of tokens from
// the file itself. Use LoadFor when the model's vocabulary size is known:
// a tokenizer.bin does not store its token count, so only the model can
// tell a complete file from one truncated at a record boundary.
func Load(path string) (*Tokenizer, error) {
	return LoadFor(path, InferVocab)
}

// LoadFor reads a llama2.c tokenizer.bin that must hold exactly vocabSize
// tokens (the model's vocabulary), or any number if vocabSize is
// InferVocab. Errors name the path.
func LoadFor(path string, vocabSize int) (*Tokenizer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s: larger than %d bytes; is it a tokenizer.bin?", ErrMalformed, path, MaxFileSize)
	}
	return parse(path, data, vocabSize)
}

// Parse decodes the contents of a llama2.c tokenizer.bin that must hold
// exactly vocabSize tokens, or any number if vocabSize is InferVocab. data
// may be released after the call.
func Parse(data []byte, vocabSize int) (*Tokenizer, error) {
	return parse("tokenizer.bin", data, vocabSize)
}

// parse implements Parse; name labels the data in errors.
func parse(name string, data []byte, vocabSize int) (*Tokenizer, error) {
	if vocabSize < 0 {
		return nil, fmt.Errorf("%w: %s: the model's vocabulary size %d is negative", ErrMismatch, name, vocabSize)
	}
	if len(data) > MaxFileSize {
		return nil, fmt.Errorf("%w: %s: %d bytes, more than the %d a tokenizer may have", ErrMalformed, name, len(data), MaxFileSize)
	}
	le := binary.LittleEndian
	if len(data) < 4 {
		return nil, fmt.Errorf("%w: %s: %d bytes, shorter than the 4-byte max_token_length header", ErrTruncated, name, len(data))
	}
	maxTok := int64(int32(le.Uint32(data)))
	if maxTok < 0 {
		return nil, fmt.Errorf("%w: %s: max_token_length %d at offset 0 is negative", ErrMalformed, name, maxTok)
	}
	if maxTok > int64(len(data)-4) {
		return nil, fmt.Errorf("%w: %s: max_token_length %d at offset 0 exceeds the file (%d bytes after the header)", ErrMalformed, name, maxTok, len(data)-4)
	}

	// Pass 1: validate every record and count them, allocating nothing.
	count := 0
	for off := 4; off < len(data); count++ {
		left := len(data) - off
		if left < 8 {
			return nil, fmt.Errorf("%w: %s: token %d at offset %d: record header needs 8 bytes, %d left", ErrTruncated, name, count, off, left)
		}
		score := math.Float32frombits(le.Uint32(data[off:]))
		n := int64(int32(le.Uint32(data[off+4:])))
		if f := float64(score); math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %s: token %d at offset %d: score %v is not finite", ErrMalformed, name, count, off, score)
		}
		if n < 0 {
			return nil, fmt.Errorf("%w: %s: token %d at offset %d: length %d is negative", ErrMalformed, name, count, off, n)
		}
		if n > int64(left-8) {
			return nil, fmt.Errorf("%w: %s: token %d at offset %d: length %d exceeds the file (%d bytes left)", ErrTruncated, name, count, off, n, left-8)
		}
		if n > maxTok {
			return nil, fmt.Errorf("%w: %s: token %d at offset %d: length %d exceeds max_token_length %d", ErrMalformed, name, count, off, n, maxTok)
		}
		off += 8 + int(n)
	}
	if vocabSize != InferVocab && count != vocabSize {
		return nil, fmt.Errorf("%w: %s holds %d tokens, the model's vocabulary has %d", ErrMismatch, name, count, vocabSize)
	}
	if count < 3 {
		return nil, fmt.Errorf("%w: %s holds %d tokens; a llama2.c tokenizer needs at least <unk>, <s> and </s>", ErrMalformed, name, count)
	}

	// Pass 2: build. One string holds all the text; pieces are slices of it.
	all := string(data)
	t := &Tokenizer{
		pieces:  make([]string, count),
		surface: make([]string, count),
		scores:  make([]float32, count),
		kinds:   make([]Kind, count),
		bos:     1, eos: 2, unk: 0, // llama2.c's (and SentencePiece's) fixed ids
	}
	for i := range t.byteID {
		t.byteID[i] = -1
	}
	off := 4
	for i := 0; i < count; i++ {
		t.scores[i] = math.Float32frombits(le.Uint32(data[off:]))
		n := int(int32(le.Uint32(data[off+4:])))
		text := all[off+8 : off+8+n]
		off += 8 + n

		switch {
		case i == 0:
			t.kinds[i] = Unknown
			t.pieces[i] = strings.ReplaceAll(text, " ", spaceMark)
			t.surface[i] = replacement
		case i == 1 || i == 2:
			// Stored as "\n<s>\n" and "\n</s>\n" by llama2.c's export.
			t.kinds[i] = Control
			p := strings.Trim(text, "\n")
			if p == "" {
				p = text
			}
			t.pieces[i] = strings.ReplaceAll(p, " ", spaceMark)
		case i < 3+256 && isByteSpelling(text, byte(i-3)):
			b := byte(i - 3)
			t.kinds[i] = Byte
			t.pieces[i] = byteToken(b)
			t.surface[i] = string([]byte{b})
			t.byteID[b] = int32(i)
		default:
			t.kinds[i] = Normal
			t.pieces[i] = strings.ReplaceAll(text, " ", spaceMark)
			t.surface[i] = text
		}
	}
	t.finish()
	return t, nil
}

// isByteSpelling reports whether s spells byte token b in one of the ways
// llama2.c exports have written it: "<0xNN>" (the current export); the
// older export's chr(b) encoded as UTF-8, which is the raw byte for b < 0x80
// and the two-byte encoding of U+0080..U+00FF otherwise (stories15M's file);
// or the raw byte b itself.
func isByteSpelling(s string, b byte) bool {
	if c, ok := parseByteToken(s); ok {
		return c == b
	}
	if len(s) == 1 && s[0] == b {
		return true
	}
	return b >= 0x80 && s == string(rune(b))
}
