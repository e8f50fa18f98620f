package pipebench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/pipeshard/pipeshard/internal/generate"
	"github.com/pipeshard/pipeshard/internal/spec"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/checkpoint"
	"github.com/pipeshard/pipeshard/ovrt/sample"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// historyPrompts returns n story openings for the n-gram drafter's
// history, none of them the benchmark's prompt: a client's earlier
// requests, which were about other things.
func historyPrompts(n int, exclude string) []string {
	openers := []string{"Once upon a time, %s %s.", "One day, %s %s.", "%s %s.", "Long ago, %s %s."}
	subjects := []string{"Tom", "Sue", "Ben", "a cat", "a dog", "Mia", "Sam", "a bunny", "Anna", "Jack", "a frog", "Lucy",
		"a bear", "Timmy", "Emma", "a bird", "Sara", "Joe", "a little boy", "an old man", "a fish", "a girl named Kim"}
	verbs := []string{"wanted to play", "found a box", "went to the beach", "was very sad", "saw a big tree", "liked to sing",
		"had a red ball", "lost a toy", "made a cake", "met a new friend"}
	var out []string
	for i := 0; len(out) < n && i < len(openers)*len(subjects)*len(verbs); i++ {
		o, s, v := openers[i%len(openers)], subjects[(i/len(openers))%len(subjects)], verbs[(i/(len(openers)*len(subjects))+i)%len(verbs)]
		p := fmt.Sprintf(o, s, v)
		if p != exclude && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// storyModel is stories15M, compiled for one in-process generator, with
// its tokenizer.
type storyModel struct {
	m   *ovrt.Model
	tok *tokenizer.Tokenizer
	cfg ovrt.Config
}

func loadStoryModel(c Config) (*storyModel, error) {
	w, err := checkpoint.LoadLlama2C(c.ModelPath, 0, 0)
	if err != nil {
		return nil, err
	}
	m, err := ovrt.Compile(w, ovrt.WithThreads(c.Threads))
	if err != nil {
		return nil, err
	}
	tok, err := tokenizer.LoadFor(filepath.Join(filepath.Dir(c.ModelPath), "tokenizer.bin"), w.Config.Vocab)
	if err != nil {
		m.Close()
		return nil, err
	}
	return &storyModel{m: m, tok: tok, cfg: w.Config}, nil
}

// story returns the prompt's ids followed by its greedy story (up to
// 200 tokens, ending at the end of the story), and the prompt's length.
func (s *storyModel) story(ctx context.Context, prompt string) ([]int, int, error) {
	loc, err := generate.NewLocal(sample.Params{}, s.m)
	if err != nil {
		return nil, 0, err
	}
	ids := s.tok.Encode(prompt, true)
	res, err := generate.Run(ctx, loc, ids, generate.Options{MaxTokens: 200, EOS: s.cfg.EOS, Context: s.cfg.Context})
	if err != nil {
		return nil, 0, err
	}
	return append(slices.Clone(ids), res.IDs...), len(ids), nil
}

// buildHistory writes to path the n-gram history a client would have
// after answering c.HistoryStories requests for other stories than
// c.Prompt's: what `swarm generate --speculate ngram` keeps in
// HOME/history. It returns the tokens kept.
func buildHistory(ctx context.Context, c Config, path string) (int, error) {
	sm, err := loadStoryModel(c)
	if err != nil {
		return 0, err
	}
	defer sm.m.Close()
	os.Remove(path)
	h := spec.NewHistory(0)
	for i, p := range historyPrompts(c.HistoryStories, c.Prompt) {
		seq, _, err := sm.story(ctx, p)
		if err != nil {
			return 0, fmt.Errorf("history story %d: %w", i, err)
		}
		if err := h.Append(path, seq); err != nil {
			return 0, err
		}
		if (i+1)%50 == 0 {
			c.Log.Info("n-gram history", "stories", i+1, "tokens", h.Len())
		}
	}
	return h.Len(), nil
}
