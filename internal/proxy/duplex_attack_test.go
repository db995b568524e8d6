package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/invalidate"
)

// heldInvalidator is an Invalidator whose Invalidate says it began and
// then waits for release (at most 5 s): what an L2 round trip, or its
// timeout, takes in a sidecar with Redis.
type heldInvalidator struct {
	*invalidate.Purger
	began   chan struct{}
	release chan struct{}
}

func (h *heldInvalidator) Invalidate(ctx context.Context, urls []*url.URL) {
	select {
	case h.began <- struct{}{}:
	default:
	}
	select {
	case <-h.release:
	case <-time.After(5 * time.Second):
	}
	h.Purger.Invalidate(ctx, urls)
}

// earlyOrigin is an origin on a bare TCP listener. Its first connection
// gets a complete 200 as soon as its request header is in, without a
// byte of the body read; then it reads on until the proxy drops the
// connection, and says so on dropped. Every later request (on any
// connection) is counted and answered "smuggled".
type earlyOrigin struct {
	ln      net.Listener
	dropped chan struct{}
	later   atomic.Int64
}

func newEarlyOrigin(t *testing.T) *earlyOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &earlyOrigin{ln: ln, dropped: make(chan struct{})}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for first := true; ; first = false {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go o.serve(c, first)
		}
	}()
	return o
}

func (o *earlyOrigin) serve(c net.Conn, first bool) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for n := 0; n < 100; n++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if first && n == 0 {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
			_, _ = io.Copy(io.Discard, br)
			close(o.dropped)
			return
		}
		o.later.Add(1)
		_, _ = io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nCache-Control: no-store\r\nContent-Length: 8\r\n\r\nsmuggled")
	}
}

// An upload whose body fails (broken chunked framing, say) after the
// origin's answer came in, but before the proxy wrote it, is no more
// finished than one still on its way: what follows the failure on the
// connection is the rest of that body, never a request. The answer
// must close the connection. (uploadBody marked the body ended on any
// read error, so the answer kept the connection open, net/http in
// full-duplex mode did not see to it either, and the bytes after the
// bad chunk line were served as a request of their own.) The window is
// the answer's invalidation (pass.invalidateAfter), an L2 round trip
// in a sidecar with Redis: held open here.
func TestABodyThatFailsAfterTheOriginAnsweredIsNeverFollowedByARequest(t *testing.T) {
	o := newEarlyOrigin(t)
	inv := &heldInvalidator{began: make(chan struct{}, 1), release: make(chan struct{})}
	fo := &origin{Server: &httptest.Server{URL: "http://" + o.ln.Addr().String()}, clock: newClock()}
	f := newFixtureWith(t, "origin: {streamRequestBodies: true}", fo, func(po *Options) {
		inv.Purger = po.Invalidator.(*invalidate.Purger)
		po.Invalidator = inv
	}, nil)
	conn := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
	if _, err := io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"); err != nil {
		t.Fatal(err)
	}
	select { // the origin's 200 is in; the proxy invalidates /upload
	case <-inv.began:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin's answer never reached the proxy's invalidation")
	}
	// A chunk-size line that is no number, and what a front proxy
	// sharing the connection would send next.
	if _, err := io.WriteString(conn, "zz\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select { // the transport read the bad line and dropped the origin
	case <-o.dropped:
	case <-time.After(5 * time.Second):
		t.Fatal("the proxy never read the broken chunk")
	}
	close(inv.release)
	br := bufio.NewReader(conn)
	res, b := readAnswer(t, br)
	if res.StatusCode != http.StatusOK || b != "ok" {
		t.Errorf("got %d %q, want the origin's 200 \"ok\"", res.StatusCode, b)
	}
	if !res.Close {
		t.Errorf("the answer keeps the connection open after a body that never ended")
	}
	if res, err := http.ReadResponse(br, nil); err == nil {
		b, _ := io.ReadAll(res.Body)
		t.Errorf("the bytes after the broken chunk were served as a request: %d %q", res.StatusCode, b)
	}
	if n := o.later.Load(); n != 0 {
		t.Errorf("the origin got %d requests after the upload, want none", n)
	}
}

// A client that uploads, has the origin answer early with a large body,
// and then neither sends nor reads holds nothing for long: the send
// timeout ends the answer it does not take, and with it the exchange
// and the wait on its body (endUpload).
func TestAnUploaderThatStopsBothWaysAfterALargeEarlyAnswerIsClosed(t *testing.T) {
	const size = 4 << 20
	o := newOriginWith(t, func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Length", fmt.Sprint(size))
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		body := payload(3, size)
		for off := 0; off < size; off += 16 << 10 {
			if _, err := w.Write(body[off : off+16<<10]); err != nil {
				return
			}
		}
	}, serveSmallSend)
	const sendTimeout = time.Second
	f := newFixtureWith(t, "origin: {streamRequestBodies: true, idleTimeout: 30s}", o, withTinyOriginWindow, serveSendTimeout(sendTimeout))
	conn := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\n"+strings.Repeat("b", 1024)); err != nil {
		t.Fatal(err)
	}
	// Neither sends nor reads: the exchange must end by the send timeout.
	waitFor(t, func() bool {
		return o.count() == 1 && f.px.respBudget.left.Load() == ResponseBufferBudget && time.Since(start) > sendTimeout
	}, "the send timeout to end the early answer")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, conn)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the stalled connection: %v (after %d bytes): it was not closed", err, n)
	}
	if n >= size {
		t.Fatalf("the client got %d bytes, the whole answer", n)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("took %v", d)
	}
}
