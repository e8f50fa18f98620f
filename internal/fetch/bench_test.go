package fetch

import (
	"context"
	"testing"
)

// BenchmarkFetch fetches a 64 MiB file over loopback TCP into a fresh
// store each time (flatfs with fsync on, as in production).
func BenchmarkFetch(b *testing.B) {
	const size = 64 << 20
	a := newNode(b, nil, nil)
	root := addFile(b, a.store, testBytes(10, size))
	b.SetBytes(size)
	for b.Loop() {
		b.StopTimer()
		dst := newNode(b, nil, nil)
		b.StartTimer()
		if err := dst.svc.Fetch(context.Background(), root, nil, FromPeers(a.info())); err != nil {
			b.Fatal(err)
		}
	}
}
