package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// StreamOptions is a request's stream_options.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// Stop is a request's stop: a string or a list of up to four strings.
type Stop []string

// UnmarshalJSON accepts null, a string or a list of strings.
func (s *Stop) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var one string
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*s = Stop{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("stop must be a string or a list of strings")
	}
	*s = many
	return nil
}

// Prompt is a completion request's prompt: a string, a list of one
// string, or a list of token ids.
type Prompt struct {
	Text string
	IDs  []int // set when the prompt was given as token ids
}

// UnmarshalJSON accepts a string, ["string"] or [id, id, ...].
func (p *Prompt) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		return json.Unmarshal(b, &p.Text)
	}
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("prompt must be a string, a list of one string or a list of token ids")
	}
	if len(raw) == 0 {
		return fmt.Errorf("prompt is empty")
	}
	if t := bytes.TrimSpace(raw[0]); len(t) > 0 && t[0] == '"' {
		if len(raw) != 1 {
			return fmt.Errorf("prompt: a list of %d prompts is not supported; send one prompt per request (n gives several choices)", len(raw))
		}
		return json.Unmarshal(raw[0], &p.Text)
	}
	if t := bytes.TrimSpace(raw[0]); len(t) > 0 && t[0] == '[' {
		return fmt.Errorf("prompt: a list of token-id lists is not supported; send one prompt per request")
	}
	p.IDs = make([]int, len(raw))
	for i, r := range raw {
		if err := json.Unmarshal(r, &p.IDs[i]); err != nil {
			return fmt.Errorf("prompt must be a string, a list of one string or a list of token ids")
		}
	}
	return nil
}

// Content is a chat message's content: a string, or a list of parts of
// which only {"type": "text", "text": ...} is supported.
type Content string

// UnmarshalJSON accepts null, a string or a list of text parts.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		*c = ""
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*c = Content(s)
		return nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return fmt.Errorf("content must be a string or a list of text parts")
	}
	var s string
	for _, p := range parts {
		if p.Type != "text" {
			return fmt.Errorf("content part of type %q is not supported: only text", p.Type)
		}
		s += p.Text
	}
	*c = Content(s)
	return nil
}

// Message is one chat message.
type Message struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
	Name    string  `json:"name,omitempty"`
}

// common holds the parameters both endpoints take.
type common struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Temperature   *float64        `json:"temperature"`
	TopP          *float64        `json:"top_p"`
	Seed          *int64          `json:"seed"`
	Stop          Stop            `json:"stop"`
	N             *int            `json:"n"`
	Stream        bool            `json:"stream"`
	StreamOptions *StreamOptions  `json:"stream_options"`
	User          string          `json:"user"`
	Presence      *float64        `json:"presence_penalty"`
	Frequency     *float64        `json:"frequency_penalty"`
	LogitBias     map[string]any  `json:"logit_bias"`
	Logprobs      json.RawMessage `json:"logprobs"`
}

// CompletionRequest is the body of POST /v1/completions.
type CompletionRequest struct {
	common
	Prompt *Prompt `json:"prompt"`
	Echo   bool    `json:"echo"`
	BestOf *int    `json:"best_of"`
	Suffix *string `json:"suffix"`
}

// ChatRequest is the body of POST /v1/chat/completions.
type ChatRequest struct {
	common
	Messages            []Message       `json:"messages"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	TopLogprobs         *int            `json:"top_logprobs"`
	Tools               json.RawMessage `json:"tools"`
	Functions           json.RawMessage `json:"functions"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

// Usage counts a response's tokens. PromptTokens counts the prompt once
// however many choices there are; CompletionTokens adds up the choices'.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// CompletionChoice is one choice of a completion or a completion chunk.
type CompletionChoice struct {
	Index        int     `json:"index"`
	Text         string  `json:"text"`
	Logprobs     any     `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

// Completion is a completion response, or a chunk of one (Object
// "text_completion" either way, as OpenAI sends).
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint,omitempty"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
}

// ChatMessage is a chat response's message or a chunk's delta.
type ChatMessage struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// ChatChoice is one choice of a chat completion or chunk.
type ChatChoice struct {
	Index        int          `json:"index"`
	Message      *ChatMessage `json:"message,omitempty"`
	Delta        *ChatMessage `json:"delta,omitempty"`
	Logprobs     any          `json:"logprobs"`
	FinishReason *string      `json:"finish_reason"`
}

// ChatCompletion is a chat response (Object "chat.completion") or chunk
// ("chat.completion.chunk").
type ChatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	SystemFingerprint string       `json:"system_fingerprint,omitempty"`
	Choices           []ChatChoice `json:"choices"`
	Usage             *Usage       `json:"usage,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is the response of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"`
	Data   []Model `json:"data"`
}

// ErrorBody is OpenAI's error shape.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes an error.
type ErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}
