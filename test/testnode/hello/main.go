// Command hello is the application of test/testnode's own test: a static
// HTTP server that answers every request with its -text and the pod's
// name. With -wait-for it first waits until that URL answers (the app
// reaching its native sidecar at its own start), and says so in its
// answers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("hello", flag.ContinueOnError)
	listen := fs.String("listen", ":8080", "address to serve on")
	text := fs.String("text", "hello", "what to answer")
	waitFor := fs.String("wait-for", "", "a URL that must answer 200 before serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	reached := ""
	if *waitFor != "" {
		body, err := waitURL(ctx, *waitFor)
		if err != nil {
			return err
		}
		reached = fmt.Sprintf(" (reached %s at start: %s)", *waitFor, body)
	}
	host, _ := os.Hostname()
	srv := &http.Server{
		Addr:              *listen,
		ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, "%s from %s%s\n", *text, host, reached)
		}),
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// waitURL asks url every 100 ms, for 30 s at most, until it answers 200.
func waitURL(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &http.Client{Timeout: time.Second}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return "", err
		}
		if resp, err := c.Do(req); err == nil {
			b := make([]byte, 200)
			k, _ := resp.Body.Read(b)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return strings.TrimSpace(string(b[:k])), nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("%s did not answer: %w", url, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
