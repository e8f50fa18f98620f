package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
)

// sse writes server-sent events: "data: JSON\n\n" per event, flushed at
// once. The status and headers go out with the first event, so that an
// error before any output is still answered with its status code.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	mu      sync.Mutex // one event at a time, from every choice's goroutine
	started bool
	err     error // the first write error: the client is gone
}

func (e *sse) start() {
	if e.started {
		return
	}
	e.started = true
	h := e.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	e.w.WriteHeader(http.StatusOK)
}

// send writes v as one event.
func (e *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return e.write("data: " + string(b) + "\n\n")
}

// done ends the stream as OpenAI's does.
func (e *sse) done() error { return e.write("data: [DONE]\n\n") }

func (e *sse) write(s string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	e.start()
	if _, err := fmt.Fprint(e.w, s); err != nil {
		e.err = fmt.Errorf("%w: %w", errClientGone, err)
		return e.err
	}
	if err := e.rc.Flush(); err != nil {
		e.err = fmt.Errorf("%w: %w", errClientGone, err)
	}
	return e.err
}
