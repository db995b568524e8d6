// Command tiercache-sidecar is the caching sidecar: a reverse proxy with an
// in-process L1 in front of one application container. See
// internal/sidecar for flags.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tiercache/tiercache/internal/sidecar"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := sidecar.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tiercache-sidecar:", err)
		os.Exit(1)
	}
}
