package node_test

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/pipeshard/pipeshard/node"
)

// Fuzz targets for the files a node reads at start: the swarm key, the
// allow list and the identity key. Each must refuse bad bytes with an
// error, never panic.

func FuzzParseSwarmKey(f *testing.F) {
	good, err := node.NewSwarmKey()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	raw := make([]byte, 32)
	rand.Read(raw)
	f.Add([]byte("/key/swarm/psk/1.0.0/\n/base64/\n" + base64.StdEncoding.EncodeToString(raw) + "\n"))
	f.Add(append([]byte("/key/swarm/psk/1.0.0/\n/bin/\n"), raw...))
	f.Add([]byte("/key/swarm/psk/1.0.0/\n/base16/\n" + hex.EncodeToString(make([]byte, 32)) + "\n"))
	f.Add([]byte("/key/swarm/psk/1.0.0/\n/base16/\nzz\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := node.ParseSwarmKey(b)
		if err != nil {
			if !errors.Is(err, node.ErrSwarmKey) {
				t.Fatalf("error %v does not wrap ErrSwarmKey", err)
			}
			return
		}
		if len(k) != 32 {
			t.Fatalf("accepted a %d-byte key", len(k))
		}
	})
}

func FuzzParseAllow(f *testing.F) {
	var ids []string
	for range 2 {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			f.Fatal(err)
		}
		id, err := peer.IDFromPrivateKey(k)
		if err != nil {
			f.Fatal(err)
		}
		ids = append(ids, id.String())
	}
	f.Add([]byte(ids[0] + "\n# a comment\n\n" + ids[1] + " # trailing\n"))
	f.Add([]byte(ids[0]))
	f.Add([]byte("# nobody\n"))
	f.Add([]byte("12D3KooWnotapeer\n"))
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		// The file form, and the same bytes as a comma-separated list.
		path := filepath.Join(dir, "allow")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		check := func(spec string) {
			got, err := node.ParseAllow(spec)
			if err != nil {
				if !errors.Is(err, node.ErrAllowList) {
					t.Fatalf("error %v does not wrap ErrAllowList", err)
				}
				return
			}
			if len(got) == 0 {
				t.Fatal("accepted a list that names nobody")
			}
			for _, id := range got {
				if err := id.Validate(); err != nil {
					t.Fatalf("accepted an invalid peer ID: %v", err)
				}
			}
		}
		check(path)
		if s := string(b); !strings.ContainsAny(s, "/\x00") {
			check(s)
		}
	})
}

func FuzzLoadIdentity(f *testing.F) {
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	good, err := crypto.MarshalPrivateKey(k)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "identity.key")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := node.LoadIdentity(path)
		if err != nil {
			return
		}
		if _, err := peer.IDFromPrivateKey(k); err != nil {
			t.Fatalf("loaded a key with no peer ID: %v", err)
		}
	})
}
