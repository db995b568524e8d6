package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// writtenOrigin answers every request with size bytes of an uncacheable
// body (no-store), written 16 KiB at a time, counting what its writes
// handed to the connection.
func writtenOrigin(size int, written *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", fmt.Sprint(size))
		body := payload(7, size)
		for off := 0; off < size; off += 16 << 10 {
			n, err := w.Write(body[off:min(size, off+16<<10)])
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}
}

// withTinyOriginWindow makes the proxy's origin connections receive
// through a 4 KiB window, so that the kernel holds next to nothing of a
// response between the origin and the proxy.
func withTinyOriginWindow(po *Options) {
	po.Transport = &http.Transport{DialContext: tinyWindowDialer().DialContext}
}

// stalledClient sends GET path over a connection with a tiny receive
// window and reads nothing until read is called, which reads the whole
// response.
func stalledClient(t *testing.T, addr, path string) (read func() (*http.Response, []byte)) {
	t.Helper()
	conn, err := tinyWindowDialer().Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr)
	return func() (*http.Response, []byte) {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading the response: %v", err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("reading the body: %v", err)
		}
		return resp, b
	}
}

// A response that is not stored is read from the origin ahead of a
// client that reads nothing, up to ResponseBufferSize: the application
// that writes it is done with it while the client still has it all to
// read. Paths: a passed request, and a GET whose answer turns out
// uncacheable.
func TestAClientThatReadsNothingDoesNotHoldTheOriginsResponse(t *testing.T) {
	const size = 480 << 10 // under ResponseBufferSize
	for name, path := range map[string]string{"a GET whose answer is not stored": "/get", "a passed request": "/pass"} {
		t.Run(name, func(t *testing.T) {
			var written atomic.Int64
			o := newOriginWith(t, writtenOrigin(size, &written), serveSmallSend)
			// Small socket buffers on every hop, so that what the
			// kernel holds does not hide what the proxy holds.
			f := newFixtureWith(t, `rules: [{name: pass, match: {pathPrefix: /pass}, bypass: true}]`, o, withTinyOriginWindow, serveSmallSend)
			read := stalledClient(t, f.srv.Listener.Addr().String(), path)
			deadline := time.Now().Add(10 * time.Second)
			for written.Load() < size {
				if time.Now().After(deadline) {
					t.Fatalf("the origin wrote %d of its %d bytes while the client read nothing: the client holds the origin's response", written.Load(), size)
				}
				time.Sleep(5 * time.Millisecond)
			}
			resp, b := read()
			if resp.StatusCode != 200 || !bytes.Equal(b, payload(7, size)) {
				t.Fatalf("got %d with %d bytes, want 200 and the %d bytes the origin sent", resp.StatusCode, len(b), size)
			}
			waitFor(t, func() bool { return f.px.respBudget.left.Load() == ResponseBufferBudget }, "the response buffer budget to come back whole")
		})
	}
}

// A stream reaches its client as it comes: each event is relayed before
// the origin sends the next, which it does only once the client has the
// last one; whether it is Server-Sent Events (never read ahead) or
// another stream (read ahead into a ring).
func TestAStreamIsRelayedPieceByPiece(t *testing.T) {
	for _, ct := range []string{"text/event-stream", "application/x-ndjson"} {
		t.Run(ct, func(t *testing.T) {
			got := make(chan string)
			f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", ct)
				w.Header().Set("Cache-Control", "no-store")
				rc := http.NewResponseController(w)
				for i := range 5 {
					fmt.Fprintf(w, "data: %d\n\n", i)
					_ = rc.Flush()
					select {
					case <-got:
					case <-time.After(5 * time.Second):
						return // the client never got it: the test fails below
					}
				}
			})
			resp, err := f.srv.Client().Get(f.srv.URL + "/events")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			for i := range 5 {
				line, err := br.ReadString('\n')
				if err != nil || line != fmt.Sprintf("data: %d\n", i) {
					t.Fatalf("event %d: %q, %v", i, line, err)
				}
				if _, err := br.ReadString('\n'); err != nil {
					t.Fatal(err)
				}
				got <- line
			}
		})
	}
}

// A slow but steady client of a response larger than the buffer gets it
// whole: the handler waits for it to take a piece, never for the whole
// ring, so origin.idleTimeout does not cut the origin for the client's
// pace; and past the sidecar-wide budget a response goes at its client's
// pace, as without buffering, whole.
func TestASlowButSteadyClientOfABufferedResponseGetsItWhole(t *testing.T) {
	const size = 1 << 20
	for name, budget := range map[string]int64{"within the budget": ResponseBufferBudget, "past the budget": 0} {
		t.Run(name, func(t *testing.T) {
			var written atomic.Int64
			o := newOrigin(t, writtenOrigin(size, &written))
			f := newFixtureWith(t, "origin: {idleTimeout: 300ms}", o, withTinyOriginWindow, serveSmallSend)
			f.px.respBudget = newByteBudget(budget)
			// 600 kB/s: a piece of 32 KiB in under 100 ms, the ring's
			// 512 KiB in about a second, longer than the idle timeout.
			resp, b, err := getSteadily(t, f.srv.Listener.Addr().String(), "/slow", 600_000)
			if err != nil || resp.StatusCode != 200 || !bytes.Equal(b, payload(7, size)) {
				t.Fatalf("got %d bytes of %d (%v)", len(b), size, err)
			}
			waitFor(t, func() bool { return f.px.respBudget.left.Load() == budget }, "the response buffer budget to come back whole")
		})
	}
}

// A client that leaves mid-response, and an origin that breaks off
// mid-body, give every byte of the budget back, and the broken response
// looks broken to its client.
func TestABufferedResponseGivesItsBudgetBackHoweverItEnds(t *testing.T) {
	const size = 2 << 20
	var written atomic.Int64
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/broken" {
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Content-Length", fmt.Sprint(size))
			_, _ = w.Write(payload(7, 300<<10))
			_ = http.NewResponseController(w).Flush()
			panic(http.ErrAbortHandler)
		}
		writtenOrigin(size, &written)(w, r)
	})
	addr := f.srv.Listener.Addr().String()

	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(conn, "GET /leave HTTP/1.1\r\nHost: x\r\n\r\n")
	buf := make([]byte, 64<<10)
	if _, err := io.ReadAtLeast(conn, buf, len(buf)); err != nil {
		t.Fatal(err)
	}
	conn.Close()

	resp, err := f.srv.Client().Get(f.srv.URL + "/broken")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil || n >= size {
		t.Fatalf("a response the origin broke off reached its client as %d bytes, err %v: it must look broken", n, err)
	}
	waitFor(t, func() bool { return f.px.respBudget.left.Load() == ResponseBufferBudget }, "the response buffer budget to come back whole")
	if !strings.Contains(resp.Header.Get("Cache-Control"), "no-store") {
		t.Fatalf("unexpected header %v", resp.Header)
	}
}
