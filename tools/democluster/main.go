// Command democluster is what `make demo-cluster` runs (through
// hack/demo-cluster.sh): Tiercache in real pods on a real single-node
// Kubernetes cluster, in one command. It starts the node of
// test/testnode (every component inside a network namespace of its own),
// loads the images of `make image` and a Redis image made from the tool
// cache's redis-server into the node's containerd, installs the chart
// with its bundled Redis, applies a CacheTier, deploys the demo origin
// annotated with tiercache.io/tier behind a Service, and shows MISS →
// HIT → purge → MISS through that Service. It then prints commands to
// try and keeps the cluster up until SIGINT or SIGTERM, when it tears
// everything down (processes, namespaces with their links and iptables
// rules, mounts, cgroups, files). With -oneshot it tears down right after
// the showcase and exits 1 unless it saw MISS, HIT, then MISS.
//
// It is tooling, not part of the product; it needs Linux, root and
// namespaces, as the real-node tests do.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		// From now on every signal is ignored, by this process and the
		// commands the teardown runs (they inherit it): a second ^C
		// must not cut the teardown short.
		signal.Ignore(os.Interrupt, syscall.SIGTERM)
		fmt.Fprintf(os.Stderr, "\ndemocluster: %v: stopping (the teardown takes a few seconds; further ^C are ignored)\n", s)
		cancel()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(2)
	case errors.Is(err, errInterrupted):
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "democluster:", err)
		os.Exit(1)
	}
}
