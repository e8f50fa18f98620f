package blockstore

import (
	"bytes"
	"context"
	"io"
	"testing"
)

const benchSize = 64 << 20

// BenchmarkAddFile imports 64 MiB into a fresh on-disk store each round
// (flatfs with fsync, as Open configures it). MB/s is reported by -bench.
func BenchmarkAddFile(b *testing.B) {
	data := gen(benchSize)
	ctx := context.Background()
	b.SetBytes(benchSize)
	for b.Loop() {
		b.StopTimer()
		s, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := s.AddFile(ctx, bytes.NewReader(data), nil); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		s.Close()
		b.StartTimer()
	}
}

// BenchmarkCID computes the root CID of 64 MiB, storing nothing.
func BenchmarkCID(b *testing.B) {
	data := gen(benchSize)
	b.SetBytes(benchSize)
	for b.Loop() {
		if _, err := CID(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRead reads 64 MiB back through Open, every block re-hashed.
func BenchmarkRead(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	c := add(b, s, gen(benchSize))
	b.SetBytes(benchSize)
	for b.Loop() {
		if err := s.Export(ctx, c, io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerify re-hashes every block of 64 MiB.
func BenchmarkVerify(b *testing.B) {
	s := openTemp(b)
	ctx := context.Background()
	c := add(b, s, gen(benchSize))
	b.SetBytes(benchSize)
	for b.Loop() {
		if err := s.Verify(ctx, c); err != nil {
			b.Fatal(err)
		}
	}
}
