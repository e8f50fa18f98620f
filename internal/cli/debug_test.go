package cli

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestServeDebug(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Setenv(debugEnv, "")
	stop, err := serveDebug(log)
	if err != nil {
		t.Fatal(err)
	}
	stop()

	for _, bad := range []string{"0.0.0.0:0", "192.0.2.1:6060", "nonsense"} {
		t.Setenv(debugEnv, bad)
		if _, err := serveDebug(log); err == nil {
			t.Errorf("%s=%s: served", debugEnv, bad)
		}
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	t.Setenv(debugEnv, addr)
	stop, err = serveDebug(log)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "goroutine profile: total ") {
		t.Fatalf("first line %q, want the goroutine total", sc.Text())
	}
}
