package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards"
	"github.com/pipeshard/pipeshard/shards/gguf"
)

// loadedModel is a model opened for local use: one or more compiled layer
// ranges that together cover every layer, in order.
type loadedModel struct {
	cfg       ovrt.Config
	models    []*ovrt.Model
	weights   []*ovrt.Weights
	tokenizer string               // path of the tokenizer file to try, or ""
	tok       *tokenizer.Tokenizer // a tokenizer the model file carried (GGUF)
	manifest  *shards.Manifest     // when the model came from the store
}

func (l *loadedModel) Close() {
	for _, m := range l.models {
		m.Close()
	}
	for _, w := range l.weights {
		w.Close()
	}
}

// loadWeights reads the layer range [start, end) of the model at path
// (end <= 0: all), whatever its format, and says where its tokenizer is.
// A known model's name (stories15M) that is not a local path is pulled
// into the pipeshard home first, with progress on env.Stderr.
func loadWeights(ctx context.Context, env *Env, path string, start, end int) (*ovrt.Weights, string, error) {
	if _, ok := models.Known[path]; ok {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			dir := models.Dir(models.Home(), path)
			if !models.Present(models.Home(), path) {
				var err error
				if dir, err = pullModel(ctx, env, path); err != nil {
					return nil, "", err
				}
			}
			path = filepath.Join(dir, path+".bin")
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, "", fmt.Errorf("model: %w", err)
	}
	if st.IsDir() {
		w, err := checkpoint.LoadHF(path, start, end)
		return w, filepath.Join(path, "tokenizer.bin"), err
	}
	if sourceFormat(path) == "gguf" {
		w, err := gguf.LoadLlama(path, start, end)
		return w, "", err
	}
	w, err := checkpoint.LoadLlama2C(path, start, end)
	return w, filepath.Join(filepath.Dir(path), "tokenizer.bin"), err
}

// openModel opens and compiles a whole model in one piece: a file, a
// directory, a known name, or a model CID in the store.
func openModel(ctx context.Context, env *Env, src string, quant ovrt.DType, threads int) (*loadedModel, error) {
	if shards.IsCID(src) {
		return openStored(ctx, src, quant, threads)
	}
	w, tok, err := loadWeights(ctx, env, src, 0, 0)
	if err != nil {
		return nil, err
	}
	lm := &loadedModel{cfg: w.Config, weights: []*ovrt.Weights{w}, tokenizer: tok}
	if sourceFormat(src) == "gguf" {
		if lm.tok, err = ggufTokenizer(src); err != nil {
			lm.Close()
			return nil, err
		}
	}
	if quant != ovrt.F32 {
		q, err := w.Quantize(quant)
		if err != nil {
			lm.Close()
			return nil, err
		}
		w = q
	}
	m, err := ovrt.Compile(w, ovrt.WithThreads(threads))
	if err != nil {
		lm.Close()
		return nil, err
	}
	lm.models = []*ovrt.Model{m}
	return lm, nil
}

// openStored opens a model from the store: a one-shard layout of the
// asked weight type if there is one, else the whole model quantized now.
func openStored(ctx context.Context, src string, quant ovrt.DType, threads int) (*loadedModel, error) {
	st, err := shards.Open(models.Home())
	if err != nil {
		return nil, err
	}
	defer st.Close()
	mc, _ := cid.Decode(src)
	m, err := st.Manifest(ctx, mc)
	if err != nil {
		return nil, err
	}
	l, ok := m.Layout(quant.String(), "", 1)
	if !ok {
		if l, ok = m.Layout("", "", 1); !ok {
			return nil, fmt.Errorf("model %s has no one-shard layout; use --shards", src)
		}
	}
	return openShards(ctx, st, m, []string{l.Shards[0].CID}, quant, threads)
}

// openShards loads and chains given shards of model m (nil: read the
// model from the first shard's header).
func openShards(ctx context.Context, st *shards.Store, m *shards.Manifest, cids []string, quant ovrt.DType, threads int) (*loadedModel, error) {
	lm := &loadedModel{}
	modelID := ""
	for _, s := range cids {
		c, err := cid.Decode(strings.TrimSpace(s))
		if err != nil {
			lm.Close()
			return nil, usagef("%q is not a CID: %v", s, err)
		}
		w, h, err := st.LoadShard(ctx, c)
		if err != nil {
			lm.Close()
			return nil, err
		}
		if modelID == "" {
			modelID = h.ModelID
		} else if h.ModelID != modelID {
			lm.Close()
			return nil, fmt.Errorf("%w: shard %s is of model %s, the first shard of %s", shards.ErrMismatch, c, h.ModelID, modelID)
		}
		if quant.String() != h.Quant {
			if w, err = w.Quantize(quant); err != nil {
				lm.Close()
				return nil, err
			}
		}
		mod, err := ovrt.Compile(w, ovrt.WithThreads(threads))
		if err != nil {
			lm.Close()
			return nil, err
		}
		lm.cfg = w.Config
		lm.models = append(lm.models, mod)
	}
	if m != nil && m.ModelID != modelID {
		lm.Close()
		return nil, fmt.Errorf("%w: shards are of model %s, the manifest of %s", shards.ErrMismatch, modelID, m.ModelID)
	}
	lm.manifest = m
	return lm, nil
}

// openShardList chains the shards listed in list; model, if a CID, is the
// manifest they must belong to (and where the tokenizer comes from).
func openShardList(ctx context.Context, model, list string, quant ovrt.DType, threads int) (*loadedModel, error) {
	st, err := shards.Open(models.Home())
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var m *shards.Manifest
	if model != "" {
		c, err := cid.Decode(model)
		if err != nil {
			return nil, usagef("--model with --shards must be the model CID: %v", err)
		}
		if m, err = st.Manifest(ctx, c); err != nil {
			return nil, err
		}
	}
	return openShards(ctx, st, m, strings.Split(list, ","), quant, threads)
}

// ggufTokenizer returns the tokenizer a GGUF file carries, or nil.
func ggufTokenizer(path string) (*tokenizer.Tokenizer, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := gguf.ReadVocab(f)
	if err != nil {
		return nil, nil // no vocabulary: token ids only
	}
	return shards.TokenizerFromVocab(v)
}
