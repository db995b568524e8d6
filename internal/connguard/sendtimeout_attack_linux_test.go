package connguard

import (
	"bufio"
	"bytes"
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
	expectDeadlineCut(t, results, path, timeout)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: response %v, %v", path, resp, err)
	}
	expectShortBody(t, resp.Body, bigBody)
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

// TestAKeepAliveConnectionIdleLongerThanTheSendTimeoutServesItsNextRequests:
// the deadline armed for a response passes while the connection is idle
// between requests (3 send timeouts); it must not cut what comes next:
// a large response read at full speed arrives whole, and so does a POST
// that waits for 100 Continue before sending its body (the interim
// response is a write too).
func TestAKeepAliveConnectionIdleLongerThanTheSendTimeoutServesItsNextRequests(t *testing.T) {
	addr, content, results := sendServer(t, testSendTimeout)
	c := dialSmall(t, addr)
	br := bufio.NewReaderSize(c, 4096)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	readSmall(t, br)

	<-time.After(3 * testSendTimeout) // idle: the scenario, not a barrier
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /mem HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, content) {
		t.Fatalf("/mem after an idle time: %d bytes, %v; want the whole body", len(got), err)
	}
	if res := waitResult(t, results, 10*time.Second, "/mem"); res.err != nil || res.n != bigBody {
		t.Fatalf("the copy = %d bytes, %v", res.n, res.err)
	}

	<-time.After(3 * testSendTimeout)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != "HTTP/1.1 100 Continue\r\n" {
		t.Fatalf("interim response %q, %v", line, err)
	}
	if blank, err := br.ReadString('\n'); err != nil || blank != "\r\n" {
		t.Fatalf("after 100 Continue: %q, %v", blank, err)
	}
	if _, err := io.WriteString(c, "hello"); err != nil {
		t.Fatal(err)
	}
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(resp.Body); err != nil || string(b) != "hello" {
		t.Fatalf("POST after an idle time: %q, %v", b, err)
	}
}

// TestATrickleReaderIsClosedAtTheSendTimeout decides what a client that
// reads one byte every half send timeout is: no progress. Its kernel
// does not reopen the receive window for a byte (RFC 1122's silly window
// avoidance), so the server's socket takes nothing, and it is closed
// after the send timeout as one that reads nothing is. nginx behaves
// alike: its send_timeout is re-armed by writes that succeed, and none
// does. A reader that frees a window's worth now and then is served
// (TestASlowButSteadyReaderGetsTheWholeBody).
func TestATrickleReaderIsClosedAtTheSendTimeout(t *testing.T) {
	addr, _, results := sendServer(t, testSendTimeout)
	c := dialSmall(t, addr)
	resp, _ := getHeader(t, c, "/mem")
	var res copyResult
	read := 0
	tick := time.NewTicker(testSendTimeout / 2)
	defer tick.Stop()
trickle:
	for i := 0; i < 40; i++ {
		select {
		case res = <-results:
			break trickle
		case <-tick.C:
		}
		var b [1]byte
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := resp.Body.Read(b[:]); err != nil {
			t.Fatalf("after %d bytes: %v", read, err)
		}
		read++
	}
	if res.path != "/mem" {
		t.Fatalf("the handler still sent to a client reading a byte every %s after %d bytes", testSendTimeout/2, read)
	}
	if read < 2 {
		t.Fatalf("the client read %d bytes before the cut: not a trickle", read)
	}
	if !errors.Is(res.err, os.ErrDeadlineExceeded) || res.n >= bigBody {
		t.Fatalf("the copy = %d bytes, %v; want fewer than %d and the deadline's error", res.n, res.err, bigBody)
	}
}

// TestDetachDuringAWriteOnAnotherGoroutineLiftsItsDeadline: a handler
// hijacks the connection and starts writing a large payload on another
// goroutine before it calls Detach; the write, in progress (the peer took
// its first KiB and then nothing), was armed by the send timeout (the
// hijack had lifted net/http's deadline, which arms afresh). Detach
// lifts it: the peer idle for 3 send timeouts then gets the whole
// payload, and the write succeeds.
func TestDetachDuringAWriteOnAnotherGoroutineLiftsItsDeadline(t *testing.T) {
	payload := bytes.Repeat([]byte("frames of a tunnel "), bigBody/19)
	written := make(chan error, 1)
	detach := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upgrade" {
			_, _ = w.Write(payload[:smallBody])
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			written <- err
			return
		}
		defer conn.Close()
		if _, err := brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n\r\n"); err != nil {
			written <- err
			return
		}
		if err := brw.Flush(); err != nil {
			written <- err
			return
		}
		wrote := make(chan error, 1)
		go func() {
			_, err := conn.Write(payload)
			wrote <- err
		}()
		select {
		case <-detach:
		case <-time.After(10 * time.Second):
		}
		Detach(r.Context())
		written <- <-wrote
	})
	c := dialSmall(t, serveSmall(t, h, testSendTimeout))
	br := bufio.NewReaderSize(c, 4096)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /small HTTP/1.1\r\nHost: x\r\n\r\nGET /upgrade HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	readSmall(t, br) // arms the send timeout just before the hijack
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v, %v", resp, err)
	}
	head := make([]byte, 1<<10)
	if _, err := io.ReadFull(br, head); err != nil || !bytes.Equal(head, payload[:len(head)]) {
		t.Fatalf("the payload's first KiB: %v", err)
	}
	close(detach)                     // the write is in progress, and blocked
	<-time.After(3 * testSendTimeout) // the peer reads nothing
	select {
	case err := <-written:
		t.Fatalf("the write to a peer that reads nothing ended early: %v", err)
	default:
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, err := io.ReadAll(io.LimitReader(br, int64(len(payload)-len(head))))
	if err != nil || !bytes.Equal(rest, payload[len(head):]) {
		t.Fatalf("the peer read %d more bytes (%v), want the %d written", len(rest), err, len(payload)-len(head))
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
