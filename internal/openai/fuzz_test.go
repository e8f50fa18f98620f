package openai_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/internal/openai"
	"github.com/pipeshard/pipeshard/internal/testmodel"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// echoGen emits the prompt's ids back, a few of them: enough to run the
// handlers' output paths on whatever a fuzzed request asks for.
type echoGen struct{}

func (echoGen) Generate(ctx context.Context, r openai.Request, emit func(int) bool) (openai.Result, error) {
	for i := 0; i < min(r.MaxTokens, 4); i++ {
		if !emit(r.Prompt[i%len(r.Prompt)]) {
			return openai.Result{Stopped: "stopped"}, nil
		}
	}
	return openai.Result{Stopped: "length"}, nil
}

// FuzzRequest: any request body gets an answer in OpenAI's shape with a
// 200, 400, 404 or 413, and never a panic.
func FuzzRequest(f *testing.F) {
	_, tokPath := testmodel.Stories15M(f)
	tok, err := tokenizer.Load(tokPath)
	if err != nil {
		f.Fatal(err)
	}
	srv := openai.New(openai.Config{Model: "stories15M", Tokenizer: tok, Context: 256, MaxBody: 1 << 16}, echoGen{})
	for _, s := range []string{
		`{"model": "stories15M", "prompt": "Once upon a time", "max_tokens": 3, "stop": ["a", "ti"], "n": 2}`,
		`{"model": "stories15M", "prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}}`,
		`{"model": "stories15M", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "stream": true}`,
		`{"model": "stories15M", "messages": [{"role": "system", "content": null}, {"role": "user", "content": "x"}], "max_completion_tokens": 2, "stop": "x"}`,
		`{"model": "stories15M", "prompt": ["x"], "temperature": 1e308, "top_p": -0}`,
		`[]`, `null`, `{"prompt": {}}`, "\xff",
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		path := "/v1/completions"
		if chat {
			path = "/v1/chat/completions"
		}
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK:
		case http.StatusBadRequest, http.StatusNotFound, http.StatusRequestEntityTooLarge:
			if !strings.Contains(w.Body.String(), `"error"`) {
				t.Fatalf("%d without an error body: %s", w.Code, w.Body)
			}
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, w.Body)
		}
	})
}
