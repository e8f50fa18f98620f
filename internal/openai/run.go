package openai

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// errClientGone ends a request whose client stopped reading.
var errClientGone = errors.New("openai: client gone")

// choice is one sequence's output as it grows.
type choice struct {
	index   int
	dec     *tokenizer.Decoder
	text    string
	sent    int // bytes of text streamed
	tokens  int // tokens generated, a final EOS included
	done    bool
	finish  string
	started bool // the stream's first chunk of this choice (chat: the role) is out
}

// run generates j's choices and answers w: one JSON response, or a
// stream of chunks.
func (s *Server) run(w http.ResponseWriter, r *http.Request, j *job, model string) {
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	rs := &response{s: s, j: j, model: model, created: s.cfg.Now().Unix()}
	if j.chat {
		rs.id = newID("chatcmpl-")
	} else {
		rs.id = newID("cmpl-")
	}
	if j.stream {
		rs.sse = &sse{w: w, rc: http.NewResponseController(w)}
	}
	rs.choices = make([]*choice, j.n)
	for i := range rs.choices {
		c := &choice{index: i, dec: s.cfg.Tokenizer.NewDecoder()}
		for _, id := range j.prompt {
			c.dec.Next(id) // the output's first space and bytes follow the prompt
		}
		rs.choices[i] = c
	}
	errs := make([]error, j.n)
	var wg sync.WaitGroup
	for i, c := range rs.choices {
		wg.Go(func() {
			req := Request{Prompt: j.prompt, MaxTokens: j.maxTokens, Temperature: j.temperature, TopP: j.topP, Seed: j.seed + uint64(i)}
			res, err := s.gen.Generate(ctx, req, func(id int) bool {
				if err := rs.token(c, id); err != nil {
					cancel(err)
					return false
				}
				return !c.done
			})
			if err != nil {
				errs[i] = err
				cancel(err)
				return
			}
			if err := rs.end(c, res); err != nil {
				cancel(err)
			}
		})
	}
	wg.Wait()
	if err := r.Context().Err(); err != nil {
		s.cfg.Log.Debug("openai: client went away", "id", rs.id, "err", err)
		return
	}
	if err := context.Cause(ctx); err != nil {
		if errors.Is(err, errClientGone) {
			s.cfg.Log.Debug("openai: client stopped reading", "id", rs.id)
			return
		}
		s.cfg.Log.Warn("openai: generation failed", "id", rs.id, "err", err)
		code, body := genError(err)
		if rs.sse != nil && rs.sse.started {
			rs.sse.send(body) // the SDKs raise an error event as an APIError
			return
		}
		writeJSON(w, code, body)
		return
	}
	usage := rs.usage()
	if rs.sse != nil {
		if j.includeUsage {
			if j.chat {
				rs.sse.send(ChatCompletion{ID: rs.id, Object: "chat.completion.chunk", Created: rs.created, Model: model, Choices: []ChatChoice{}, Usage: &usage})
			} else {
				rs.sse.send(Completion{ID: rs.id, Object: "text_completion", Created: rs.created, Model: model, Choices: []CompletionChoice{}, Usage: &usage})
			}
		}
		rs.sse.done()
		return
	}
	if j.chat {
		out := ChatCompletion{ID: rs.id, Object: "chat.completion", Created: rs.created, Model: model, Usage: &usage}
		for _, c := range rs.choices {
			text, fr := c.text, c.finish
			out.Choices = append(out.Choices, ChatChoice{Index: c.index, Message: &ChatMessage{Role: "assistant", Content: &text}, FinishReason: &fr})
		}
		writeJSON(w, http.StatusOK, out)
		return
	}
	out := Completion{ID: rs.id, Object: "text_completion", Created: rs.created, Model: model, Usage: &usage}
	for _, c := range rs.choices {
		fr := c.finish
		out.Choices = append(out.Choices, CompletionChoice{Index: c.index, Text: c.text, FinishReason: &fr})
	}
	writeJSON(w, http.StatusOK, out)
}

// response is one request's output.
type response struct {
	s       *Server
	j       *job
	id      string
	model   string
	created int64
	choices []*choice
	sse     *sse // nil: not streaming

	mu       sync.Mutex
	finished int // choices that have ended
}

func (rs *response) usage() Usage {
	u := Usage{PromptTokens: len(rs.j.prompt)}
	for _, c := range rs.choices {
		u.CompletionTokens += c.tokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

// token adds a generated token to c; it marks c done when the text
// reached a stop sequence.
func (rs *response) token(c *choice, id int) error {
	if c.done {
		return nil
	}
	c.tokens++
	prev := len(c.text)
	c.text += c.dec.Next(id)
	return rs.advance(c, prev)
}

// advance looks for a stop sequence in the text added after prev and
// streams what can no longer be part of one.
func (rs *response) advance(c *choice, prev int) error {
	if k := findStop(c.text, rs.j.stop, prev); k >= 0 {
		c.text, c.done, c.finish = c.text[:k], true, "stop"
		return rs.flush(c, len(c.text))
	}
	return rs.flush(c, len(c.text)-holdBack(c.text, rs.j.stop))
}

// end finishes c after its sequence ended.
func (rs *response) end(c *choice, res Result) error {
	if !c.done {
		prev := len(c.text)
		c.text += c.dec.Flush()
		if err := rs.advance(c, prev); err != nil {
			return err
		}
	}
	if !c.done {
		c.done = true
		switch res.Stopped {
		case "eos", "stopped":
			c.finish = "stop"
		default:
			c.finish = "length"
		}
		if err := rs.flush(c, len(c.text)); err != nil {
			return err
		}
	}
	if rs.sse == nil {
		return nil
	}
	// Without include_usage, the finish chunk of the last choice to end
	// carries the usage (as llama.cpp's server does): the stream ends with
	// usage either way, and clients that read only choices ignore it.
	var u *Usage
	rs.mu.Lock()
	rs.finished++
	if rs.finished == len(rs.choices) && !rs.j.includeUsage {
		x := rs.usage() // every other choice's count is final: it ended before
		u = &x
	}
	rs.mu.Unlock()
	fr := c.finish
	if rs.j.chat {
		return rs.sse.send(ChatCompletion{ID: rs.id, Object: "chat.completion.chunk", Created: rs.created, Model: rs.model,
			Choices: []ChatChoice{{Index: c.index, Delta: &ChatMessage{}, FinishReason: &fr}}, Usage: u})
	}
	return rs.sse.send(Completion{ID: rs.id, Object: "text_completion", Created: rs.created, Model: rs.model,
		Choices: []CompletionChoice{{Index: c.index, Text: "", FinishReason: &fr}}, Usage: u})
}

// flush streams c's text up to upto, if streaming.
func (rs *response) flush(c *choice, upto int) error {
	if rs.sse == nil {
		return nil
	}
	if rs.j.chat && !c.started {
		c.started = true
		empty := ""
		if err := rs.sse.send(ChatCompletion{ID: rs.id, Object: "chat.completion.chunk", Created: rs.created, Model: rs.model,
			Choices: []ChatChoice{{Index: c.index, Delta: &ChatMessage{Role: "assistant", Content: &empty}}}}); err != nil {
			return err
		}
	}
	if upto <= c.sent {
		return nil
	}
	delta := c.text[c.sent:upto]
	c.sent = upto
	if rs.j.chat {
		return rs.sse.send(ChatCompletion{ID: rs.id, Object: "chat.completion.chunk", Created: rs.created, Model: rs.model,
			Choices: []ChatChoice{{Index: c.index, Delta: &ChatMessage{Content: &delta}}}})
	}
	return rs.sse.send(Completion{ID: rs.id, Object: "text_completion", Created: rs.created, Model: rs.model,
		Choices: []CompletionChoice{{Index: c.index, Text: delta}}})
}

// findStop returns where the first stop sequence in text begins, looking
// only at occurrences that end after byte prev (earlier text was
// searched before), or -1.
func findStop(text string, stops []string, prev int) int {
	best := -1
	for _, st := range stops {
		from := max(0, prev-len(st)+1)
		if k := strings.Index(text[from:], st); k >= 0 && (best < 0 || from+k < best) {
			best = from + k
		}
	}
	return best
}

// holdBack returns the length of the longest end of text that begins a
// stop sequence: text that must not be streamed until the next token
// shows whether the stop sequence follows.
func holdBack(text string, stops []string) int {
	n := 0
	for _, st := range stops {
		for l := min(len(st)-1, len(text)); l > n; l-- {
			if strings.HasSuffix(text, st[:l]) {
				n = l
				break
			}
		}
	}
	return n
}
