package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// An origin may answer before it has read the request body (a 401, a 404
// for a path it does not serve, a 413), and a client may stop sending
// its body. The client must still get the origin's answer, and soon:
// net/http reads a request body that the handler left unread before it
// writes the answer's header (and a read in flight on the transport's
// goroutine holds the body's lock), so the answer waited on a client
// that sends nothing, with no timeout: one connection and goroutine held
// for as long as the client liked, for every client doing it, beyond
// --max-connections' reach (it closes idle connections only).
func TestAClientThatStopsSendingAfterTheOriginAnsweredGetsTheAnswer(t *testing.T) {
	for _, c := range []struct {
		name, cfg, framing string
	}{
		{"announced larger than the buffer", "", "Content-Length: 4194304"},
		{"streamed", "streamRequestBodies: true, ", "Content-Length: 65536"},
		{"chunked past the buffer", "requestBuffer: 16Ki, ", "Transfer-Encoding: chunked"},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				// Answer at once, as servers other than net/http do: by
				// default it would read up to 256 KiB of the body first.
				if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
					t.Errorf("origin: %v", err)
				}
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, "who are you")
			})
			f := newFixtureWith(t, fmt.Sprintf("origin: {%sidleTimeout: 30s}", c.cfg), o, nil, nil)
			conn := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
			part := strings.Repeat("b", 32<<10)
			if strings.Contains(c.framing, "chunked") {
				part = fmt.Sprintf("%x\r\n%s\r\n", len(part), part)
			}
			if _, err := io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\n"+c.framing+"\r\n\r\n"+part); err != nil {
				t.Fatal(err)
			}
			// ... and nothing more.
			start := time.Now()
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("no answer within %s to a client that stopped sending after the origin answered: %v", time.Since(start).Round(time.Millisecond), err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusUnauthorized || string(b) != "who are you" {
				t.Fatalf("got %d %q, want the origin's 401 \"who are you\"", res.StatusCode, b)
			}
			if !res.Close {
				t.Errorf("the answer keeps the connection open, but the rest of the client's body is still to come on it")
			}
			// What the client sends next is the rest of its body, never a
			// request of its own, and the connection is closed soon, not
			// held for as long as the client likes.
			io.WriteString(conn, "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
			closedBy := time.Now().Add(5 * time.Second)
			conn.SetReadDeadline(closedBy)
			if n, err := conn.Read(make([]byte, 1024)); err == nil || time.Now().After(closedBy) {
				t.Errorf("after the answer: read %d bytes, %v; want the connection closed within 5s", n, err)
			}
			if n := o.count(); n != 1 {
				t.Errorf("the origin got %d requests, want 1: the rest of a body was taken for a request", n)
			}
		})
	}
}

// A body that breaks off malformed while it is forwarded is answered 400,
// and the connection is not used again: what follows the malformed chunk
// is never taken for a request (net/http's own check for this is off in
// full-duplex mode, see watchdog.sending).
func TestAMalformedForwardedBodyClosesTheConnection(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "got it")
	})
	f := newFixtureWith(t, "origin: {streamRequestBodies: true, idleTimeout: 30s}", o, nil, nil)
	conn := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
	if _, err := io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"+
		"4\r\nabcd\r\nzz\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	res, _ := readAnswer(t, br)
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d, want 400 for a malformed chunked body", res.StatusCode)
	}
	if !res.Close {
		t.Errorf("the 400 keeps the connection open after a body that broke off")
	}
	if next, err := http.ReadResponse(br, nil); err == nil {
		t.Errorf("a second answer (%d) on the connection: what followed the malformed chunk was taken for a request", next.StatusCode)
	}
	if n := o.count(); n > 1 {
		t.Errorf("the origin got %d requests, want at most the upload", n)
	}
}
