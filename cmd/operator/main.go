// Command tiercache-operator runs the CacheTier controller, the Pod
// injection and CacheTier validation webhooks and (with --xds-listen) the
// control plane. See internal/operator.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tiercache/tiercache/internal/operator"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The operator keeps serving for --shutdown-delay after the first
	// signal; a second one kills it at once (the default action).
	context.AfterFunc(ctx, stop)
	if err := operator.Run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tiercache-operator:", err)
		os.Exit(1)
	}
}
