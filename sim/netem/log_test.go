package netem

import (
	"log/slog"
	"testing"
)

// testLogger logs through t.Log, at debug level with -v.
func testLogger(t testing.TB) *slog.Logger {
	lvl := slog.LevelInfo
	if testing.Verbose() {
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: lvl}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}
