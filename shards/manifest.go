package shards

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// ManifestFormat names the manifest's schema.
const ManifestFormat = "pipeshard-manifest/1"

// maxManifest bounds a manifest's size when decoding.
const maxManifest = 8 << 20

// Artifact names a stored file and how to read it.
type Artifact struct {
	CID    string `json:"cid,omitempty"`
	Format string `json:"format,omitempty"` // tokenizer: "llama2c" or "gguf"; source: "llama2c", "gguf", "hf", "synthetic"
	Bytes  int64  `json:"bytes,omitempty"`
}

// Descriptor is a model's identity: what it is, independent of how it is
// cut or quantized. Its CID (of its canonical JSON, stored as a file) is
// the model ID that every shard's header repeats.
//
// The model CID that users pass around is the CID of a Manifest, which
// covers the shard CIDs. A shard cannot name that CID (the manifest names
// the shard: the hash would be its own input), so it names the descriptor,
// and a manifest proves it describes the same model by carrying the
// descriptor's fields: anyone can recompute ModelID from them.
type Descriptor struct {
	Name      string      `json:"name"`
	Arch      string      `json:"arch"` // "llama"
	Config    ovrt.Config `json:"config"`
	Tokenizer Artifact    `json:"tokenizer"`
	Source    Artifact    `json:"source"` // the file the weights came from
}

// ID computes the descriptor's CID.
func (d *Descriptor) ID() (cid.Cid, error) {
	b, err := d.encode()
	if err != nil {
		return cid.Undef, err
	}
	return blockstore.CID(bytes.NewReader(b))
}

func (d *Descriptor) encode() ([]byte, error) { return json.Marshal(d) }

// Manifest lists a model's layouts: for each, the shards that cover it.
type Manifest struct {
	Format  string `json:"format"`
	ModelID string `json:"model_id"`
	Descriptor
	Layouts []Layout `json:"layouts"`
}

// Layout is one way of cutting the model: shards that together cover
// every layer and every row of the output head, in order.
type Layout struct {
	Quant  string     `json:"quant"`
	Split  string     `json:"split"` // "whole", "balanced", "even" or "ranges"
	Shards []ShardRef `json:"shards"`
}

// ShardRef is one shard in a layout.
type ShardRef struct {
	CID    string `json:"cid"`
	Layers [2]int `json:"layers"`
	Head   []int  `json:"head,omitempty"` // head rows [lo, hi); absent: the whole head if it ends at the last layer
	Quant  string `json:"quant"`
	Bytes  int64  `json:"bytes"`
	Work   Work   `json:"work"` // per token
}

// Stage returns the shard's part of the model.
func (r ShardRef) Stage() Stage {
	s := Stage{Start: r.Layers[0], End: r.Layers[1]}
	if len(r.Head) == 2 {
		s.HeadLo, s.HeadHi = r.Head[0], r.Head[1]
	}
	return s
}

// ParseManifest decodes and checks a manifest.
func ParseManifest(b []byte) (*Manifest, error) {
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%w: %d bytes exceeds %d", ErrBadManifest, len(b), maxManifest)
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// Validate checks the manifest's structure and that ModelID is the CID
// of its descriptor.
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrBadManifest}, args...)...)
	}
	if m.Format != ManifestFormat {
		return bad("format %q, want %q", m.Format, ManifestFormat)
	}
	if m.Arch != "llama" {
		return bad("architecture %q", m.Arch)
	}
	if err := m.Config.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	id, err := m.Descriptor.ID()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadManifest, err)
	}
	if id.String() != m.ModelID {
		return bad("model_id %s is not the CID of its descriptor (%s)", m.ModelID, id)
	}
	for i, l := range m.Layouts {
		if _, err := ovrt.ParseDType(l.Quant); err != nil && l.Quant != "mixed" {
			return bad("layout %d: quant %q", i, l.Quant)
		}
		if len(l.Shards) == 0 {
			return bad("layout %d has no shards", i)
		}
		spec := ""
		for j, s := range l.Shards {
			if s.Head != nil && len(s.Head) != 2 {
				return bad("layout %d shard %d: head %v is not [lo, hi)", i, j, s.Head)
			}
			if _, err := cid.Decode(s.CID); err != nil {
				return bad("layout %d shard %d: cid %q: %v", i, j, s.CID, err)
			}
			if j > 0 {
				spec += ","
			}
			spec += s.Stage().String()
		}
		if _, err := ParseRanges(spec, m.Config); err != nil {
			return bad("layout %d: %v", i, err)
		}
	}
	return nil
}

// Encode returns the manifest's JSON.
func (m *Manifest) Encode() ([]byte, error) { return json.MarshalIndent(m, "", " ") }

// Layout returns the first layout with quant q split as split ("" = any),
// or false.
func (m *Manifest) Layout(q, split string, stages int) (Layout, bool) {
	for _, l := range m.Layouts {
		if (q == "" || l.Quant == q) && (split == "" || l.Split == split) && (stages == 0 || len(l.Shards) == stages) {
			return l, true
		}
	}
	return Layout{}, false
}
