package shards

import (
	"testing"
	"unicode/utf8"

	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// gpt2Byte is the character GPT-2's byte-level alphabet spells byte b with.
func gpt2Byte(b int) string {
	if (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff) {
		return string(rune(b))
	}
	n := 0
	for c := range b {
		if !((c >= '!' && c <= '~') || (c >= 0xa1 && c <= 0xac) || (c >= 0xae && c <= 0xff)) {
			n++
		}
	}
	return string(rune(256 + n))
}

// FuzzDecodeTokenizer feeds DecodeTokenizer the bytes of a tokenizer
// artifact as the store returns them, fetched from peers: a llama2.c
// tokenizer.bin or a GGUF vocabulary file (SentencePiece or byte-level BPE).
func FuzzDecodeTokenizer(f *testing.F) {
	sp, err := tokenizer.New([][]byte{[]byte("<unk>"), []byte("<s>"), []byte("</s>"), []byte("\u2581a"), []byte("b")},
		[]float32{0, 0, 0, -1, -2}, []tokenizer.Kind{tokenizer.Unknown, tokenizer.Control, tokenizer.Control, tokenizer.Normal, tokenizer.Normal}, 1, 2, 0)
	if err != nil {
		f.Fatal(err)
	}
	spArt, err := VocabArtifact(VocabOf(sp))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(spArt, 5)

	var toks []string
	var kinds []tokenizer.Kind
	for b := range 256 {
		toks, kinds = append(toks, gpt2Byte(b)), append(kinds, tokenizer.Normal)
	}
	toks = append(toks, "ab", "Ġa", "<|begin_of_text|>", "<|end_of_text|>")
	kinds = append(kinds, tokenizer.Normal, tokenizer.Normal, tokenizer.Control, tokenizer.Control)
	bpe, err := tokenizer.NewBPE(toks, []string{"a b", "Ġ a"}, kinds, len(toks)-2, len(toks)-1, tokenizer.PreLlama3)
	if err != nil {
		f.Fatal(err)
	}
	bpeArt, err := VocabArtifact(VocabOf(bpe))
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []struct {
		b []byte
		n int
	}{{spArt, 5}, {bpeArt, len(toks)}} {
		if _, err := DecodeTokenizer("gguf", seed.b, seed.n); err != nil {
			f.Fatalf("a valid seed does not decode: %v", err)
		}
	}
	f.Add(bpeArt, len(toks))
	f.Add(bpeArt[:len(bpeArt)/2], len(toks))

	f.Add([]byte{}, 0)

	f.Fuzz(func(t *testing.T, b []byte, vocab int) {
		for _, format := range []string{"llama2c", "gguf"} {
			tok, err := DecodeTokenizer(format, b, vocab)
			if err != nil {
				continue
			}
			if format == "gguf" && tok.VocabSize() != vocab {
				t.Fatalf("%s: %d tokens, asked for %d", format, tok.VocabSize(), vocab)
			}
			ids := tok.Encode("a b ü \xff", true)
			for _, id := range ids {
				if tok.CheckID(id) != nil {
					t.Fatalf("%s: Encode produced id %d", format, id)
				}
			}
			if !utf8.ValidString(tok.Decode(append(ids, -1, 1<<20))) {
				t.Fatalf("%s: Decode produced invalid UTF-8", format)
			}
		}
	})
}
