//go:build linux

package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Every test leaves no goroutine behind: the server and its connections
// end with the context that started them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEveryPipelinedRequestGetsTheWholeBody sends three requests in one
// write and reads three complete responses of the body file's bytes.
func TestEveryPipelinedRequestGetsTheWholeBody(t *testing.T) {
	const size = 300 << 10 // more than one socket buffer's worth
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, ln, int(f.Fd()), size) }()
	defer func() {
		cancel()
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	pipelineThree(t, ln.Addr().String(), size)
}

// pipelineThree sends three requests in one write to addr and reads three
// complete 200 responses of size bytes each.
func pipelineThree(t *testing.T, addr string, size int64) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /c HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i := range 3 {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != size || resp.StatusCode != 200 {
			t.Fatalf("response %d: status %d, %d bytes (%v), want 200 and %d", i, resp.StatusCode, n, err, size)
		}
	}
}

func TestListenMustBeLoopback(t *testing.T) {
	err := run(context.Background(), []string{"--listen", "0.0.0.0:0"}, io.Discard)
	if err == nil {
		t.Fatal("a non-loopback --listen was accepted")
	}
}

// TestNetHTTPModeGivesEveryPipelinedRequestTheWholeBody is the same for
// --net-http, whose connections rewind a file of their own per request.
func TestNetHTTPModeGivesEveryPipelinedRequestTheWholeBody(t *testing.T) {
	const size = 300 << 10
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveNetHTTP(ctx, ln, path, size) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serveNetHTTP: %v", err)
		}
	}()
	pipelineThree(t, ln.Addr().String(), size)
}
