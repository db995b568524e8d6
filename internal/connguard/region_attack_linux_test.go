package connguard

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// TestAFileRegionToAClientThatStopsReadingEndsAtTheWriteDeadline: a
// client that reads the header and then nothing cannot hold the handler
// (and its descriptor) past the server's WriteTimeout: sendfile waits
// for the socket through the connection's poller, which honours the
// write deadline, and what was sent is counted, so the response is short
// and the connection is closed.
func TestAFileRegionToAClientThatStopsReadingEndsAtTheWriteDeadline(t *testing.T) {
	const size = 64 << 20 // far more than the socket buffers hold
	path := filepath.Join(t.TempDir(), "body")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	results := make(chan result, 1)
	closed := make(chan struct{}, 1)
	var reads atomic.Int32
	srv := &http.Server{
		Handler: Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Header().Set("Content-Length", strconv.Itoa(size))
			w.WriteHeader(http.StatusOK)
			BodyFollows(r.Context())
			w.(http.Flusher).Flush()
			n, err := io.Copy(w, &region{fd: int(f.Fd()), n: size, reads: &reads})
			Push(r.Context())
			results <- result{n, err}
		})),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		WriteTimeout:      300 * time.Millisecond,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateClosed {
				closed <- struct{}{}
			}
		},
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln)) }()
	defer shutdown(t, srv, done)

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	// The client reads nothing more until the handler is done.
	var res result
	select {
	case res = <-results:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler is still sending 20 s after a 300 ms write deadline")
	}
	if res.err == nil || res.n >= size {
		t.Fatalf("io.Copy = %d, %v; want fewer than %d bytes and the deadline's error", res.n, res.err, size)
	}
	if reads.Load() != 0 {
		t.Fatalf("the region was read %d times, want sendfile only", reads.Load())
	}
	// The server closes the connection, and what reaches the client is
	// short: the connection ends before the body does.
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("the server kept the connection of a short response")
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	expectShortBody(t, resp.Body, int64(size))
}

// TestAFileRegionSendfileCannotReadIsSentWithRead: a file that sendfile
// refuses before sending anything (EINVAL: a /proc file here, or a file
// opened with O_DIRECT) is copied with Read instead, whole.
func TestAFileRegionSendfileCannotReadIsSentWithRead(t *testing.T) {
	const path = "/proc/self/status"
	want, err := os.ReadFile(path)
	if err != nil || len(want) < 20 {
		t.Skipf("no %s: %v", path, err)
	}
	var reads atomic.Int32
	url := serveRegions(t, path, &reads)
	resp, err := http.Get(url + "/?off=0&n=20")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(got) != string(want[:20]) {
		t.Fatalf("read %q (%v), want %q", got, err, want[:20])
	}
	if reads.Load() == 0 {
		t.Fatal("the region was not read: sendfile's EINVAL was not fallen back from")
	}
}
