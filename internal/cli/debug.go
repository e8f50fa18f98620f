package cli

import (
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
)

// debugEnv names the environment variable that makes a node (or a swarm
// client: swarm generate, serve, sim client) serve Go's
// pprof profiles (goroutines, heap, CPU) on the loopback address it
// holds, e.g. PIPESHARD_DEBUG_ADDR=127.0.0.1:6060. It is for debugging
// and for the soak test (sim/soak), which counts a node's goroutines
// through /debug/pprof/goroutine?debug=1 to catch leaks; it is not a
// flag, so that it stays out of the node's usage.
const debugEnv = "PIPESHARD_DEBUG_ADDR"

// serveDebug starts the pprof server when debugEnv is set, and returns
// the function that stops it.
func serveDebug(log *slog.Logger) (stop func(), err error) {
	addr := os.Getenv(debugEnv)
	if addr == "" {
		return func() {}, nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, usagef("%s=%q: %v", debugEnv, addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, usagef("%s=%q: profiles are served on loopback only", debugEnv, addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := &http.Server{Handler: mux}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug server", "err", err)
		}
	}()
	log.Info("serving pprof", "addr", l.Addr().String())
	return func() { srv.Close() }, nil
}
