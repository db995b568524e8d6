// Command demo-origin is a small HTTP application for the demo and the
// benchmarks: routes with known caching headers, an optional per-request
// latency and worker-pool limit, and a /stats endpoint that counts the
// requests that reached it. It is tooling (make demo, make bench, the e2e
// test), not part of the product. It is hand-written because it is the
// application under the cache: its routes are the caching headers the
// demo and the benchmarks show, and /stats (requests by class, reset
// between runs) is the origin request count the benchmarks publish; no
// library serves that.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo-origin:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled, then shuts down gracefully.
func run(ctx context.Context, args []string, logw io.Writer) error {
	fs := flag.NewFlagSet("demo-origin", flag.ContinueOnError)
	fs.SetOutput(logw)
	listen := fs.String("listen", "127.0.0.1:8081", "address to serve on")
	var cfg config
	fs.DurationVar(&cfg.Latency, "latency", 0, "latency added to every request (except /stats)")
	fs.IntVar(&cfg.MaxConcurrency, "max-concurrency", 0, "requests served at once; the rest queue for a slot (0 = unlimited)")
	fs.IntVar(&cfg.BodySize, "body-size", 1024, "default body size of /bytes/<key>")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	h, err := newOrigin(cfg)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(logw, "demo-origin listening on http://%s (latency %s, max-concurrency %d)\n",
		ln.Addr(), cfg.Latency, cfg.MaxConcurrency)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
