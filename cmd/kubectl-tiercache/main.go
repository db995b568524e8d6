// Command kubectl-tiercache is the kubectl plugin `kubectl tiercache`:
// purge, status and explain for Tiercache tiers. Copy the binary onto PATH
// as kubectl-tiercache. See internal/kubectlplugin.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tiercache/tiercache/internal/kubectlplugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := kubectlplugin.Run(ctx, os.Args[1:], kubectlplugin.Streams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
	}
	os.Exit(kubectlplugin.ExitCode(err))
}
