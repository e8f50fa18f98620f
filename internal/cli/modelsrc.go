package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pipeshard/pipeshard/internal/models"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
)

// loadedModel is a model opened for local use: one or more compiled layer
// ranges that together cover every layer, in order.
type loadedModel struct {
	cfg       ovrt.Config
	models    []*ovrt.Model
	weights   []*ovrt.Weights
	tokenizer string // path of the tokenizer file to try, or ""
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
			dir, err := pullModel(ctx, env, path)
			if err != nil {
				return nil, "", err
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
	w, err := checkpoint.LoadLlama2C(path, start, end)
	return w, filepath.Join(filepath.Dir(path), "tokenizer.bin"), err
}

// openModel opens and compiles a whole model in one piece.
func openModel(ctx context.Context, env *Env, src string, quant ovrt.DType, threads int) (*loadedModel, error) {
	w, tok, err := loadWeights(ctx, env, src, 0, 0)
	if err != nil {
		return nil, err
	}
	lm := &loadedModel{cfg: w.Config, weights: []*ovrt.Weights{w}, tokenizer: tok}
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
