package node

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestClosePartsGivesUpOnAHang(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hang := make(chan struct{})
		var closed []string
		var log strings.Builder
		start := time.Now()
		err := CloseParts(slog.New(slog.NewTextHandler(&log, nil)),
			ClosePart{"a", func() { closed = append(closed, "a") }},
			ClosePart{"stuck", func() { <-hang }},
			ClosePart{"c", func() { closed = append(closed, "c") }},
		)
		if !errors.Is(err, ErrCloseTimeout) || !strings.Contains(err.Error(), "stuck") {
			t.Errorf("err %v, want ErrCloseTimeout naming the stuck part", err)
		}
		if d := time.Since(start); d != closeTimeout {
			t.Errorf("took %v, want %v", d, closeTimeout)
		}
		if strings.Join(closed, ",") != "a,c" {
			t.Errorf("closed %v, want a and c", closed)
		}
		if !strings.Contains(log.String(), "part=stuck") || !strings.Contains(log.String(), "node.CloseParts") {
			t.Errorf("log does not name the part or show its stack:\n%s", log.String())
		}
		close(hang)
	})
}

func TestClosePartsInOrder(t *testing.T) {
	var got []string
	err := CloseParts(slog.New(slog.DiscardHandler),
		ClosePart{"x", func() { got = append(got, "x") }},
		ClosePart{"y", func() { got = append(got, "y") }})
	if err != nil || strings.Join(got, "") != "xy" {
		t.Fatalf("err %v, closed %v", err, got)
	}
}
