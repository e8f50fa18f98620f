package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
)

// llama2cVocab reads llama2.c's tokenizer.bin and returns it with the
// token strings llama.cpp expects: "<unk>", "<s>", "</s>", "<0xNN>" for the
// byte tokens 3-258 (stored there as raw bytes, which collide with
// ordinary pieces) and "▁" for spaces.
func llama2cVocab(t testing.TB, path string, n int) Vocab {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v := Vocab{Model: "llama", BOS: 1, EOS: 2, UNK: 0}
	off := 4 // max_token_length
	for i := range n {
		if off+8 > len(b) {
			t.Fatalf("tokenizer.bin ends at token %d", i)
		}
		score := math.Float32frombits(binary.LittleEndian.Uint32(b[off:]))
		ln := int(binary.LittleEndian.Uint32(b[off+4:]))
		off += 8
		if ln < 0 || off+ln > len(b) {
			t.Fatalf("token %d: length %d", i, ln)
		}
		piece := string(b[off : off+ln])
		off += ln
		typ := TokenNormal
		switch {
		case i == 0:
			piece, typ = "<unk>", TokenUnknown
		case i == 1:
			piece, typ = "<s>", TokenControl
		case i == 2:
			piece, typ = "</s>", TokenControl
		case i < 3+256:
			piece, typ = fmt.Sprintf("<0x%02X>", i-3), TokenByte
		default:
			piece = strings.ReplaceAll(piece, " ", "▁")
		}
		v.Tokens = append(v.Tokens, piece)
		v.Scores = append(v.Scores, score)
		v.Types = append(v.Types, typ)
	}
	if off != len(b) {
		t.Fatalf("tokenizer.bin has %d bytes after %d tokens", len(b)-off, n)
	}
	return v
}

func TestStories15M(t *testing.T) {
	modelPath, tokPath := testmodel.Stories15M(t)
	want, err := checkpoint.LoadLlama2C(modelPath, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer want.Close()
	c := want.Config
	if c.Dim != 288 || c.Layers != 6 || c.Vocab != 32000 || !c.TiedHead {
		t.Fatalf("unexpected stories15M config %+v", c)
	}
	vocab := llama2cVocab(t, tokPath, c.Vocab)
	if vocab.Tokens[3+'!'] != "<0x21>" || vocab.Tokens[13] != "<0x0A>" {
		t.Errorf("byte tokens %q %q", vocab.Tokens[3+'!'], vocab.Tokens[13])
	}

	path := filepath.Join(t.TempDir(), "stories15M.gguf")
	if err := WriteLlamaFile(path, "stories15M", want, vocab); err != nil {
		t.Fatal(err)
	}

	f := parseFile(t, path)
	cfg, err := ReadLlamaConfig(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, c) {
		t.Errorf("config:\n got %+v\nwant %+v", cfg, c)
	}
	v, err := ReadVocab(f)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v, vocab) {
		t.Errorf("vocabulary differs")
	}
	if name, _ := f.String("general.name"); name != "stories15M" {
		t.Errorf("general.name %q", name)
	}

	got, err := LoadLlama(path, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	checkWeights(t, got, want)
	if err := got.Close(); err != nil {
		t.Error(err)
	}
	// A middle shard, and the last one (tied head from the embedding).
	for _, r := range [][2]int{{2, 4}, {4, 6}} {
		s, err := LoadLlama(path, r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		checkWeights(t, s, want)
		s.Close()
	}
	crossCheck(t, path, c)
}
