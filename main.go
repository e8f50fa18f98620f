package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/pipeshard/pipeshard/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal ends ctx (a node then drains); a second one
	// finds the default handling back and ends the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
