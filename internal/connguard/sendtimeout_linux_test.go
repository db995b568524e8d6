package connguard

import (
	"bufio"
	"bytes"
	"errors"
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

// testSendTimeout is short, so that the tests take seconds; bigBody is
// many times what the (shrunk) socket buffers of both ends hold.
const (
	testSendTimeout = 300 * time.Millisecond
	bigBody         = 4 << 20
	smallSocketBuf  = 32 << 10
	smallBody       = 1 << 10
)

// smallBufListener shrinks every accepted socket's send buffer (which
// also stops the kernel's autotuning), so that a client that stops
// reading blocks the server's writes after a few hundred KiB rather than
// several MiB. It hands on the *net.TCPConn itself: the guard's
// connection finds its socket as in production.
type smallBufListener struct{ net.Listener }

func (l smallBufListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		err = c.(*net.TCPConn).SetWriteBuffer(smallSocketBuf)
	}
	return c, err
}

// copyResult is what a handler's body copy returned, and how long it took.
type copyResult struct {
	path string
	n    int64
	err  error
	took time.Duration
}

// sendServer serves a bigBody-byte body on every path, each the way a
// response of the proxy sends one:
//   - /region: a FileRegion (a file-backed hit: bodystore.Section), to
//     the connection's ReadFrom, sendfile from an offset;
//   - /file: an *io.LimitedReader of an *os.File, as bodystore's
//     Follower.WriteTo hands over a fill's file, to ReadFrom as well;
//   - /mem: one Write of the whole body (an in-memory hit);
//   - /chunks: 32 KiB Writes, each flushed (a streamed pass-through);
//
// and reports every copy's outcome on results; /small is smallBody bytes
// in one Write (a small hit), and a POST is answered with its own body:
// neither reports. timeout 0: no send timeout.
func sendServer(t *testing.T, timeout time.Duration) (addr string, content []byte, results chan copyResult) {
	t.Helper()
	content = make([]byte, bigBody)
	for i := range content {
		content[i] = byte(i*7/3 + i>>16)
	}
	path := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	shared, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { shared.Close() })
	results = make(chan copyResult, 8)
	var reads atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		if r.Method == http.MethodPost { // echoes its body (100-continue)
			b, err := io.ReadAll(r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			_, _ = w.Write(b)
			return
		}
		if r.URL.Path == "/small" { // a response the socket buffers hold whole
			w.Header().Set("Content-Length", strconv.Itoa(smallBody))
			_, _ = w.Write(content[:smallBody])
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(bigBody))
		w.WriteHeader(http.StatusOK)
		start := time.Now()
		var n int64
		var err error
		switch r.URL.Path {
		case "/region":
			BodyFollows(r.Context())
			w.(http.Flusher).Flush()
			n, err = io.Copy(w, &region{fd: int(shared.Fd()), n: bigBody, reads: &reads})
			Push(r.Context())
		case "/file":
			f, oerr := os.Open(path)
			if oerr != nil {
				panic(oerr)
			}
			defer f.Close()
			w.(http.Flusher).Flush()
			n, err = io.Copy(w, &io.LimitedReader{R: f, N: bigBody})
		case "/mem":
			var k int
			k, err = w.Write(content)
			n = int64(k)
		case "/chunks":
			rc := http.NewResponseController(w)
			for n < bigBody && err == nil {
				var k int
				k, err = w.Write(content[n : n+32<<10])
				n += int64(k)
				if err == nil {
					err = rc.Flush()
				}
			}
		}
		results <- copyResult{r.URL.Path, n, err, time.Since(start)}
	})
	addr = serveSmall(t, h, timeout)
	t.Cleanup(func() { // before serveSmall's shutdown
		if reads.Load() != 0 {
			t.Errorf("the region was read %d times: not sent with sendfile", reads.Load())
		}
	})
	return addr, content, results
}

// serveSmall serves h through a guarded listener with the send timeout
// and small socket buffers (smallBufListener) until the test ends, and
// returns its address.
func serveSmall(t *testing.T, h http.Handler, timeout time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: Middleware(h), ConnContext: ConnContext, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(smallBufListener{ln}, SendTimeout(timeout))) }()
	t.Cleanup(func() { shutdown(t, srv, done) })
	return ln.Addr().String()
}

// dialSmall connects with a small receive buffer, so that little of a
// body waits in the client's kernel.
func dialSmall(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	tc := c.(*net.TCPConn)
	if err := tc.SetReadBuffer(smallSocketBuf); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tc.Close() })
	return tc
}

// getHeader sends GET path on c and reads the response's header.
func getHeader(t *testing.T, c net.Conn, path string) (*http.Response, *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 4096)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", path, resp.StatusCode)
	}
	return resp, br
}

// waitResult returns the outcome of the copy for path, passing over
// those of earlier requests (of a subtest that failed).
func waitResult(t *testing.T, results <-chan copyResult, within time.Duration, path string) copyResult {
	t.Helper()
	deadline := time.After(within)
	for range 16 {
		select {
		case res := <-results:
			if res.path == path {
				return res
			}
		case <-deadline:
			t.Fatalf("%s: the handler was still sending %s later", path, within)
		}
	}
	t.Fatalf("%s: no outcome among 16", path)
	return copyResult{}
}

// TestAClientThatStopsReadingIsClosedAfterTheSendTimeout: a client that
// asks for a body many times the socket buffers and reads nothing after
// the header holds the handler for the send timeout (plus at most its
// slack), not for ever: the handler's copy ends with the deadline's
// error, short, whichever way the body is sent (sendfile of a region or
// of a file, one large Write, flushed small Writes). The server closes
// the connection: the client, reading at last, gets a short body and the
// end of the connection, not a wait. Without a send timeout, nothing
// ends it (the handlers would still be sending after 10 s).
func TestAClientThatStopsReadingIsClosedAfterTheSendTimeout(t *testing.T) {
	addr, _, results := sendServer(t, testSendTimeout)
	for _, path := range []string{"/region", "/file", "/mem", "/chunks"} {
		t.Run(path[1:], func(t *testing.T) {
			c := dialSmall(t, addr)
			resp, _ := getHeader(t, c, path)
			// The client reads nothing more until the handler is done.
			expectDeadlineCut(t, results, path, testSendTimeout)
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			expectShortBody(t, resp.Body, bigBody)
		})
	}
}

// TestASlowButSteadyReaderGetsTheWholeBody: a client that reads 256 KiB
// every third of the send timeout takes several send timeouts over the
// body, yet gets all of it, exact, whichever way it is sent: the deadline
// is re-armed by every piece of progress of a sendfile or a large Write,
// not set once for the whole call (which would cut it, as a
// WriteTimeout would).
func TestASlowButSteadyReaderGetsTheWholeBody(t *testing.T) {
	addr, content, results := sendServer(t, testSendTimeout)
	const step = 256 << 10
	for _, path := range []string{"/region", "/file", "/mem", "/chunks"} {
		t.Run(path[1:], func(t *testing.T) {
			c := dialSmall(t, addr)
			start := time.Now()
			resp, _ := getHeader(t, c, path)
			tick := time.NewTicker(testSendTimeout / 3)
			defer tick.Stop()
			got := make([]byte, 0, bigBody)
			buf := make([]byte, step)
			for i := 0; len(got) < bigBody && i < 2*bigBody/step; i++ {
				<-tick.C
				_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
				k, err := io.ReadFull(resp.Body, buf[:min(step, bigBody-len(got))])
				got = append(got, buf[:k]...)
				if err != nil {
					t.Fatalf("after %d bytes (%s): %v", len(got), time.Since(start), err)
				}
			}
			if !bytes.Equal(got, content) {
				t.Fatalf("%d bytes that are not the body", len(got))
			}
			if took := time.Since(start); took < 3*testSendTimeout {
				t.Fatalf("the body took %s, less than 3 send timeouts: the test proves nothing", took)
			}
			res := waitResult(t, results, 10*time.Second, path)
			if res.err != nil || res.n != bigBody {
				t.Fatalf("the copy = %d bytes, %v; want %d and no error", res.n, res.err, bigBody)
			}
		})
	}
}

// TestAHijackedConnectionIsNotBoundByTheSendTimeout: once a handler has
// hijacked the connection and called Detach (the proxy's WebSocket
// tunnel), the send timeout no longer applies, though a response on the
// same connection armed it before: the connection idle for 3 send
// timeouts stays open, and a large write the peer does not read for 3
// send timeouts completes once it reads.
func TestAHijackedConnectionIsNotBoundByTheSendTimeout(t *testing.T) {
	payload := bytes.Repeat([]byte("websocket frames "), bigBody/17)
	written := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upgrade" {
			_, _ = w.Write(payload[:100<<10])
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			written <- err
			return
		}
		Detach(r.Context())
		defer conn.Close()
		if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			written <- err
			return
		}
		if err := brw.Flush(); err != nil {
			written <- err
			return
		}
		// The peer's "go" comes after it was idle; then a large write it
		// does not read for a while.
		line, err := brw.ReadString('\n')
		if err != nil || line != "go\n" {
			written <- errors.Join(err, errors.New("read "+strconv.Quote(line)))
			return
		}
		_, err = conn.Write(payload)
		written <- err
	})
	c := dialSmall(t, serveSmall(t, h, testSendTimeout))
	resp, br := getHeader(t, c, "/plain") // arms the send timeout
	if got, err := io.Copy(io.Discard, resp.Body); err != nil || got != 100<<10 {
		t.Fatalf("plain response: %d bytes, %v", got, err)
	}
	if _, err := io.WriteString(c, "GET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	<-time.After(3 * testSendTimeout) // idle, both ways
	if _, err := io.WriteString(c, "go\n"); err != nil {
		t.Fatalf("the idle hijacked connection was closed: %v", err)
	}
	select {
	case err := <-written:
		t.Fatalf("a write of %d bytes to a peer that reads nothing ended early: %v", len(payload), err)
	case <-time.After(3 * testSendTimeout): // the peer reads nothing
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(io.LimitReader(br, int64(len(payload))))
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("the peer read %d bytes (%v), want the %d written", len(got), err, len(payload))
	}
	select {
	case err := <-written:
		if err != nil {
			t.Fatalf("the write to a peer that read late failed: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the write did not complete")
	}
}

// expectShortBody reads the rest of a response of size bytes that the server
// gave up on: it must end short, with an error, and not by the client's
// own read deadline (the connection was closed, not left open).
// expectDeadlineCut waits for path's copy to end, and expects it cut by
// the write deadline, short of the body, no sooner than timeout.
func expectDeadlineCut(t *testing.T, results <-chan copyResult, path string, timeout time.Duration) {
	t.Helper()
	res := waitResult(t, results, 10*time.Second, path)
	if !errors.Is(res.err, os.ErrDeadlineExceeded) || res.n >= bigBody {
		t.Fatalf("the copy = %d bytes, %v; want fewer than %d and the deadline's error", res.n, res.err, bigBody)
	}
	if res.took < timeout {
		t.Fatalf("the copy gave up after %s, before the send timeout (%s)", res.took, timeout)
	}
}

func expectShortBody(t *testing.T, body io.Reader, size int64) {
	t.Helper()
	got, err := io.Copy(io.Discard, body)
	if err == nil || got >= size {
		t.Fatalf("the client read %d bytes (%v), want a short body and an error", got, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the client waited for more after %d bytes: the connection was not closed", got)
	}
}
