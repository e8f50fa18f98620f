package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"
)

func sampleMessages() []Message {
	s := SessionID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	fw := &Forward{Session: s, Seq: 7, Pos: 12, All: true, PartialK: 1,
		Partial: []Cand{{5, 1.5}, {9, -2}}, Uniform: []float64{0.25, 0.5}, Trace: []Timing{{0, 10, 200}}}
	fw.SetTokens([]int32{1, 31999})
	tree := &Forward{Session: s, Seq: 9, Pos: 20, All: true, Tree: []int32{-1, 0, 0, -1, 3}}
	tree.SetTokens([]int32{4, 6, 5, 9, 9})
	walk := &Forward{Session: s, Seq: 10, Pos: 20, All: true, Tree: []int32{-1, 0, 0},
		Walk: &Walk{From: 0, IDs: []uint32{4, 6, 5}}}
	walk.SetTokens([]int32{4, 6, 5})
	chain := &Forward{Session: s, Seq: 11, Pos: 20, NTok: 3, All: true, Kind: KindHiddenF16, Data: make([]byte, 12),
		Uniform: []float64{0.1, 0.2, 0.3}, Walk: &Walk{From: 1, IDs: []uint32{4, 6, 5}}}
	return []Message{
		&Open{Session: s, ModelID: "bafkmodel", Hop: 1, Route: []Hop{
			{Peer: []byte("peerA"), Addrs: []string{"/ip4/127.0.0.1/tcp/1"}, Shard: "bafyA", Start: 0, End: 3},
			{Peer: []byte("peerB"), Shard: "bafyB", Start: 3, End: 6, HeadLo: 0, HeadHi: 16000},
		}, Client: []byte("client"), Addrs: []string{"/ip4/127.0.0.1/udp/2/quic-v1"}, DType: F16, Output: OutTopK, TopK: 5, Temp: 0.8, TopP: 0.9, MaxLen: 256},
		&Opened{Session: s, Hop: 2},
		fw,
		&Forward{Session: s, Seq: 8, Pos: 14, NTok: 1, Kind: KindHiddenF16, Data: make([]byte, 576)},
		tree,
		walk,
		chain,
		&Result{Session: s, Seq: 7, Pos: 12, Rows: 2, Kind: ResultIDs, IDs: []uint32{4, 5}, Trace: []Timing{{2, 1, 2}}},
		&Result{Session: s, Seq: 7, Rows: 1, Kind: ResultTopK, K: 2, Cands: []Cand{{1, 2}, {3, 4}}},
		&Result{Session: s, Seq: 7, Rows: 1, Kind: ResultLogits, Logits: []float32{1, 2, 3}},
		&Error{Session: s, Seq: 3, Hop: 1, Code: 3, Msg: "position 9 with 4 cached"},
		&Error{Session: s, Seq: 4, Hop: 0, Code: 18, Msg: "3 sessions of this peer"},
		&Close{Session: s, Reason: 1},
		&Credit{Session: s, N: 4},
	}
}

func TestRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	msgs := sampleMessages()
	for _, m := range msgs {
		if err := Write(&stream, m); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(&stream, 0)
	for i, want := range msgs {
		got, err := r.Read()
		if err != nil {
			t.Fatalf("message %d (%v): %v", i, want.Type(), err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("message %d:\n got %+v\nwant %+v", i, got, want)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestRejects(t *testing.T) {
	good := Encode(nil, sampleMessages()[0])[4:]
	tests := []struct {
		name string
		body []byte
	}{
		{"empty", nil},
		{"unknown type", []byte{99}},
		{"truncated open", good[:len(good)-3]},
		{"trailing bytes", append(append([]byte(nil), good...), 0)},
		{"tokens shape", func() []byte {
			f := &Forward{NTok: 3, Kind: KindTokens, Data: make([]byte, 8)}
			return Encode(nil, f)[4:]
		}()},
		{"no tokens", Encode(nil, &Forward{Kind: KindTokens})[4:]},
		{"bad kind", Encode(nil, &Forward{NTok: 1, Kind: 9, Data: []byte{1}})[4:]},
		{"partial rows", Encode(nil, &Forward{NTok: 1, Kind: KindHiddenF32, Data: make([]byte, 4), PartialK: 2, Partial: []Cand{{1, 1}}})[4:]},
		{"bad bool", func() []byte {
			b := Encode(nil, &Forward{NTok: 1, Kind: KindTokens, Data: make([]byte, 4)})[4:]
			b[1+16+8+4+4] = 7
			return b
		}()},
		{"hop outside route", func() []byte {
			o := *sampleMessages()[0].(*Open)
			o.Hop = 5
			return Encode(nil, &o)[4:]
		}()},
		{"bad dtype", func() []byte {
			o := *sampleMessages()[0].(*Open)
			o.DType = 7
			return Encode(nil, &o)[4:]
		}()},
		{"result kind", Encode(nil, &Result{Kind: 9})[4:]},
		{"tree order", func() []byte {
			f := &Forward{Tree: []int32{-1, 1}}
			f.SetTokens([]int32{1, 2})
			return Encode(nil, f)[4:]
		}()},
		{"tree length", func() []byte {
			f := &Forward{Tree: []int32{-1, 0, 1}}
			f.SetTokens([]int32{1, 2})
			return Encode(nil, f)[4:]
		}()},
		{"tree cut", func() []byte {
			f := &Forward{Tree: []int32{-1, 0}}
			f.SetTokens([]int32{1, 2})
			b := Encode(nil, f)[4:]
			return b[:len(b)-2]
		}()},
		{"empty tree", func() []byte {
			f := &Forward{}
			f.SetTokens([]int32{1, 2})
			return append(Encode(nil, f)[4:], 0, 0, 0, 0)
		}()},
		{"walk of one row", walkFrame(func(f *Forward) { f.All = false })},
		{"walk ids", walkFrame(func(f *Forward) { f.Walk.IDs = f.Walk.IDs[:1] })},
		{"walk from", walkFrame(func(f *Forward) { f.Walk.From = 2 })},
		{"walk cut", func() []byte {
			b := walkFrame(func(*Forward) {})
			return b[:len(b)-3]
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Decode(tt.body); !errors.Is(err, ErrBadFrame) {
				t.Fatalf("Decode: %v, want ErrBadFrame", err)
			}
		})
	}
}

func TestFrameLimit(t *testing.T) {
	b := Encode(nil, &Forward{NTok: 1, Kind: KindHiddenF32, Data: make([]byte, 4096)})
	if _, err := NewReader(bytes.NewReader(b), 1024).Read(); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("oversized frame: %v", err)
	}
	// A length prefix that promises more than arrives.
	if _, err := NewReader(bytes.NewReader(b[:100]), 0).Read(); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut frame: %v", err)
	}
}

func TestErrorsMapBothWays(t *testing.T) {
	for _, c := range codes {
		e := NewError(SessionID{}, 1, 2, fmt.Errorf("context: %w", c.err))
		b := Encode(nil, e)
		m, err := Decode(b[4:])
		if err != nil {
			t.Fatal(err)
		}
		if !errors.Is(m.(*Error), c.err) {
			t.Errorf("code %d does not map back to %v", c.code, c.err)
		}
	}
	if CodeOf(errors.New("other")) != 14 {
		t.Error("an unknown error is not internal")
	}
}

func FuzzDecode(f *testing.F) {
	for _, m := range sampleMessages() {
		f.Add(Encode(nil, m)[4:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			return
		}
		// What decodes re-encodes to a frame that decodes the same.
		again, err := Decode(Encode(nil, m)[4:])
		if err != nil {
			t.Fatalf("re-encoded %v does not decode: %v", m.Type(), err)
		}
		if !reflect.DeepEqual(normalize(m), normalize(again)) {
			t.Fatalf("round trip changed %+v into %+v", m, again)
		}
	})
}

// normalize maps nil and empty slices alike for comparison.
func normalize(m Message) string {
	if f, ok := m.(*Forward); ok && f.Walk != nil {
		c := *f
		c.Walk = nil
		return fmt.Sprintf("%v walk %v", &c, *f.Walk)
	}
	return fmt.Sprintf("%v", m)
}

// A later hop's report passed back keeps its hop and code.
func TestNewErrorKeepsAReportsHop(t *testing.T) {
	inner := NewError(SessionID{1}, 0, 2, fmt.Errorf("%w: hop 3: dial failed", ErrNextHop))
	out := NewError(SessionID{1}, 7, 0, inner)
	if out.Hop != 2 || out.Seq != 7 || !errors.Is(out, ErrNextHop) || out.Msg != inner.Msg {
		t.Fatalf("passed-back report %+v, want hop 2, seq 7, ErrNextHop, %q", out, inner.Msg)
	}
	if wrapped := NewError(SessionID{1}, 0, 0, fmt.Errorf("context: %w", inner)); wrapped.Hop != 0 {
		t.Fatalf("a wrapped report is this hop's own: hop %d", wrapped.Hop)
	}
}

// walkFrame encodes a two-token Forward with a Walk, changed by edit.
func walkFrame(edit func(*Forward)) []byte {
	f := &Forward{All: true, Walk: &Walk{IDs: []uint32{1, 2}}}
	f.SetTokens([]int32{1, 2})
	edit(f)
	return Encode(nil, f)[4:]
}
