package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/pipeshard/pipeshard/ovrt"
)

// hfConfig is the part of a Hugging Face config.json the loader reads.
// Pointers tell absent (or null) fields from zero values.
type hfConfig struct {
	ModelType             *string         `json:"model_type"`
	Architectures         []string        `json:"architectures"`
	HiddenSize            *int            `json:"hidden_size"`
	IntermediateSize      *int            `json:"intermediate_size"`
	NumHiddenLayers       *int            `json:"num_hidden_layers"`
	NumAttentionHeads     *int            `json:"num_attention_heads"`
	NumKeyValueHeads      *int            `json:"num_key_value_heads"`
	HeadDim               *int            `json:"head_dim"`
	VocabSize             *int            `json:"vocab_size"`
	MaxPositionEmbeddings *int            `json:"max_position_embeddings"`
	RMSNormEps            *float64        `json:"rms_norm_eps"`
	RopeTheta             *float64        `json:"rope_theta"`
	RopeScaling           json.RawMessage `json:"rope_scaling"`
	RopeParameters        json.RawMessage `json:"rope_parameters"`
	TieWordEmbeddings     *bool           `json:"tie_word_embeddings"`
	BOSTokenID            json.RawMessage `json:"bos_token_id"`
	EOSTokenID            json.RawMessage `json:"eos_token_id"`
	HiddenAct             *string         `json:"hidden_act"`
	AttentionBias         *bool           `json:"attention_bias"`
	MLPBias               *bool           `json:"mlp_bias"`
}

// hfDefaults are LlamaConfig's defaults for the optional fields.
const (
	hfDefaultContext = 2048
	hfDefaultNormEps = 1e-6
	hfDefaultTheta   = 10000
	hfDefaultBOS     = 1
	hfDefaultEOS     = 2
)

// hfModel is what config.json says beyond ovrt.Config.
type hfModel struct {
	ovrt.Config
	// TieWordEmbeddings is config.json's tie_word_embeddings (default
	// false); the head is also tied when lm_head.weight is absent.
	TieWordEmbeddings bool
}

// parseHFConfig reads a config.json (named name in errors).
func parseHFConfig(name string, b []byte) (hfModel, error) {
	var m hfModel
	var hc hfConfig
	if err := json.Unmarshal(b, &hc); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field == "":
			return m, fmt.Errorf("%w: %s: a JSON %s, not an object", ErrConfig, name, te.Value)
		case errors.As(err, &te):
			return m, fmt.Errorf("%w: %s: %s is a JSON %s, want %v", ErrConfig, name, te.Field, te.Value, jsonKind(te.Type))
		}
		return m, fmt.Errorf("%w: %s: %v", ErrConfig, name, err)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrConfig, name}, args...)...)
	}
	unsupported := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrUnsupported, name}, args...)...)
	}

	// Architecture.
	switch {
	case hc.ModelType == nil && hc.Architectures == nil:
		return m, bad("neither model_type nor architectures is set; want a Llama model")
	case hc.ModelType != nil && *hc.ModelType != "llama":
		return m, unsupported("model_type %q (only \"llama\" is supported)", *hc.ModelType)
	case hc.Architectures != nil && !slices.Contains(hc.Architectures, "LlamaForCausalLM"):
		return m, unsupported("architectures %q (only LlamaForCausalLM is supported)", hc.Architectures)
	case hc.HiddenAct != nil && *hc.HiddenAct != "silu":
		return m, unsupported("hidden_act %q (only silu is supported)", *hc.HiddenAct)
	case hc.AttentionBias != nil && *hc.AttentionBias:
		return m, unsupported("attention_bias true")
	case hc.MLPBias != nil && *hc.MLPBias:
		return m, unsupported("mlp_bias true")
	}

	// Required sizes, each checked against the runtime's bounds so that
	// nothing below overflows.
	required := func(field string, p *int, max int) (int, error) {
		if p == nil {
			return 0, bad("%s is missing", field)
		}
		if *p <= 0 || *p > max {
			return 0, bad("%s %d out of range (1..%d)", field, *p, max)
		}
		return *p, nil
	}
	optional := func(field string, p *int, def, max int) (int, error) {
		if p == nil {
			return def, nil
		}
		return required(field, p, max)
	}
	var err error
	c := &m.Config
	if c.Dim, err = required("hidden_size", hc.HiddenSize, maxDim); err != nil {
		return m, err
	}
	if c.HiddenDim, err = required("intermediate_size", hc.IntermediateSize, maxDim); err != nil {
		return m, err
	}
	if c.Layers, err = required("num_hidden_layers", hc.NumHiddenLayers, maxLayers); err != nil {
		return m, err
	}
	if c.Heads, err = required("num_attention_heads", hc.NumAttentionHeads, maxDim); err != nil {
		return m, err
	}
	if c.KVHeads, err = optional("num_key_value_heads", hc.NumKeyValueHeads, c.Heads, c.Heads); err != nil {
		return m, err
	}
	if c.Heads%c.KVHeads != 0 {
		return m, bad("num_attention_heads %d is not divisible by num_key_value_heads %d", c.Heads, c.KVHeads)
	}
	if hc.HeadDim == nil && c.Dim%c.Heads != 0 {
		return m, bad("hidden_size %d is not divisible by num_attention_heads %d (and head_dim is not set)", c.Dim, c.Heads)
	}
	if c.HeadDim, err = optional("head_dim", hc.HeadDim, c.Dim/c.Heads, maxDim); err != nil {
		return m, err
	}
	if c.HeadDim%2 != 0 {
		return m, bad("head_dim %d is odd; RoPE rotates pairs", c.HeadDim)
	}
	if c.QDim() > maxDim {
		return m, bad("num_attention_heads %d * head_dim %d exceeds %d", c.Heads, c.HeadDim, maxDim)
	}
	if c.Vocab, err = required("vocab_size", hc.VocabSize, maxVocab); err != nil {
		return m, err
	}
	if c.Context, err = optional("max_position_embeddings", hc.MaxPositionEmbeddings, hfDefaultContext, maxContext); err != nil {
		return m, err
	}
	c.NormEps = hfDefaultNormEps
	if hc.RMSNormEps != nil {
		c.NormEps = *hc.RMSNormEps
	}
	if !(c.NormEps > 0 && c.NormEps < 1) {
		return m, bad("rms_norm_eps %g out of range (0, 1)", c.NormEps)
	}
	if hc.TieWordEmbeddings != nil {
		m.TieWordEmbeddings = *hc.TieWordEmbeddings
	}
	c.TiedHead = m.TieWordEmbeddings

	// Special tokens.
	if c.BOS, err = tokenID(name, "bos_token_id", hc.BOSTokenID, hfDefaultBOS, c.Vocab); err != nil {
		return m, err
	}
	if c.EOS, err = tokenID(name, "eos_token_id", hc.EOSTokenID, hfDefaultEOS, c.Vocab); err != nil {
		return m, err
	}

	// RoPE.
	if c.RopeTheta, c.RopeScaling, err = hfRope(name, &hc); err != nil {
		return m, err
	}

	if err := c.Validate(); err != nil {
		return m, fmt.Errorf("%w: %s: %w", ErrConfig, name, err)
	}
	return m, nil
}

// tokenID reads a special token id: a number, or a list whose first
// element is used (Llama 3.1 lists several end-of-sequence ids). Absent or
// null means def.
func tokenID(name, field string, raw json.RawMessage, def, vocab int) (int, error) {
	if isNull(raw) {
		return def, nil
	}
	var id int
	if err := json.Unmarshal(raw, &id); err != nil {
		var ids []int
		if err := json.Unmarshal(raw, &ids); err != nil || len(ids) == 0 {
			return 0, fmt.Errorf("%w: %s: %s %s is neither a token id nor a non-empty list of them", ErrConfig, name, field, raw)
		}
		id = ids[0]
	}
	if id < 0 || id >= vocab {
		return 0, fmt.Errorf("%w: %s: %s %d outside the vocabulary of %d", ErrConfig, name, field, id, vocab)
	}
	return id, nil
}

// jsonKind names what JSON a Go type accepts, for error messages.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64:
		return "integer"
	case reflect.Float64:
		return "number"
	case reflect.Bool:
		return "boolean"
	case reflect.String:
		return "string"
	case reflect.Slice:
		return "list"
	}
	return t.String()
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// hfRopeParams is a rope_parameters or rope_scaling object.
type hfRopeParams struct {
	RopeType        *string  `json:"rope_type"`
	Type            *string  `json:"type"` // older spelling of rope_type
	RopeTheta       *float64 `json:"rope_theta"`
	Factor          *float64 `json:"factor"`
	LowFreqFactor   *float64 `json:"low_freq_factor"`
	HighFreqFactor  *float64 `json:"high_freq_factor"`
	OriginalContext *int     `json:"original_max_position_embeddings"`
}

// hfRope finds the RoPE base and scaling. The base is the top-level
// rope_theta or rope_parameters.rope_theta (transformers 5); the scaling
// is the top-level rope_scaling or rope_parameters. Both places may be
// filled, but not with different values.
func hfRope(name string, hc *hfConfig) (float64, *ovrt.RopeScaling, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: "+format, append([]any{ErrConfig, name}, args...)...)
	}
	var params, legacy *hfRopeParams
	decode := func(field string, raw json.RawMessage) (*hfRopeParams, error) {
		if isNull(raw) {
			return nil, nil
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields() // an unknown key may change the frequencies
		var p hfRopeParams
		if err := dec.Decode(&p); err != nil {
			return nil, fmt.Errorf("%w: %s: %s: %v", ErrUnsupported, name, field, err)
		}
		return &p, nil
	}
	var err error
	if params, err = decode("rope_parameters", hc.RopeParameters); err != nil {
		return 0, nil, err
	}
	if legacy, err = decode("rope_scaling", hc.RopeScaling); err != nil {
		return 0, nil, err
	}

	theta := float64(hfDefaultTheta)
	switch {
	case hc.RopeTheta != nil && params != nil && params.RopeTheta != nil && *hc.RopeTheta != *params.RopeTheta:
		return 0, nil, bad("rope_theta %g disagrees with rope_parameters.rope_theta %g", *hc.RopeTheta, *params.RopeTheta)
	case hc.RopeTheta != nil:
		theta = *hc.RopeTheta
	case params != nil && params.RopeTheta != nil:
		theta = *params.RopeTheta
	case legacy != nil && legacy.RopeTheta != nil:
		theta = *legacy.RopeTheta
	}
	if !(theta > 0) || theta > 1e300 {
		return 0, nil, bad("rope_theta %g is not a positive number", theta)
	}

	scaling := func(field string, p *hfRopeParams) (*ovrt.RopeScaling, error) {
		if p == nil {
			return nil, nil
		}
		typ := ""
		switch {
		case p.RopeType != nil && p.Type != nil && *p.RopeType != *p.Type:
			return nil, bad("%s: rope_type %q disagrees with type %q", field, *p.RopeType, *p.Type)
		case p.RopeType != nil:
			typ = *p.RopeType
		case p.Type != nil:
			typ = *p.Type
		}
		switch typ {
		case "", "default":
			if p.Factor != nil || p.LowFreqFactor != nil || p.HighFreqFactor != nil || p.OriginalContext != nil {
				return nil, bad("%s: scaling parameters without a rope_type", field)
			}
			return nil, nil
		case "llama3":
		default:
			return nil, fmt.Errorf("%w: %s: %s: rope type %q (only \"default\" and \"llama3\" are supported)",
				ErrUnsupported, name, field, typ)
		}
		missing := func(key string) error { return bad("%s: llama3 scaling without %s", field, key) }
		switch {
		case p.Factor == nil:
			return nil, missing("factor")
		case p.LowFreqFactor == nil:
			return nil, missing("low_freq_factor")
		case p.HighFreqFactor == nil:
			return nil, missing("high_freq_factor")
		case p.OriginalContext == nil:
			return nil, missing("original_max_position_embeddings")
		}
		s := &ovrt.RopeScaling{
			Type:            "llama3",
			Factor:          *p.Factor,
			LowFreqFactor:   *p.LowFreqFactor,
			HighFreqFactor:  *p.HighFreqFactor,
			OriginalContext: *p.OriginalContext,
		}
		if !(s.Factor > 0) || !(s.LowFreqFactor > 0) || !(s.HighFreqFactor > s.LowFreqFactor) || s.OriginalContext <= 0 ||
			s.Factor > 1e300 || s.HighFreqFactor > 1e300 {
			return nil, bad("%s: llama3 scaling factor %g, low_freq_factor %g, high_freq_factor %g, original_max_position_embeddings %d",
				field, s.Factor, s.LowFreqFactor, s.HighFreqFactor, s.OriginalContext)
		}
		return s, nil
	}
	fromParams, err := scaling("rope_parameters", params)
	if err != nil {
		return 0, nil, err
	}
	fromLegacy, err := scaling("rope_scaling", legacy)
	if err != nil {
		return 0, nil, err
	}
	switch {
	case fromParams != nil && fromLegacy != nil && *fromParams != *fromLegacy:
		return 0, nil, bad("rope_parameters %+v disagrees with rope_scaling %+v", *fromParams, *fromLegacy)
	case fromParams != nil:
		return theta, fromParams, nil
	}
	return theta, fromLegacy, nil
}
