package status

import (
	"bytes"
	crand "crypto/rand"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

// testKey returns a deterministic Ed25519 key for seed.
func testKey(tb testing.TB, seed uint64) (crypto.PrivKey, peer.ID) {
	tb.Helper()
	var s [32]byte
	s[0] = byte(seed)
	s[1] = byte(seed >> 8)
	key, _, err := crypto.GenerateEd25519Key(rand.NewChaCha8(s))
	if err != nil {
		tb.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	return key, id
}

// sample returns a valid record of id.
func sample(id peer.ID) Record {
	return Record{
		PeerID: id, ModelID: "bafymodel", ShardCID: "bafyshard",
		Start: 8, End: 16, HeadLo: 0, HeadHi: 16000, Quant: "q4_0",
		QueuedTokens: 12, ActiveSessions: 3, FreeKVBytes: 1 << 30,
		TokensPerSec: 41.5, ComputeMicros: 2250.25,
		Version: "pipeshard/0.1.0", Draining: true, Seq: 7,
		Time:  time.Unix(1_700_000_000, 123456789),
		Addrs: []string{"/ip4/127.0.0.1/tcp/4001", "/ip4/127.0.0.1/udp/4001/quic-v1"},
	}
}

func TestRoundTrip(t *testing.T) {
	keyTypes := []struct {
		name string
		gen  func() (crypto.PrivKey, crypto.PubKey, error)
	}{
		{"ed25519", func() (crypto.PrivKey, crypto.PubKey, error) { return crypto.GenerateEd25519Key(crand.Reader) }},
		{"secp256k1", func() (crypto.PrivKey, crypto.PubKey, error) { return crypto.GenerateSecp256k1Key(crand.Reader) }},
		{"ecdsa", func() (crypto.PrivKey, crypto.PubKey, error) { return crypto.GenerateECDSAKeyPair(crand.Reader) }},
		{"rsa2048", func() (crypto.PrivKey, crypto.PubKey, error) { return crypto.GenerateRSAKeyPair(2048, crand.Reader) }},
	}
	for _, kt := range keyTypes {
		t.Run(kt.name, func(t *testing.T) {
			key, _, err := kt.gen()
			if err != nil {
				t.Fatal(err)
			}
			id, err := peer.IDFromPrivateKey(key)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []Record{sample(id), {PeerID: id, ModelID: "m", Seq: 1, Time: time.Unix(1, 0)}} {
				b, err := Encode(want, key)
				if err != nil {
					t.Fatal(err)
				}
				got, err := Decode(b)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
				}
			}
		})
	}
}

func TestEncodeRefuses(t *testing.T) {
	keyA, idA := testKey(t, 1)
	_, idB := testKey(t, 2)
	tests := []struct {
		name string
		mut  func(*Record)
		want error
	}{
		{"other peer", func(r *Record) { r.PeerID = idB }, ErrWrongSigner},
		{"no peer", func(r *Record) { r.PeerID = "" }, ErrBadRecord},
		{"no model", func(r *Record) { r.ModelID = "" }, ErrBadRecord},
		{"long model", func(r *Record) { r.ModelID = strings.Repeat("m", MaxIDLen+1) }, ErrBadRecord},
		{"reversed layers", func(r *Record) { r.Start, r.End = 5, 4 }, ErrBadRecord},
		{"bad address", func(r *Record) { r.Addrs = []string{"/ip4/300.0.0.1/tcp/1"} }, ErrBadRecord},
		{"no time", func(r *Record) { r.Time = time.Time{} }, ErrBadRecord},
		{"zero seq", func(r *Record) { r.Seq = 0 }, ErrBadRecord},
		{"too many addresses", func(r *Record) { r.Addrs = make([]string, MaxAddrs+1) }, ErrBadRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := sample(idA)
			tt.mut(&r)
			if _, err := Encode(r, keyA); !errors.Is(err, tt.want) {
				t.Fatalf("Encode: %v, want %v", err, tt.want)
			}
		})
	}
}

// seal signs r with key without Encode's checks, as a malicious node may.
func seal(tb testing.TB, r Record, key crypto.PrivKey) []byte {
	tb.Helper()
	env, err := record.Seal(&forged{r}, key)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := env.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// forged is a record whose payload is written without validation, in a
// domain of the test's choice.
type forged struct{ r Record }

func (f *forged) Domain() string                 { return Domain }
func (f *forged) Codec() []byte                  { return codec }
func (f *forged) MarshalRecord() ([]byte, error) { return f.r.appendPayload(nil) }
func (f *forged) UnmarshalRecord([]byte) error   { return errors.New("not for reading") }

type otherDomain struct{ forged }

func (o *otherDomain) Domain() string { return "libp2p-peer-record" }

func TestDecodeRejects(t *testing.T) {
	keyA, idA := testKey(t, 1)
	_, idB := testKey(t, 2)
	good, err := Encode(sample(idA), keyA)
	if err != nil {
		t.Fatal(err)
	}
	tampered := func() []byte {
		env, err := record.UnmarshalEnvelope(good)
		if err != nil {
			t.Fatal(err)
		}
		r := sample(idA)
		r.QueuedTokens = 0 // claim an idle node under A's old signature
		env.RawPayload, _ = r.MarshalRecord()
		b, err := env.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}()
	otherDom := func() []byte {
		env, err := record.Seal(&otherDomain{forged{sample(idA)}}, keyA)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := env.Marshal()
		return b
	}()
	v2 := sample(idA)
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrBadRecord},
		{"garbage", []byte("not an envelope at all"), ErrBadRecord},
		{"too large", make([]byte, MaxMessageSize+1), ErrTooLarge},
		{"truncated", good[:len(good)-1], ErrBadRecord},
		{"signed by A, claims B", seal(t, sample(idB), keyA), ErrWrongSigner},
		{"payload changed after signing", tampered, ErrBadSignature},
		{"other signature domain", otherDom, ErrBadSignature},
		{"signed but malformed", seal(t, Record{PeerID: idA, ModelID: "m", Start: 3, End: 2, Seq: 1, Time: time.Unix(1, 0)}, keyA), ErrBadRecord},
		{"newer version", func() []byte {
			env, err := record.Seal(&versioned{forged{v2}}, keyA)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := env.Marshal()
			return b
		}(), ErrUnsupportedVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode(tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode: %v, want %v", err, tt.want)
			}
		})
	}
}

type versioned struct{ forged }

func (v *versioned) MarshalRecord() ([]byte, error) {
	b, err := v.forged.MarshalRecord()
	b[0] = EncodingVersion + 1
	return b, err
}

// payload returns the encoding of r without validation.
func payload(tb testing.TB, r Record) []byte {
	tb.Helper()
	b, err := r.appendPayload(nil)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestUnmarshalRejects(t *testing.T) {
	_, id := testKey(t, 1)
	good := payload(t, sample(id))
	if len(id) >= 0x80 {
		t.Fatalf("test assumes a one-byte peer ID length, got %d", len(id))
	}
	with := func(mut func(*Record)) []byte {
		r := sample(id)
		mut(&r)
		return payload(t, r)
	}
	// A payload with one raw address in place of the sample's.
	withAddr := func(raw []byte) []byte {
		r := sample(id)
		r.Addrs = nil
		b := payload(t, r)
		b = b[:len(b)-1] // the zero address count
		b = append(b, 1, byte(len(raw)))
		return append(b, raw...)
	}
	tests := []struct {
		name string
		data []byte
		want error
	}{
		{"empty", nil, ErrBadRecord},
		{"version only", []byte{EncodingVersion}, ErrBadRecord},
		{"version 0", append([]byte{0}, good[1:]...), ErrUnsupportedVersion},
		{"version 2", append([]byte{2}, good[1:]...), ErrUnsupportedVersion},
		{"trailing byte", append(bytes.Clone(good), 0), ErrBadRecord},
		{"non-minimal varint", append([]byte{EncodingVersion, good[1] | 0x80, 0}, good[2:]...), ErrBadRecord},
		{"varint overflow", append([]byte{EncodingVersion}, bytes.Repeat([]byte{0xff}, 11)...), ErrBadRecord},
		{"length past end", []byte{EncodingVersion, 100, 1, 2}, ErrBadRecord},
		{"too large", append([]byte{EncodingVersion}, make([]byte, MaxMessageSize)...), ErrTooLarge},
		{"peer ID not a multihash", with(func(r *Record) { r.PeerID = "abc" }), ErrBadRecord},
		{"empty model", with(func(r *Record) { r.ModelID = "" }), ErrBadRecord},
		{"long model", with(func(r *Record) { r.ModelID = strings.Repeat("m", MaxIDLen+1) }), ErrBadRecord},
		{"control char", with(func(r *Record) { r.Quant = "q4\x00" }), ErrBadRecord},
		{"invalid UTF-8", with(func(r *Record) { r.Version = "\xff\xfe" }), ErrBadRecord},
		{"layers reversed", with(func(r *Record) { r.Start, r.End = 9, 8 }), ErrBadRecord},
		{"layer past bound", with(func(r *Record) { r.End = MaxLayer + 1 }), ErrBadRecord},
		{"head low without high", with(func(r *Record) { r.HeadLo, r.HeadHi = 5, 0 }), ErrBadRecord},
		{"empty head range", with(func(r *Record) { r.HeadLo, r.HeadHi = 5, 5 }), ErrBadRecord},
		{"queue past bound", with(func(r *Record) { r.QueuedTokens = math.MaxInt32 + 1 }), ErrBadRecord},
		{"negative free KV", with(func(r *Record) { r.FreeKVBytes = -1 }), ErrBadRecord},
		{"NaN speed", with(func(r *Record) { r.TokensPerSec = math.NaN() }), ErrBadRecord},
		{"infinite speed", with(func(r *Record) { r.TokensPerSec = math.Inf(1) }), ErrBadRecord},
		{"negative compute", with(func(r *Record) { r.ComputeMicros = -1 }), ErrBadRecord},
		{"zero seq", with(func(r *Record) { r.Seq = 0 }), ErrBadRecord},
		{"time at epoch", with(func(r *Record) { r.Time = time.Unix(0, 0) }), ErrBadRecord},
		{"time before epoch", with(func(r *Record) { r.Time = time.Unix(-5, 0) }), ErrBadRecord},
		{"unknown flag", func() []byte {
			b := with(func(r *Record) { r.Draining = false })
			// From the end: the addresses, their count (1 byte), time (8),
			// seq (1 byte: 7), flags.
			i := len(b) - 1 - 8 - 1 - 1
			r := sample(id)
			for _, a := range r.Addrs {
				ab, _ := addrBytes(a)
				i -= 1 + len(ab)
			}
			if b[i] != 0 || b[i+1] != 7 {
				t.Fatalf("flags not at %d", i)
			}
			b[i] = 0x80
			return b
		}(), ErrBadRecord},
		{"too many addresses", with(func(r *Record) {
			r.Addrs = make([]string, MaxAddrs+1)
			for i := range r.Addrs {
				r.Addrs[i] = "/ip4/127.0.0.1/tcp/1"
			}
		}), ErrBadRecord},
		{"address not a multiaddr", withAddr([]byte{0xff, 0xff, 0xff, 0x01}), ErrBadRecord},
		{"empty address", withAddr(nil), ErrBadRecord},
		{"address count past end", func() []byte {
			b := with(func(r *Record) { r.Addrs = r.Addrs[:1] })
			r := sample(id)
			ab, _ := addrBytes(r.Addrs[0])
			cnt := len(b) - 1 - 1 - len(ab)
			if b[cnt] != 1 {
				t.Fatalf("address count not at %d", cnt)
			}
			b[cnt] = 2
			return b
		}(), ErrBadRecord},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Record
			err := r.UnmarshalRecord(tt.data)
			if !errors.Is(err, tt.want) {
				t.Fatalf("UnmarshalRecord: %v, want %v", err, tt.want)
			}
			if !reflect.DeepEqual(r, Record{}) {
				t.Fatalf("failed UnmarshalRecord changed the record: %+v", r)
			}
		})
	}
}

// Every proper prefix of a valid payload is refused.
func TestUnmarshalTruncated(t *testing.T) {
	_, id := testKey(t, 1)
	good := payload(t, sample(id))
	for n := range len(good) {
		var r Record
		if err := r.UnmarshalRecord(good[:n]); !errors.Is(err, ErrBadRecord) {
			t.Fatalf("prefix of %d/%d bytes: %v", n, len(good), err)
		}
	}
}

func TestTopic(t *testing.T) {
	if got, want := Topic("bafymodel"), "/pipeshard/status/1/bafymodel"; got != want {
		t.Fatalf("Topic: %q, want %q", got, want)
	}
}
