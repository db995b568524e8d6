package controlplane

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func TestServeGivesUpOnAStuckStreamAtTheDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	entered := make(chan struct{}, 1)
	srv, err := NewServer(Options{Logger: quiet, ShutdownTimeout: 300 * time.Millisecond, OnNACK: func(NACK) {
		entered <- struct{}{}
		<-release // a hook that never returns on its own
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, l) }()

	sc := startSidecar(t, l.Addr().String(), "shop", "frontend", "web-0", nil)
	bad, v := mustEncode(t, "shop/frontend", invalidConfig())
	srv.publishResource("shop/frontend", "shop/frontend", v, bad)
	select {
	case <-entered:
	case <-time.After(waitLong):
		t.Fatal("no NACK reached the hook")
	}

	start := time.Now()
	cancel()
	select {
	case err := <-served:
		if !errors.Is(err, ErrShutdownTimeout) {
			t.Errorf("Serve = %v, want ErrShutdownTimeout", err)
		}
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("Serve gave up after %s, before the 300ms deadline", d)
		}
	case <-time.After(waitLong):
		t.Fatal("Serve did not return with a stuck stream")
	}
	sc.stop()
}
