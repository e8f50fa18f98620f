package status

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

// FuzzDecode feeds arbitrary bytes to Decode and to the payload decoder
// (random bytes seldom carry a valid signature, so the payload decoder is
// fuzzed on its own too). Neither may panic; whatever they accept must
// validate, and an accepted payload must survive a re-encoding.
func FuzzDecode(f *testing.F) {
	key, id := testKey(f, 1)
	full := sample(id)
	bare := Record{PeerID: id, ModelID: "m", Seq: 1, Time: time.Unix(1, 0)}
	for _, r := range []Record{full, bare} {
		env, err := Encode(r, key)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(env)
		f.Add(payload(f, r))
	}
	f.Add([]byte{})
	f.Add([]byte{EncodingVersion})
	f.Add([]byte{EncodingVersion, 0x80, 0x80, 0x80})
	f.Fuzz(func(t *testing.T, data []byte) {
		if r, err := Decode(data); err == nil {
			if err := r.Validate(); err != nil {
				t.Fatalf("Decode accepted an invalid record: %v", err)
			}
		} else if !errors.Is(err, ErrBadRecord) && !errors.Is(err, ErrBadSignature) &&
			!errors.Is(err, ErrWrongSigner) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("Decode error wraps no sentinel: %v", err)
		}

		var r Record
		if err := r.UnmarshalRecord(data); err != nil {
			if !errors.Is(err, ErrBadRecord) && !errors.Is(err, ErrTooLarge) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("UnmarshalRecord error wraps no sentinel: %v", err)
			}
			return
		}
		b, err := r.MarshalRecord()
		if err != nil {
			t.Fatalf("accepted payload does not re-encode: %v", err)
		}
		var again Record
		if err := again.UnmarshalRecord(b); err != nil {
			t.Fatalf("re-encoded payload refused: %v", err)
		}
		if !reflect.DeepEqual(r, again) {
			t.Fatalf("re-encoding changed the record:\n%+v\n%+v", r, again)
		}
	})
}
