package checkpoint

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pipeshard/pipeshard/internal/testmodel"
)

func FuzzLlama2CHeader(f *testing.F) {
	small := llama2cHeader{Dim: 8, HiddenDim: 8, Layers: 2, Heads: 2, KVHeads: 1, Vocab: -3, SeqLen: 2}
	f.Add(llama2cBytes(small, index), 0, 0)
	f.Add(llama2cBytes(small, index), 1, 2)
	f.Add(llama2cBytes(llama2cHeader{Dim: 4, HiddenDim: 2, Layers: 1, Heads: 2, KVHeads: 2, Vocab: 2, SeqLen: 1}, index), 0, 1)
	stories := make([]byte, 64)
	for i, v := range []int32{288, 768, 6, 6, 6, 32000, 256} {
		binary.LittleEndian.PutUint32(stories[4*i:], uint32(v))
	}
	f.Add(stories, 0, 0)
	f.Add([]byte{}, 0, 0)
	f.Fuzz(func(t *testing.T, b []byte, start, end int) {
		w, copied, err := parseLlama2C("fuzz.bin", b, start, end)
		if err != nil {
			return
		}
		if copied && littleEndian {
			t.Error("tensors copied on a little-endian host")
		}
		if err := w.Validate(); err != nil {
			t.Fatalf("loaded weights do not validate: %v", err)
		}
	})
}

func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(safetensorsBytes([]stTensor{
		{"a", "F32", []int64{2, 3}, make([]byte, 24)},
		{"b", "BF16", []int64{5}, make([]byte, 10)},
		{"c", "I64", []int64{}, make([]byte, 8)},
	}, map[string]string{"format": "pt"}))
	f.Add(rawSafetensors(`{"a":{"dtype":"F16","shape":[0],"data_offsets":[0,0]}}`, nil))
	f.Add(rawSafetensors(`{"a":{"dtype":"F32","shape":[4611686018427387904,2],"data_offsets":[0,0]}}`, nil))
	f.Add(rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`, make([]byte, 8)))
	dir := os.Getenv("PIPESHARD_ORACLE")
	if dir == "" {
		dir = filepath.Join(testmodel.RepoRoot(), "..", "shared", "oracle")
	}
	{
		if b, err := os.ReadFile(filepath.Join(dir, "gqa_a", "model.safetensors")); err == nil {
			if n := binary.LittleEndian.Uint64(b); n < uint64(len(b)) {
				f.Add(b[:8+n])
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := ParseSafetensorsHeader(b, int64(len(b)))
		if err != nil {
			return
		}
		n := int64(binary.LittleEndian.Uint64(b))
		var total int64
		for name, ti := range ts {
			size := dtypeSizes[ti.DType]
			if size == 0 {
				t.Fatalf("%q: unknown dtype %q accepted", name, ti.DType)
			}
			if ti.Offset < 8+n || ti.Size < 0 || ti.Offset+ti.Size > int64(len(b)) {
				t.Fatalf("%q: [%d, +%d) outside the data area [%d, %d)", name, ti.Offset, ti.Size, 8+n, len(b))
			}
			if ti.Elements()*size != ti.Size {
				t.Fatalf("%q: shape %v does not match size %d", name, ti.Shape, ti.Size)
			}
			total += ti.Size
		}
		if total != int64(len(b))-8-n {
			t.Fatalf("tensors cover %d of %d data bytes", total, int64(len(b))-8-n)
		}
	})
}

func FuzzHFConfig(f *testing.F) {
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100}`))
	f.Add([]byte(`{"architectures": ["LlamaForCausalLM"], "hidden_size": 128, "intermediate_size": 352, "num_hidden_layers": 4,
		"num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 512, "max_position_embeddings": 512,
		"rms_norm_eps": 1e-05, "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": [2, 3],
		"rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
		"original_max_position_embeddings": 64, "rope_theta": 500000.0, "rope_type": "llama3"}}`))
	f.Add([]byte(`{"model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
		"vocab_size": 100, "rope_theta": 10000, "rope_scaling": {"type": "llama3", "factor": 2, "low_freq_factor": 1,
		"high_freq_factor": 2, "original_max_position_embeddings": 16}}`))
	f.Add([]byte(`{"model_type": "llama", "rope_scaling": {"type": "yarn"}}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseHFConfig("config.json", b)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted config does not validate: %v", err)
		}
		if m.QDim() <= 0 || m.KVDim() <= 0 || m.QDim()%m.KVDim() != 0 {
			t.Fatalf("bad dims %+v", m.Config)
		}
	})
}

// FuzzHFIndex feeds openHFTensors a model.safetensors.index.json: every
// tensor it accepts maps to a plain file name inside the directory.
func FuzzHFIndex(f *testing.F) {
	f.Add([]byte(`{"metadata":{"total_size":16},"weight_map":{"model.embed_tokens.weight":"model-00001-of-00002.safetensors","lm_head.weight":"model-00002-of-00002.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{"a":"../secret.safetensors"}}`))
	f.Add([]byte(`{"weight_map":{}}`))
	f.Add([]byte(`{"weight_map":{"a":""}}`))
	f.Add([]byte(`[]`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, hfIndexFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := openHFTensors(dir)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		if len(s.weightMap) == 0 {
			t.Fatal("accepted an index with no weight_map")
		}
		for name, file := range s.weightMap {
			if filepath.Base(file) != file || !filepath.IsLocal(file) {
				t.Fatalf("tensor %q maps to %q, outside the directory", name, file)
			}
		}
	})
}
