package status

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
)

// Encode validates r, signs it with key in an envelope of the status
// domain and returns the envelope's bytes. key must be r.PeerID's own key
// (ErrWrongSigner otherwise).
func Encode(r Record, key crypto.PrivKey) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, err
	}
	signer, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("status: signing key: %w", err)
	}
	if signer != r.PeerID {
		return nil, fmt.Errorf("%w: record names %s, key is %s", ErrWrongSigner, r.PeerID, signer)
	}
	env, err := record.Seal(&r, key)
	if err != nil {
		return nil, fmt.Errorf("status: seal: %w", err)
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, fmt.Errorf("status: marshal envelope: %w", err)
	}
	if len(b) > MaxMessageSize {
		return nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(b))
	}
	return b, nil
}

// Decode verifies a signed envelope and returns its record. It fails with
// ErrTooLarge past MaxMessageSize, ErrBadSignature when the signature does
// not verify for the status domain, ErrWrongSigner when the signer is not
// the record's PeerID, ErrUnsupportedVersion for an unknown encoding
// version, and ErrBadRecord for anything else malformed.
func Decode(data []byte) (Record, error) {
	if len(data) > MaxMessageSize {
		return Record{}, fmt.Errorf("%w: %d bytes", ErrTooLarge, len(data))
	}
	env, rec, err := record.ConsumeEnvelope(data, Domain)
	if err != nil {
		switch {
		case errors.Is(err, ErrBadRecord), errors.Is(err, ErrUnsupportedVersion), errors.Is(err, ErrTooLarge):
			return Record{}, err
		case errors.Is(err, record.ErrInvalidSignature):
			return Record{}, fmt.Errorf("%w: %w", ErrBadSignature, err)
		}
		return Record{}, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	r, ok := rec.(*Record)
	if !ok {
		return Record{}, fmt.Errorf("%w: payload is a %T", ErrBadRecord, rec)
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return Record{}, fmt.Errorf("%w: signer key: %w", ErrBadRecord, err)
	}
	if signer != r.PeerID {
		return Record{}, fmt.Errorf("%w: record names %s, signed by %s", ErrWrongSigner, r.PeerID, signer)
	}
	return *r, nil
}
