package openai_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pipeshard/pipeshard/internal/openai"
	"github.com/pipeshard/pipeshard/ovrt/sample"
)

const story = "Once upon a time"

// post sends body as JSON to the fixture's server.
func post(t testing.TB, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// decodeJSON reads resp's body into v, checking the status.
func decodeJSON(t testing.TB, resp *http.Response, code int, v any) {
	t.Helper()
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != code {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, code, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
}

// events reads a server-sent event stream: the data of every event, and
// whether it ended with [DONE]. It checks the framing: "data: " lines
// each followed by a blank line, and nothing after [DONE].
func events(t testing.TB, resp *http.Response) (data []string, done bool) {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q, want text/event-stream", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if done {
			t.Fatalf("%q after [DONE]", line)
		}
		d, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("event line %q: want data: ...", line)
		}
		if !sc.Scan() || sc.Text() != "" {
			t.Fatalf("event %q is not followed by a blank line", line)
		}
		if d == "[DONE]" {
			done = true
			continue
		}
		data = append(data, d)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return data, done
}

// stubGen is for tests of what happens before generation: it must not
// be reached.
type stubGen struct{ t testing.TB }

func (g stubGen) Generate(context.Context, openai.Request, func(int) bool) (openai.Result, error) {
	g.t.Errorf("generation reached")
	return openai.Result{}, errors.New("stub")
}

func TestBadRequests(t *testing.T) {
	f := getFixture(t)
	cfg := f.cfg
	cfg.MaxBody = 4096
	srv := httptest.NewServer(openai.New(cfg, stubGen{t}))
	defer srv.Close()
	long := strings.Repeat("a", 5000)
	for _, tc := range []struct {
		name, method, path, body string
		code                     int
		param, inMsg             string
	}{
		{"bad json", "POST", "/v1/completions", `{"model": "stories15M", "prompt": `, 400, "", "not valid JSON"},
		{"trailing data", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x"} {}`, 400, "", "after its JSON"},
		{"wrong type", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "max_tokens": "ten"}`, 400, "", "not valid JSON"},
		{"no model", "POST", "/v1/completions", `{"prompt": "x"}`, 400, "model", "required"},
		{"unknown model", "POST", "/v1/completions", `{"model": "gpt-4o", "prompt": "x"}`, 404, "model", "not served"},
		{"unknown model chat", "POST", "/v1/chat/completions", `{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}`, 404, "model", "not served"},
		{"no prompt", "POST", "/v1/completions", `{"model": "stories15M"}`, 400, "prompt", "required"},
		{"empty prompt", "POST", "/v1/completions", `{"model": "stories15M", "prompt": ""}`, 400, "prompt", "empty"},
		{"many prompts", "POST", "/v1/completions", `{"model": "stories15M", "prompt": ["a", "b"]}`, 400, "", "not supported"},
		{"token out of range", "POST", "/v1/completions", `{"model": "stories15M", "prompt": [1, 99999]}`, 400, "prompt", "outside the vocabulary"},
		{"temperature", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "temperature": 2.5}`, 400, "temperature", "0 to 2"},
		{"top_p", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "top_p": 0}`, 400, "top_p", "more than 0"},
		{"n zero", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "n": 0}`, 400, "n", "want 1 to 16"},
		{"n large", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "user", "content": "x"}], "n": 17}`, 400, "n", "want 1 to 16"},
		{"max_tokens zero", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "max_tokens": 0}`, 400, "max_tokens", "at least 1"},
		{"max_tokens over context", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "max_tokens": 300}`, 400, "max_tokens", "context of 256"},
		{"max tokens disagree", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3, "max_completion_tokens": 4}`, 400, "max_completion_tokens", "disagree"},
		{"five stops", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "stop": ["a", "b", "c", "d", "e"]}`, 400, "stop", "at most 4"},
		{"stop type", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "stop": 3}`, 400, "", "stop must be"},
		{"logprobs", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "logprobs": 2}`, 400, "logprobs", "not supported"},
		{"penalty", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "presence_penalty": 0.5}`, 400, "presence_penalty", "not supported"},
		{"stream options without stream", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "x", "stream_options": {"include_usage": true}}`, 400, "stream_options", "only allowed"},
		{"no messages", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": []}`, 400, "messages", "must not be empty"},
		{"bad role", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "wizard", "content": "x"}]}`, 400, "messages[0].role", "not supported"},
		{"image part", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]}`, 400, "", "only text"},
		{"tools", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}`, 400, "tools", "not supported"},
		{"json format", "POST", "/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}}`, 400, "response_format", "not supported"},
		{"prompt over context", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "` + strings.Repeat("and ", 300) + `"}`, 400, "messages", "context is 256"},
		{"too large", "POST", "/v1/completions", `{"model": "stories15M", "prompt": "` + long + `"}`, 413, "", "over 4096 bytes"},
		{"not json", "POST", "/v1/completions", `model=stories15M`, 400, "", "Content-Type"},
		{"wrong method", "GET", "/v1/completions", ``, 405, "", "not allowed"},
		{"unknown path", "GET", "/v1/embeddings", ``, 404, "", "no endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(tc.body))
			if tc.body != "" {
				req.Header.Set("Content-Type", "application/json")
				if tc.name == "not json" {
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var e openai.ErrorBody
			decodeJSON(t, resp, tc.code, &e)
			if e.Error.Type == "" || !strings.Contains(e.Error.Message, tc.inMsg) {
				t.Fatalf("error %+v: want a type and a message with %q", e.Error, tc.inMsg)
			}
			if got := ""; e.Error.Param != nil {
				got = *e.Error.Param
				if got != tc.param {
					t.Fatalf("param %q, want %q", got, tc.param)
				}
			} else if tc.param != "" {
				t.Fatalf("no param, want %q", tc.param)
			}
		})
	}
}

func TestModels(t *testing.T) {
	f := getFixture(t)
	resp, err := http.Get(f.srv.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var list openai.ModelList
	decodeJSON(t, resp, 200, &list)
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != "stories15M" || list.Data[0].Object != "model" {
		t.Fatalf("models %+v", list)
	}
	for _, id := range []string{"stories15M", f.st.MC.String()} {
		resp, err := http.Get(f.srv.URL + "/v1/models/" + id)
		if err != nil {
			t.Fatal(err)
		}
		var m openai.Model
		decodeJSON(t, resp, 200, &m)
		if m.ID != "stories15M" {
			t.Fatalf("model %+v", m)
		}
	}
	resp, err = http.Get(f.srv.URL + "/v1/models/nope")
	if err != nil {
		t.Fatal(err)
	}
	var e openai.ErrorBody
	decodeJSON(t, resp, 404, &e)
}

// TestGreedyLikeLocal: completions and chat, streamed and not, give the
// tokens local generation gives, greedy and seeded.
func TestGreedyLikeLocal(t *testing.T) {
	f := getFixture(t)
	prompt := f.tok.Encode(story, true)
	const n = 24
	for _, p := range []sample.Params{{}, {Temp: 0.8, TopP: 0.9, Seed: 7}} {
		ids := f.local(t, prompt, n, p)
		want := f.text(prompt, ids)
		if len(ids) != n {
			t.Fatalf("local run stopped after %d tokens; the test wants %d", len(ids), n)
		}
		params := fmt.Sprintf(`"max_tokens": %d, "temperature": %v, "seed": %d`, n, p.Temp, p.Seed)
		if p.TopP > 0 {
			params += fmt.Sprintf(`, "top_p": %v`, p.TopP)
		}
		t.Run(fmt.Sprintf("temp=%v", p.Temp), func(t *testing.T) {
			var c openai.Completion
			decodeJSON(t, post(t, f.srv.URL+"/v1/completions", `{"model": "stories15M", "prompt": "`+story+`", `+params+`}`), 200, &c)
			if len(c.Choices) != 1 || c.Choices[0].Text != want || *c.Choices[0].FinishReason != "length" || c.Object != "text_completion" {
				t.Fatalf("completion %+v\nwant text %q", c, want)
			}
			if u := c.Usage; u == nil || u.PromptTokens != len(prompt) || u.CompletionTokens != n || u.TotalTokens != len(prompt)+n {
				t.Fatalf("usage %+v", c.Usage)
			}
			var ch openai.ChatCompletion
			decodeJSON(t, post(t, f.srv.URL+"/v1/chat/completions", `{"model": "stories15M", "messages": [{"role": "user", "content": "`+story+`"}], `+params+`}`), 200, &ch)
			if len(ch.Choices) != 1 || *ch.Choices[0].Message.Content != want || ch.Choices[0].Message.Role != "assistant" || ch.Object != "chat.completion" {
				t.Fatalf("chat %+v\nwant content %q", ch, want)
			}
			// Token ids as the prompt give the same.
			idsJSON, _ := json.Marshal(prompt)
			decodeJSON(t, post(t, f.srv.URL+"/v1/completions", `{"model": "`+f.st.MC.String()+`", "prompt": `+string(idsJSON)+`, `+params+`}`), 200, &c)
			if c.Choices[0].Text != want {
				t.Fatalf("completion from ids %q, want %q", c.Choices[0].Text, want)
			}
			// Streamed: the deltas add up to the same text.
			data, done := events(t, post(t, f.srv.URL+"/v1/chat/completions", `{"model": "stories15M", "stream": true, "messages": [{"role": "user", "content": "`+story+`"}], `+params+`}`))
			if !done {
				t.Fatal("stream did not end with [DONE]")
			}
			var got strings.Builder
			for _, d := range data {
				var ck openai.ChatCompletion
				if err := json.Unmarshal([]byte(d), &ck); err != nil {
					t.Fatal(err)
				}
				for _, c := range ck.Choices {
					if c.Delta != nil && c.Delta.Content != nil {
						got.WriteString(*c.Delta.Content)
					}
				}
			}
			if got.String() != want {
				t.Fatalf("streamed %q, want %q", got.String(), want)
			}
		})
	}
}

// chunkText adds up the streamed text of each choice, checking the
// chunks' shape; it returns the texts, finish reasons and the usage, which
// must come in the last chunk: one of its own, with no choices, or the
// finish chunk of the last choice to end.
func chunkText(t testing.TB, data []string, chat bool, n int) (texts, finish []string, usage *openai.Usage) {
	t.Helper()
	texts, finish = make([]string, n), make([]string, n)
	roles := make([]bool, n)
	for _, d := range data {
		if usage != nil {
			t.Fatalf("chunk %s after the usage chunk", d)
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal([]byte(d), &raw); err != nil {
			t.Fatal(err)
		}
		if chat {
			var c openai.ChatCompletion
			json.Unmarshal([]byte(d), &c)
			if c.Object != "chat.completion.chunk" || c.ID == "" {
				t.Fatalf("chunk %s", d)
			}
			if c.Usage != nil {
				usage = c.Usage
				if len(c.Choices) == 0 {
					continue
				}
				if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil {
					t.Fatalf("usage on a chunk that finishes no choice: %s", d)
				}
			}
			for _, ch := range c.Choices {
				if finish[ch.Index] != "" {
					t.Fatalf("choice %d: chunk after its finish: %s", ch.Index, d)
				}
				if ch.Delta == nil {
					t.Fatalf("chat chunk without delta: %s", d)
				}
				if !roles[ch.Index] {
					if ch.Delta.Role != "assistant" {
						t.Fatalf("choice %d: first delta has no role: %s", ch.Index, d)
					}
					roles[ch.Index] = true
				}
				if ch.Delta.Content != nil {
					texts[ch.Index] += *ch.Delta.Content
				}
				if ch.FinishReason != nil {
					finish[ch.Index] = *ch.FinishReason
				}
			}
			continue
		}
		var c openai.Completion
		json.Unmarshal([]byte(d), &c)
		if c.Object != "text_completion" || c.ID == "" {
			t.Fatalf("chunk %s", d)
		}
		if c.Usage != nil {
			usage = c.Usage
			if len(c.Choices) == 0 {
				continue
			}
			if len(c.Choices) != 1 || c.Choices[0].FinishReason == nil {
				t.Fatalf("usage on a chunk that finishes no choice: %s", d)
			}
		}
		for _, ch := range c.Choices {
			if finish[ch.Index] != "" {
				t.Fatalf("choice %d: chunk after its finish: %s", ch.Index, d)
			}
			texts[ch.Index] += ch.Text
			if ch.FinishReason != nil {
				finish[ch.Index] = *ch.FinishReason
			}
		}
	}
	for i := range n {
		if finish[i] == "" {
			t.Fatalf("choice %d never finished", i)
		}
	}
	return texts, finish, usage
}

// TestStreamUsage: a stream ends with the usage. include_usage adds one
// last chunk with the usage and no choices (OpenAI's); without it, the
// last finish chunk carries it.
func TestStreamUsage(t *testing.T) {
	f := getFixture(t)
	prompt := f.tok.Encode(story, true)
	want := f.text(prompt, f.local(t, prompt, 8, sample.Params{}))
	for _, chat := range []bool{false, true} {
		for _, include := range []bool{false, true} {
			t.Run(fmt.Sprintf("chat=%v/include_usage=%v", chat, include), func(t *testing.T) {
				body := fmt.Sprintf(`{"model": "stories15M", "stream": true, "max_tokens": 8, "temperature": 0, "stream_options": {"include_usage": %v}, `, include)
				path := "/v1/completions"
				if chat {
					body += `"messages": [{"role": "user", "content": "` + story + `"}]}`
					path = "/v1/chat/completions"
				} else {
					body += `"prompt": "` + story + `"}`
				}
				data, done := events(t, post(t, f.srv.URL+path, body))
				if !done {
					t.Fatal("no [DONE]")
				}
				texts, finish, usage := chunkText(t, data, chat, 1)
				if texts[0] != want || finish[0] != "length" {
					t.Fatalf("streamed %q (%s), want %q (length)", texts[0], finish[0], want)
				}
				if usage == nil || usage.PromptTokens != len(prompt) || usage.CompletionTokens != 8 || usage.TotalTokens != len(prompt)+8 {
					t.Fatalf("usage %+v", usage)
				}
				var last struct {
					Choices []json.RawMessage `json:"choices"`
				}
				if err := json.Unmarshal([]byte(data[len(data)-1]), &last); err != nil {
					t.Fatal(err)
				}
				if include != (len(last.Choices) == 0) {
					t.Fatalf("include_usage %v, last chunk %s", include, data[len(data)-1])
				}
			})
		}
	}
}

// TestStop: the output ends before the first stop sequence, with
// finish_reason "stop", streamed or not, and no streamed chunk holds any
// of the stop text.
func TestStop(t *testing.T) {
	f := getFixture(t)
	prompt := f.tok.Encode(story, true)
	full := f.text(prompt, f.local(t, prompt, 40, sample.Params{}))
	// Stop at a word in the middle of the greedy text, given as two
	// stops; the earlier occurrence wins.
	words := strings.Fields(full)
	if len(words) < 8 {
		t.Fatalf("greedy text too short: %q", full)
	}
	stopWord := " " + words[len(words)/2]
	at := strings.Index(full, stopWord)
	want := full[:at]
	for _, stops := range []string{`"` + stopWord + `"`, `["zzzz", "` + stopWord + `"]`} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("stop=%s/stream=%v", stops, stream), func(t *testing.T) {
				body := fmt.Sprintf(`{"model": "stories15M", "prompt": "%s", "max_tokens": 40, "temperature": 0, "stop": %s, "stream": %v}`, story, stops, stream)
				resp := post(t, f.srv.URL+"/v1/completions", body)
				if !stream {
					var c openai.Completion
					decodeJSON(t, resp, 200, &c)
					if c.Choices[0].Text != want || *c.Choices[0].FinishReason != "stop" {
						t.Fatalf("text %q (%s), want %q (stop)", c.Choices[0].Text, *c.Choices[0].FinishReason, want)
					}
					if c.Usage.CompletionTokens >= 40 {
						t.Fatalf("generation went on after the stop: %+v", c.Usage)
					}
					return
				}
				data, done := events(t, resp)
				if !done {
					t.Fatal("no [DONE]")
				}
				texts, finish, _ := chunkText(t, data, false, 1)
				if texts[0] != want || finish[0] != "stop" {
					t.Fatalf("streamed %q (%s), want %q (stop)", texts[0], finish[0], want)
				}
				for _, d := range data {
					if strings.Contains(d, strings.TrimSpace(stopWord)) && strings.Count(want, strings.TrimSpace(stopWord)) == 0 {
						t.Fatalf("chunk %s holds the stop text", d)
					}
				}
			})
		}
	}
}

// TestN: n choices, each its own sequence with seed + i, streamed or not.
func TestN(t *testing.T) {
	f := getFixture(t)
	prompt := f.tok.Encode(story, true)
	const n, tokens, seed = 3, 12, 100
	want := make([]string, n)
	for i := range n {
		want[i] = f.text(prompt, f.local(t, prompt, tokens, sample.Params{Temp: 1, Seed: seed + uint64(i)}))
	}
	if want[0] == want[1] && want[1] == want[2] {
		t.Fatalf("the seeds give one text: %q", want[0])
	}
	body := fmt.Sprintf(`{"model": "stories15M", "messages": [{"role": "user", "content": "%s"}], "max_tokens": %d, "temperature": 1, "seed": %d, "n": %d`, story, tokens, seed, n)
	var c openai.ChatCompletion
	decodeJSON(t, post(t, f.srv.URL+"/v1/chat/completions", body+"}"), 200, &c)
	if len(c.Choices) != n {
		t.Fatalf("%d choices", len(c.Choices))
	}
	for i, ch := range c.Choices {
		if ch.Index != i || *ch.Message.Content != want[i] {
			t.Fatalf("choice %d (index %d): %q, want %q", i, ch.Index, *ch.Message.Content, want[i])
		}
	}
	if c.Usage.PromptTokens != len(prompt) || c.Usage.CompletionTokens != n*tokens {
		t.Fatalf("usage %+v", c.Usage)
	}
	data, done := events(t, post(t, f.srv.URL+"/v1/chat/completions", body+`, "stream": true}`))
	if !done {
		t.Fatal("no [DONE]")
	}
	texts, _, usage := chunkText(t, data, true, n)
	for i := range n {
		if texts[i] != want[i] {
			t.Fatalf("streamed choice %d: %q, want %q", i, texts[i], want[i])
		}
	}
	if usage == nil || usage.PromptTokens != len(prompt) || usage.CompletionTokens != n*tokens {
		t.Fatalf("streamed usage %+v", usage)
	}
}
