package openai

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
)

// ErrUnavailable means no route can serve the model now: the handlers
// answer 503. A Generator wraps it into the errors it returns for that.
var ErrUnavailable = errors.New("openai: model unavailable")

// Request is one sequence to generate.
type Request struct {
	Prompt      []int   // token ids, BOS included
	MaxTokens   int     // at most this many generated tokens
	Temperature float64 // 0: greedy
	TopP        float64 // 0 or 1: no nucleus cut
	Seed        uint64
}

// Result says why a sequence ended: "eos", "length", "context", or
// "stopped" when emit returned false.
type Result struct {
	Stopped string
}

// Generator runs sequences. Generate generates from r.Prompt, calling
// emit with each generated token (the EOS that ends a sequence included)
// once it is final: a token is never taken back after emit saw it. When
// emit returns false, Generate stops and returns Result{Stopped:
// "stopped"} without error. It returns when ctx is done, having released
// what the sequence held. Generate is called from many goroutines at once,
// one per sequence.
type Generator interface {
	Generate(ctx context.Context, r Request, emit func(id int) bool) (Result, error)
}

// Config configures a Server.
type Config struct {
	// Model is the model's id in /v1/models and in responses; requests
	// may name it or one of Aliases.
	Model   string
	Aliases []string
	// Tokenizer encodes prompts and decodes output.
	Tokenizer *tokenizer.Tokenizer
	// Context is the model's context length: prompt plus output.
	Context int
	// ChatTemplate, if set, turns chat messages into the prompt text
	// (BOS is added by encoding). Nil: the contents joined by "\n".
	ChatTemplate func([]Message) (string, error)
	// MaxBody bounds a request body in bytes (default 1 MiB); MaxN
	// bounds n (default 16).
	MaxBody int64
	MaxN    int
	Log     *slog.Logger
	Now     func() time.Time
	Created time.Time // the model's created time in /v1/models (default: the server's start)
}

// Server is the API's http.Handler.
type Server struct {
	cfg Config
	gen Generator
	mux *http.ServeMux
}

// Defaults for a chat request without max_tokens and for a completion
// request without it (OpenAI's).
const defaultCompletionTokens = 16

// New returns a server of cfg's model over gen.
func New(cfg Config, gen Generator) *Server {
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = 1 << 20
	}
	if cfg.MaxN <= 0 {
		cfg.MaxN = 16
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Created.IsZero() {
		cfg.Created = cfg.Now()
	}
	s := &Server{cfg: cfg, gen: gen, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /v1/models", s.models)
	s.mux.HandleFunc("GET /v1/models/{id...}", s.model)
	s.mux.HandleFunc("POST /v1/completions", s.completions)
	s.mux.HandleFunc("POST /v1/chat/completions", s.chat)
	s.mux.HandleFunc("/", s.notFound)
	return s
}

// ServeHTTP answers the API's paths; a known path with the wrong method
// gets 405 and an unknown one 404, both in OpenAI's error shape.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !methodOK(r) {
		writeError(w, http.StatusMethodNotAllowed, "invalid_request_error", "", "method_not_allowed",
			fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
		return
	}
	s.mux.ServeHTTP(w, r)
}

func methodOK(r *http.Request) bool {
	switch {
	case r.URL.Path == "/v1/models" || strings.HasPrefix(r.URL.Path, "/v1/models/"):
		return r.Method == http.MethodGet || r.Method == http.MethodHead
	case r.URL.Path == "/v1/completions" || r.URL.Path == "/v1/chat/completions":
		return r.Method == http.MethodPost
	}
	return true
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, "invalid_request_error", "", "not_found", fmt.Sprintf("no endpoint %s %s", r.Method, r.URL.Path))
}

func (s *Server) modelEntry() Model {
	return Model{ID: s.cfg.Model, Object: "model", Created: s.cfg.Created.Unix(), OwnedBy: "pipeshard"}
}

func (s *Server) models(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, ModelList{Object: "list", Data: []Model{s.modelEntry()}})
}

func (s *Server) model(w http.ResponseWriter, r *http.Request) {
	if !s.known(r.PathValue("id")) {
		s.unknownModel(w, r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, s.modelEntry())
}

func (s *Server) known(id string) bool {
	if id == s.cfg.Model {
		return true
	}
	for _, a := range s.cfg.Aliases {
		if id == a {
			return true
		}
	}
	return false
}

func (s *Server) unknownModel(w http.ResponseWriter, id string) {
	writeError(w, http.StatusNotFound, "invalid_request_error", "model", "model_not_found",
		fmt.Sprintf("the model %q is not served here; this server serves %q (GET /v1/models)", id, s.cfg.Model))
}

// decode reads a JSON body into v, answering the error itself.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", fmt.Sprintf("Content-Type %q: want application/json", ct))
		return false
	}
	body := http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "", "request_too_large",
				fmt.Sprintf("request body over %d bytes", tooBig.Limit))
			return false
		}
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "invalid_json", "the body is not valid JSON for this endpoint: "+err.Error())
		return false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "", "invalid_json", "the body has data after its JSON object")
		return false
	}
	return true
}

// badParam is a 400 about one parameter.
type badParam struct {
	param, msg string
}

func (e *badParam) Error() string { return e.msg }

func paramErr(param, format string, args ...any) error {
	return &badParam{param: param, msg: fmt.Sprintf(format, args...)}
}

// job is a validated request, ready to run.
type job struct {
	chat         bool
	prompt       []int
	maxTokens    int
	temperature  float64
	topP         float64
	seed         uint64
	stop         []string
	n            int
	stream       bool
	includeUsage bool
}

// params validates the parameters both endpoints take; maxTokens is the
// value already chosen from the endpoint's fields (nil: unset).
func (s *Server) params(c *common, maxTokens *int, chat bool, prompt []int) (*job, error) {
	j := &job{chat: chat, prompt: prompt, temperature: 1, n: 1, stream: c.Stream}
	if len(prompt) > s.cfg.Context {
		return nil, paramErr("messages", "the prompt is %d tokens; the model's context is %d", len(prompt), s.cfg.Context)
	}
	room := s.cfg.Context - len(prompt)
	switch {
	case maxTokens == nil && chat:
		j.maxTokens = room
	case maxTokens == nil:
		j.maxTokens = min(defaultCompletionTokens, room)
	case *maxTokens < 1:
		return nil, paramErr("max_tokens", "max_tokens %d: want at least 1", *maxTokens)
	case *maxTokens > room:
		return nil, paramErr("max_tokens", "max_tokens %d with a prompt of %d tokens exceeds the model's context of %d tokens (at most %d)",
			*maxTokens, len(prompt), s.cfg.Context, room)
	default:
		j.maxTokens = *maxTokens
	}
	if j.maxTokens < 1 {
		return nil, paramErr("messages", "the prompt is %d tokens and fills the model's context of %d", len(prompt), s.cfg.Context)
	}
	if t := c.Temperature; t != nil {
		if math.IsNaN(*t) || *t < 0 || *t > 2 {
			return nil, paramErr("temperature", "temperature %g: want 0 to 2", *t)
		}
		j.temperature = *t
	}
	if p := c.TopP; p != nil {
		if math.IsNaN(*p) || *p <= 0 || *p > 1 {
			return nil, paramErr("top_p", "top_p %g: want more than 0 and at most 1", *p)
		}
		j.topP = *p
	}
	if c.Seed != nil {
		j.seed = uint64(*c.Seed)
	} else {
		j.seed = rand.Uint64()
	}
	if len(c.Stop) > 4 {
		return nil, paramErr("stop", "%d stop sequences: at most 4", len(c.Stop))
	}
	for _, st := range c.Stop {
		if st == "" {
			return nil, paramErr("stop", "a stop sequence is empty")
		}
	}
	j.stop = c.Stop
	if c.N != nil {
		if *c.N < 1 || *c.N > s.cfg.MaxN {
			return nil, paramErr("n", "n %d: want 1 to %d", *c.N, s.cfg.MaxN)
		}
		j.n = *c.N
	}
	if c.StreamOptions != nil {
		if !c.Stream {
			return nil, paramErr("stream_options", "stream_options is only allowed with stream: true")
		}
		j.includeUsage = c.StreamOptions.IncludeUsage
	}
	for name, v := range map[string]*float64{"presence_penalty": c.Presence, "frequency_penalty": c.Frequency} {
		if v != nil && *v != 0 {
			return nil, paramErr(name, "%s is not supported (only 0)", name)
		}
	}
	if len(c.LogitBias) > 0 {
		return nil, paramErr("logit_bias", "logit_bias is not supported")
	}
	if l := strings.TrimSpace(string(c.Logprobs)); l != "" && l != "null" && l != "false" && l != "0" {
		return nil, paramErr("logprobs", "logprobs are not supported")
	}
	return j, nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req CompletionRequest
	if s.decode(w, r, &req) {
		s.serve(w, r, req.Model, func() (*job, error) { return s.completionJob(&req) })
	}
}

// serve checks a decoded request's model, builds its job and runs it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, model string, build func() (*job, error)) {
	if model == "" {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "model", "", "model is required")
		return
	}
	if !s.known(model) {
		s.unknownModel(w, model)
		return
	}
	j, err := build()
	if err != nil {
		s.paramError(w, err)
		return
	}
	s.run(w, r, j, model)
}

func (s *Server) completionJob(req *CompletionRequest) (*job, error) {
	switch {
	case req.Prompt == nil:
		return nil, paramErr("prompt", "prompt is required")
	case req.Echo:
		return nil, paramErr("echo", "echo is not supported")
	case req.Suffix != nil && *req.Suffix != "":
		return nil, paramErr("suffix", "suffix is not supported")
	case req.BestOf != nil && *req.BestOf != 1 && (req.N == nil || *req.BestOf != *req.N):
		return nil, paramErr("best_of", "best_of is not supported (only 1 or equal to n)")
	}
	ids := req.Prompt.IDs
	if ids == nil {
		if req.Prompt.Text == "" {
			return nil, paramErr("prompt", "prompt is empty")
		}
		ids = s.cfg.Tokenizer.Encode(req.Prompt.Text, true)
	} else {
		for _, id := range ids {
			if id < 0 || id >= s.cfg.Tokenizer.VocabSize() {
				return nil, paramErr("prompt", "token id %d is outside the vocabulary of %d", id, s.cfg.Tokenizer.VocabSize())
			}
		}
	}
	return s.params(&req.common, req.MaxTokens, false, ids)
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req ChatRequest
	if s.decode(w, r, &req) {
		s.serve(w, r, req.Model, func() (*job, error) { return s.chatJob(&req) })
	}
}

func (s *Server) chatJob(req *ChatRequest) (*job, error) {
	if len(req.Messages) == 0 {
		return nil, paramErr("messages", "messages is required and must not be empty")
	}
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant":
		case "":
			return nil, paramErr(fmt.Sprintf("messages[%d].role", i), "messages[%d] has no role", i)
		default:
			return nil, paramErr(fmt.Sprintf("messages[%d].role", i), "messages[%d]: role %q is not supported (system, developer, user or assistant)", i, m.Role)
		}
	}
	if t := strings.TrimSpace(string(req.Tools)); t != "" && t != "null" && t != "[]" {
		return nil, paramErr("tools", "tools are not supported")
	}
	if t := strings.TrimSpace(string(req.Functions)); t != "" && t != "null" && t != "[]" {
		return nil, paramErr("functions", "functions are not supported")
	}
	if req.ResponseFormat != nil && req.ResponseFormat.Type != "" && req.ResponseFormat.Type != "text" {
		return nil, paramErr("response_format", "response_format %q is not supported (only text)", req.ResponseFormat.Type)
	}
	if req.TopLogprobs != nil && *req.TopLogprobs != 0 {
		return nil, paramErr("top_logprobs", "top_logprobs is not supported")
	}
	text, err := s.chatPrompt(req.Messages)
	if err != nil {
		return nil, paramErr("messages", "%v", err)
	}
	if text == "" {
		return nil, paramErr("messages", "the messages have no text")
	}
	max := req.MaxTokens
	if req.MaxCompletionTokens != nil {
		if max != nil && *max != *req.MaxCompletionTokens {
			return nil, paramErr("max_completion_tokens", "max_tokens %d and max_completion_tokens %d disagree", *max, *req.MaxCompletionTokens)
		}
		max = req.MaxCompletionTokens
	}
	return s.params(&req.common, max, true, s.cfg.Tokenizer.Encode(text, true))
}

// chatPrompt is the prompt text of messages: the chat template's, or
// their contents joined by "\n".
func (s *Server) chatPrompt(msgs []Message) (string, error) {
	if s.cfg.ChatTemplate != nil {
		return s.cfg.ChatTemplate(msgs)
	}
	return PlainChat(msgs), nil
}

// PlainChat is the prompt of a chat for a model without a chat template:
// the messages' contents in order, joined by "\n" (roles and names are
// not part of it). A model trained on plain text continues it.
func PlainChat(msgs []Message) string {
	parts := make([]string, len(msgs))
	for i, m := range msgs {
		parts[i] = string(m.Content)
	}
	return strings.Join(parts, "\n")
}

func (s *Server) paramError(w http.ResponseWriter, err error) {
	var bp *badParam
	if errors.As(err, &bp) {
		writeError(w, http.StatusBadRequest, "invalid_request_error", bp.param, "", bp.msg)
		return
	}
	writeError(w, http.StatusBadRequest, "invalid_request_error", "", "", err.Error())
}

func newID(prefix string) string {
	var b [12]byte
	crand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, typ, param, errCode, msg string) {
	writeJSON(w, code, errorBody(typ, param, errCode, msg))
}

func errorBody(typ, param, code, msg string) ErrorBody {
	e := ErrorBody{Error: ErrorDetail{Message: msg, Type: typ}}
	if param != "" {
		e.Error.Param = &param
	}
	if code != "" {
		e.Error.Code = &code
	}
	return e
}

// genError is the status and body for an error from the generator.
func genError(err error) (int, ErrorBody) {
	if errors.Is(err, ErrUnavailable) {
		return http.StatusServiceUnavailable, errorBody("server_error", "", "model_unavailable", err.Error())
	}
	return http.StatusInternalServerError, errorBody("server_error", "", "generation_failed", err.Error())
}
