package connguard

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"testing"
	"time"
)

// attackSendTimeout is longer than testSendTimeout so that its slack
// (an eighth, 500 ms) comfortably covers both the client's turnaround
// between two requests on a loaded machine and the last progress the
// kernel makes for a client that reads nothing (its first zero-window
// probe, 200-260 ms after the buffers filled, seen to move a few more
// bytes): what these tests probe happens within the slack.
const attackSendTimeout = 4 * time.Second

// expectCut asserts that the handler's copy for path ended with the
// deadline's error, short, no sooner than the send timeout, and that the
// client, reading at last through br, gets a short body and the end of
// the connection.
func expectCut(t *testing.T, c net.Conn, br *bufio.Reader, results <-chan copyResult, path string, timeout time.Duration) {
	t.Helper()
	res := waitResult(t, results, 10*time.Second, path)
	if !errors.Is(res.err, os.ErrDeadlineExceeded) || res.n >= bigBody {
		t.Fatalf("the copy = %d bytes, %v; want fewer than %d and the deadline's error", res.n, res.err, bigBody)
	}
	if res.took < timeout {
		t.Fatalf("the copy gave up after %s, before the send timeout (%s)", res.took, timeout)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: response %v, %v", path, resp, err)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	if err == nil || got >= bigBody {
		t.Fatalf("the client read %d bytes (%v), want a short body and an error", got, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the client waited for more after %d bytes: the connection was not closed", got)
	}
}

// TestTheSendTimeoutBoundsTheNextResponseOnAKeepAliveConnection: net/http
// lifts the write deadline after every response (finishRequest). A
// response that follows within the arming slack of the previous one (a
// keep-alive request sent right after the last answer was read, or a
// pipelined one) must still be bounded: a client that reads nothing of
// it is closed after the send timeout, whichever way the body is sent.
// Before the fix arm trusted its own throttle (the deadline it set was
// "still more than the timeout away") and the second response had no
// deadline at all: its handler was still sending 10 s later.
func TestTheSendTimeoutBoundsTheNextResponseOnAKeepAliveConnection(t *testing.T) {
	addr, _, results := sendServer(t, attackSendTimeout)
	// One path each, to keep the test short: the arming does not depend
	// on the path (TestAClientThatStopsReadingIsClosedAfterTheSendTimeout
	// covers every path on a fresh connection).
	t.Run("keep-alive/mem", func(t *testing.T) {
		c := dialSmall(t, addr)
		br := bufio.NewReaderSize(c, 4096)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		readSmall(t, br)
		// At once, as a browser reusing its connection would; then the
		// client reads nothing.
		if _, err := io.WriteString(c, "GET /mem HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		expectCut(t, c, br, results, "/mem", attackSendTimeout)
	})
	t.Run("pipelined/region", func(t *testing.T) {
		c := dialSmall(t, addr)
		br := bufio.NewReaderSize(c, 4096)
		if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\nGET /region HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		// The client reads nothing until the handler is done: the small
		// answer waits in its socket, the large one blocks.
		res := waitResult(t, results, 10*time.Second, "/region")
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		readSmall(t, br)
		done := make(chan copyResult, 1)
		done <- res
		expectCut(t, c, br, done, "/region", attackSendTimeout)
	})
}

// readSmall reads a response to /small from br, whole.
func readSmall(t *testing.T, br *bufio.Reader) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.Copy(io.Discard, resp.Body); err != nil || got != smallBody {
		t.Fatalf("/small: %d bytes, %v", got, err)
	}
}
