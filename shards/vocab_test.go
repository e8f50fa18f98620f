package shards_test

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/shards/gguf"
)

// byteChar is GPT-2's byte-to-character table, from its definition: the
// printable bytes stand for themselves, the others, in order, for U+0100
// onwards (so a space is "Ġ").
func byteChar(b int) string {
	printable := func(c int) bool { return 33 <= c && c <= 126 || 161 <= c && c <= 172 || 174 <= c }
	if printable(b) {
		return string(rune(b))
	}
	n := 0
	for c := range b {
		if !printable(c) {
			n++
		}
	}
	return string(rune(0x100 + n))
}

// gpt2Vocab is a small Llama 3-style vocabulary: 256 byte tokens, a few
// merged ones, and control tokens at the end.
func gpt2Vocab() gguf.Vocab {
	v := gguf.Vocab{Model: "gpt2", Pre: "llama-bpe", UNK: -1,
		Merges: []string{"Ġ w", "o r", "Ġw or", "l d", "Ġwor ld", "Ã ©", "c a", "ca f", "caf Ã©"}}
	add := func(s string, typ int32) {
		v.Tokens = append(v.Tokens, s)
		v.Types = append(v.Types, typ)
	}
	for b := range 256 {
		add(byteChar(b), gguf.TokenNormal)
	}
	for _, m := range v.Merges {
		add(strings.Replace(m, " ", "", 1), gguf.TokenNormal)
	}
	v.BOS = len(v.Tokens)
	add("<|begin_of_text|>", gguf.TokenControl)
	v.EOS = len(v.Tokens)
	add("<|end_of_text|>", gguf.TokenControl)
	add("<|eot_id|>", gguf.TokenControl)
	return v
}

// llamaVocab is a small SentencePiece vocabulary in GGUF form.
func llamaVocab() gguf.Vocab {
	v := gguf.Vocab{Model: "llama", UNK: 0, BOS: 1, EOS: 2}
	add := func(s string, score float32, typ int32) {
		v.Tokens = append(v.Tokens, s)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	add("<unk>", 0, gguf.TokenUnknown)
	add("<s>", 0, gguf.TokenControl)
	add("</s>", 0, gguf.TokenControl)
	for b := range 256 {
		add(fmt.Sprintf("<0x%02X>", b), 0, gguf.TokenByte)
	}
	for i, p := range []string{"▁", "▁w", "or", "ld", "▁wor", "▁world", "w", "o", "r", "l", "d"} {
		add(p, float32(-i), gguf.TokenNormal)
	}
	return v
}

func TestVocabRoundTrip(t *testing.T) {
	noPre := gpt2Vocab()
	noPre.Pre = ""
	for name, v := range map[string]gguf.Vocab{"gpt2": gpt2Vocab(), "gpt2 without pre": noPre, "llama": llamaVocab()} {
		t.Run(name, func(t *testing.T) {
			tok, err := shards.TokenizerFromVocab(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := shards.VocabOf(tok); !reflect.DeepEqual(got, v) {
				t.Errorf("VocabOf(TokenizerFromVocab(v)) = %+v\nwant %+v", got, v)
			}
			// Through the GGUF artifact pipeshard stores.
			b, err := shards.VocabArtifact(v)
			if err != nil {
				t.Fatal(err)
			}
			back, err := shards.DecodeTokenizer("gguf", b, len(v.Tokens))
			if err != nil {
				t.Fatal(err)
			}
			if got := shards.VocabOf(back); !reflect.DeepEqual(got, v) {
				t.Errorf("through GGUF: %+v\nwant %+v", got, v)
			}
			if _, err := shards.DecodeTokenizer("gguf", b, len(v.Tokens)+1); err == nil || !strings.Contains(err.Error(), "the model") {
				t.Errorf("vocabulary size mismatch: %v", err)
			}
			// Both models spell " world" as one token after BOS.
			world := slices.Index(v.Tokens, "Ġworld")
			if v.Model == "llama" {
				world = slices.Index(v.Tokens, "▁world")
			}
			if got := tok.Encode("world", true); v.Model == "llama" && !slices.Equal(got, []int{v.BOS, world}) {
				t.Errorf("Encode(world) = %v", got)
			}
			if got := tok.Encode(" world", true); v.Model == "gpt2" && !slices.Equal(got, []int{v.BOS, world}) {
				t.Errorf("Encode( world) = %v", got)
			}
		})
	}
}

func TestTokenizerFromVocabGPT2(t *testing.T) {
	v := gpt2Vocab()
	tok, err := shards.TokenizerFromVocab(v)
	if err != nil {
		t.Fatal(err)
	}
	if tok.Model() != "gpt2" || tok.Pre() != "llama-bpe" || tok.VocabSize() != len(v.Tokens) {
		t.Errorf("Model %q, Pre %q, size %d", tok.Model(), tok.Pre(), tok.VocabSize())
	}
	// "café" is a token; " café" is Ġ + café; control text stays text.
	id := func(s string) int { return slices.Index(v.Tokens, s) }
	for _, c := range []struct {
		text string
		want []int
	}{
		{"café", []int{id("cafÃ©")}},
		{" café", []int{id("Ġ"), id("cafÃ©")}},
		{"<|eot_id|>", []int{id("<"), id("|"), id("e"), id("o"), id("t"), id("_"), id("i"), id("d"), id("|"), id(">")}},
	} {
		if got := tok.Encode(c.text, false); !slices.Equal(got, c.want) {
			t.Errorf("Encode(%q) = %v, want %v", c.text, got, c.want)
		}
		if got := tok.Decode(tok.Encode(c.text, true)); got != c.text {
			t.Errorf("Decode(Encode(%q)) = %q", c.text, got)
		}
	}
	// Without token types every token is normal (BOS and EOS still never
	// come from text).
	plain := gpt2Vocab()
	plain.Types = nil
	if tok, err := shards.TokenizerFromVocab(plain); err != nil || tok.Kind(plain.BOS) != 1 || !slices.Equal(tok.Encode(" world", true), []int{plain.BOS, id("Ġworld")}) {
		t.Errorf("no token types: %v", err)
	}
	// A gpt2 vocabulary's unknown id and scores are not used.
	extra := gpt2Vocab()
	extra.UNK = extra.EOS
	extra.Scores = make([]float32, len(extra.Tokens))
	if tok, err := shards.TokenizerFromVocab(extra); err != nil || tok.Unk() != -1 {
		t.Errorf("gpt2 with UNK and scores: %v", err)
	}
}

func TestTokenizerFromVocabErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(v *gguf.Vocab)
		msg  string
	}{
		{"pre", func(v *gguf.Vocab) { v.Pre = "qwen2" }, `pre-tokenizer "qwen2" is not supported`},
		{"model", func(v *gguf.Vocab) { v.Model = "bert" }, `tokenizer model "bert" is not supported`},
		{"types", func(v *gguf.Vocab) { v.Types = v.Types[:3] }, "3 token types"},
		{"merge", func(v *gguf.Vocab) { v.Merges = append(v.Merges, "Ġ q") }, `"Ġq" is not a normal token`},
		{"no bos", func(v *gguf.Vocab) { v.BOS = -1 }, "BOS id -1"},
	} {
		v := gpt2Vocab()
		c.edit(&v)
		_, err := shards.TokenizerFromVocab(v)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: err = %v, want it to contain %q", c.name, err, c.msg)
		}
	}
}
