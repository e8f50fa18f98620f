package shards

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"unsafe"

	"github.com/ipfs/go-cid"

	"github.com/pipeshard/pipeshard/internal/mmapfile"
	"github.com/pipeshard/pipeshard/ovrt"
	"github.com/pipeshard/pipeshard/ovrt/tokenizer"
	"github.com/pipeshard/pipeshard/shards/blockstore"
)

// Store keeps models, tokenizers and shards as UnixFS files in a block
// store under a pipeshard home.
type Store struct {
	Blocks *blockstore.Store
}

// Open opens (creating if needed) the store in home.
func Open(home string) (*Store, error) {
	b, err := blockstore.Open(filepath.Join(home, "store"))
	if err != nil {
		return nil, err
	}
	return &Store{Blocks: b}, nil
}

// Close closes the block store.
func (s *Store) Close() error { return s.Blocks.Close() }

// Progress reports bytes written while adding one artifact.
type Progress func(what string, done, total int64)

// addBytes stores b as a file and returns its CID.
func (s *Store) addBytes(ctx context.Context, b []byte) (cid.Cid, error) {
	return s.Blocks.AddFile(ctx, bytes.NewReader(b), nil)
}

// ReadAll returns a stored file's bytes, every block verified, in an
// 8-byte-aligned buffer (shards are decoded in place). max bounds the size.
func (s *Store) ReadAll(ctx context.Context, c cid.Cid, max int64) ([]byte, error) {
	r, size, err := s.Blocks.Open(ctx, c)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if size > max {
		return nil, fmt.Errorf("shards: %s is %d bytes, more than the %d expected", c, size, max)
	}
	words := make([]uint64, (size+7)/8)
	var buf []byte
	if len(words) > 0 {
		buf = unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), size)
	}
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, fmt.Errorf("shards: read %s: %w", c, err)
	}
	return buf, nil
}

// AddShard writes w as a shard of the model modelID and returns its CID
// and header. The file streams into the store: it is never held whole.
func (s *Store) AddShard(ctx context.Context, w *ovrt.Weights, modelID, name string, prog Progress) (cid.Cid, *Header, error) {
	h, err := NewHeader(w, modelID, name)
	if err != nil {
		return cid.Undef, nil, err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(Write(pw, h, w)) }()
	var cb func(int64)
	if prog != nil {
		what := fmt.Sprintf("shard %d:%d", w.Start, w.End)
		cb = func(n int64) { prog(what, n, h.Size()) }
	}
	c, err := s.Blocks.AddFile(ctx, pr, cb)
	pr.CloseWithError(err)
	if err != nil {
		return cid.Undef, nil, err
	}
	return c, h, nil
}

// LoadShard reads a shard, verifying every block, and returns its weights
// as views into one buffer (no conversion step: the bytes are laid out as
// the kernels read them). The buffer lives outside the Go heap, so that
// loading a large shard does not let the heap grow by its size again;
// Weights.Close releases it.
func (s *Store) LoadShard(ctx context.Context, c cid.Cid) (*ovrt.Weights, *Header, error) {
	r, size, err := s.Blocks.Open(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	buf, err := mmapfile.Anon(int(size))
	if err != nil {
		return nil, nil, err
	}
	if _, err := io.ReadFull(r, buf.Bytes()); err != nil {
		buf.Close()
		return nil, nil, fmt.Errorf("shards: read %s: %w", c, err)
	}
	w, h, err := Decode(buf.Bytes())
	if err != nil {
		buf.Close()
		return nil, nil, fmt.Errorf("shard %s: %w", c, err)
	}
	w.Closer = buf
	return w, h, nil
}

// Manifest reads and checks a model manifest.
func (s *Store) Manifest(ctx context.Context, c cid.Cid) (*Manifest, error) {
	b, err := s.ReadAll(ctx, c, maxManifest)
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(b)
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", c, err)
	}
	return m, nil
}

// AddManifest stores m and returns its CID, the model CID.
func (s *Store) AddManifest(ctx context.Context, m *Manifest) (cid.Cid, error) {
	if err := m.Validate(); err != nil {
		return cid.Undef, err
	}
	b, err := m.Encode()
	if err != nil {
		return cid.Undef, err
	}
	return s.addBytes(ctx, b)
}

// Tokenizer loads the model's tokenizer, or returns ErrNotFound when the
// model has none.
func (s *Store) Tokenizer(ctx context.Context, m *Manifest) (*tokenizer.Tokenizer, error) {
	if m.Tokenizer.CID == "" {
		return nil, fmt.Errorf("%w: model %s has no tokenizer", ErrNotFound, m.Name)
	}
	c, err := cid.Decode(m.Tokenizer.CID)
	if err != nil {
		return nil, fmt.Errorf("%w: tokenizer cid: %v", ErrBadManifest, err)
	}
	b, err := s.ReadAll(ctx, c, 256<<20)
	if err != nil {
		return nil, err
	}
	return DecodeTokenizer(m.Tokenizer.Format, b, m.Config.Vocab)
}

// tokenizerDecoders turns a tokenizer artifact's bytes into a tokenizer,
// by format. Formats register here from the files that implement them.
var tokenizerDecoders = map[string]func(b []byte, vocab int) (*tokenizer.Tokenizer, error){
	"llama2c": tokenizer.Parse,
}

// DecodeTokenizer reads a tokenizer artifact.
func DecodeTokenizer(format string, b []byte, vocab int) (*tokenizer.Tokenizer, error) {
	dec, ok := tokenizerDecoders[format]
	if !ok {
		return nil, fmt.Errorf("%w: tokenizer format %q", ErrBadManifest, format)
	}
	return dec(b, vocab)
}

// Source is a model to import: its whole weights and what they came from.
type Source struct {
	Name      string
	Weights   *ovrt.Weights // all layers
	Tokenizer []byte        // tokenizer artifact bytes, or nil
	TokFormat string
	Origin    Artifact // the source file's CID and format
}

// Import stores a model: its tokenizer, its descriptor, and one shard
// holding the whole model as the source stores it. It returns the
// manifest and its CID (the model CID).
func (s *Store) Import(ctx context.Context, src Source, prog Progress) (*Manifest, cid.Cid, error) {
	w := src.Weights
	if w.Start != 0 || w.End != w.Config.Layers {
		return nil, cid.Undef, fmt.Errorf("shards: import needs the whole model, got layers [%d, %d)", w.Start, w.End)
	}
	d := Descriptor{Name: src.Name, Arch: "llama", Config: w.Config, Source: src.Origin}
	if src.Tokenizer != nil {
		if _, err := DecodeTokenizer(src.TokFormat, src.Tokenizer, w.Config.Vocab); err != nil {
			return nil, cid.Undef, fmt.Errorf("shards: import %s: %w", src.Name, err)
		}
		c, err := s.addBytes(ctx, src.Tokenizer)
		if err != nil {
			return nil, cid.Undef, err
		}
		d.Tokenizer = Artifact{CID: c.String(), Format: src.TokFormat, Bytes: int64(len(src.Tokenizer))}
	}
	db, err := d.encode()
	if err != nil {
		return nil, cid.Undef, err
	}
	id, err := s.addBytes(ctx, db)
	if err != nil {
		return nil, cid.Undef, err
	}
	m := &Manifest{Format: ManifestFormat, ModelID: id.String(), Descriptor: d}
	l, err := s.addLayout(ctx, m, w, []Stage{{0, w.Config.Layers, 0, 0}}, quantOf(w), "whole", prog)
	if err != nil {
		return nil, cid.Undef, err
	}
	m.Layouts = append(m.Layouts, l)
	c, err := s.AddManifest(ctx, m)
	return m, c, err
}

// Split adds a layout to model mc: stages cut from the whole model and
// stored as q. It returns the new manifest and its CID: the same model
// (the same model ID in every shard) with one more layout.
func (s *Store) Split(ctx context.Context, mc cid.Cid, stages []Stage, q ovrt.DType, split string, prog Progress) (*Manifest, cid.Cid, error) {
	m, err := s.Manifest(ctx, mc)
	if err != nil {
		return nil, cid.Undef, err
	}
	w, err := s.wholeWeights(ctx, m, q)
	if err != nil {
		return nil, cid.Undef, err
	}
	l, err := s.addLayout(ctx, m, w, stages, q, split, prog)
	if err != nil {
		return nil, cid.Undef, err
	}
	m.Layouts = append(m.Layouts, l)
	c, err := s.AddManifest(ctx, m)
	return m, c, err
}

// Whole loads a one-shard layout of m, preferring quant q, then f32,
// then any: the whole model, for splitting or exporting.
func (s *Store) Whole(ctx context.Context, m *Manifest, q ovrt.DType) (*ovrt.Weights, error) {
	return s.wholeWeights(ctx, m, q)
}

func (s *Store) wholeWeights(ctx context.Context, m *Manifest, q ovrt.DType) (*ovrt.Weights, error) {
	for _, want := range []string{q.String(), "f32", ""} {
		if l, ok := m.Layout(want, "", 1); ok {
			c, err := cid.Decode(l.Shards[0].CID)
			if err != nil {
				return nil, err
			}
			w, h, err := s.LoadShard(ctx, c)
			if err != nil {
				return nil, err
			}
			if h.ModelID != m.ModelID {
				return nil, fmt.Errorf("%w: shard %s names model %s, the manifest %s", ErrMismatch, c, h.ModelID, m.ModelID)
			}
			return w, nil
		}
	}
	return nil, fmt.Errorf("%w: model %s has no whole-model layout to split from", ErrNotFound, m.Name)
}

func (s *Store) addLayout(ctx context.Context, m *Manifest, w *ovrt.Weights, stages []Stage, q ovrt.DType, split string, prog Progress) (Layout, error) {
	l := Layout{Quant: q.String(), Split: split}
	headQ := q
	if q == ovrt.Q4_0 {
		headQ = ovrt.Q8_0
	}
	cs := CostsOf(m.Config, q, headQ)
	for _, st := range stages {
		v, err := w.Slice(st.Start, st.End, st.HeadLo, st.HeadHi)
		if err != nil {
			return l, err
		}
		if q != quantOf(w) {
			if v, err = v.Quantize(q); err != nil {
				return l, err
			}
		}
		c, h, err := s.AddShard(ctx, v, m.ModelID, m.Name, prog)
		if err != nil {
			return l, err
		}
		ref := ShardRef{CID: c.String(), Layers: [2]int{st.Start, st.End}, Quant: h.Quant, Bytes: h.Size(), Work: cs.Work(st)}
		if st.HeadHi != 0 {
			ref.Head = []int{st.HeadLo, st.HeadHi}
		}
		l.Shards = append(l.Shards, ref)
	}
	return l, nil
}

// IsCID reports whether s parses as a CID.
func IsCID(s string) bool {
	_, err := cid.Decode(s)
	return err == nil
}
