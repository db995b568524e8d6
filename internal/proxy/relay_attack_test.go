package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Attacker's review of the response read-ahead (relay.go).

// A stream that is not Server-Sent Events (chunked JSON lines, a watch,
// a long poll that sent its first bytes) and whose client keeps up holds
// next to nothing of the read-ahead budget while it waits for its next
// event: idle streams do not take read-ahead away from the responses of
// slow clients.
//
// ATTACK: every response that came in more than one read took a whole
// 512 KiB ring from the 16 MiB budget for its life. 32 idle streams (32
// browser tabs on a feed, or one client opening 32 of them) spent it for
// hours, and every other response went at its client's pace: a client
// that read nothing held the origin's response and its worker again.
// nginx allocates its proxy_buffers as a response needs them; so does the
// ring now, a piece (32 KiB) at a time, and a response's first piece is
// the copy buffer it always had, outside the budget.
func TestIdleStreamsDoNotSpendTheReadAheadOfOthers(t *testing.T) {
	const size = 480 << 10
	const streams = ResponseBufferBudget/ResponseBufferSize + 8
	release := make(chan struct{})
	var written atomic.Int64
	big := writtenOrigin(size, &written)
	o := newOriginWith(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			big(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(w, "{\"event\":1}\n")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, serveSmallSend)
	f := newFixtureWith(t, "", o, withTinyOriginWindow, serveSmallSend)
	defer close(release) // before the fixture's cleanup closes the servers
	addr := f.srv.Listener.Addr().String()
	for i := range streams {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET /stream/%d HTTP/1.1\r\nHost: x\r\n\r\n", i)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || line != "{\"event\":1}\n" {
			t.Fatalf("stream %d: %q, %v", i, line, err)
		}
	}
	read := stalledClient(t, addr, "/big")
	deadline := time.Now().Add(10 * time.Second)
	for written.Load() < size {
		if time.Now().After(deadline) {
			t.Fatalf("with %d idle streams open, the origin wrote %d of its %d bytes while the client read nothing (budget left %d of %d): idle streams spent the read-ahead",
				streams, written.Load(), size, f.px.respBudget.left.Load(), ResponseBufferBudget)
		}
		time.Sleep(5 * time.Millisecond)
	}
	resp, b := read()
	if resp.StatusCode != 200 || !bytes.Equal(b, payload(7, size)) {
		t.Fatalf("got %d with %d bytes, want 200 and the %d bytes the origin sent", resp.StatusCode, len(b), size)
	}
}

// oddReader yields data in reads of odd sizes taken in turn from sizes,
// so that the ring's tail lands everywhere, across the end of a piece and
// of the ring.
type oddReader struct {
	data  []byte
	sizes []int
	i     int
}

func (r *oddReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), len(r.data), r.sizes[r.i%len(r.sizes)])
	r.i++
	copy(p, r.data[:n])
	r.data = r.data[n:]
	if r.i%7 == 0 {
		runtime.Gosched()
	}
	return n, nil
}

// jitteryWriter is a client that takes what it is given, now and then
// after a pause, recording it; it fails the test when written after the
// handler returned.
type jitteryWriter struct {
	h        http.Header
	got      bytes.Buffer
	writes   int
	returned atomic.Bool
	late     atomic.Bool
}

func (w *jitteryWriter) Header() http.Header { return w.h }
func (w *jitteryWriter) WriteHeader(int)     {}
func (w *jitteryWriter) Flush()              {}
func (w *jitteryWriter) Write(p []byte) (int, error) {
	if w.returned.Load() {
		w.late.Store(true)
	}
	w.writes++
	switch w.writes % 5 {
	case 0:
		time.Sleep(50 * time.Microsecond)
	case 2:
		runtime.Gosched()
	}
	return w.got.Write(p)
}

// The ring hands its client every byte once and in order, whatever the
// sizes of the origin's reads, however the two sides interleave and
// wherever the ring wraps; with the whole budget, one piece of it, or
// none; and its writer is done when relayAhead returns.
func TestTheRingRelaysEveryByteInOrderAcrossItsEnd(t *testing.T) {
	f := newFixture(t, "", cacheFor("", ""))
	sizes := [][]int{
		{1, 7, 4093, 32769, 65537, 511},
		{32 << 10, 32<<10 + 1, 32<<10 - 1},
		{ResponseBufferSize - 1, 3, ResponseBufferSize + 5},
		{12345, 99991, 2, 257 << 10},
	}
	for _, budget := range []int64{ResponseBufferBudget, writePiece, 0} {
		for i, sz := range sizes {
			t.Run(fmt.Sprintf("budget %d, sizes %d", budget, i), func(t *testing.T) {
				f.px.respBudget = newByteBudget(budget)
				for round := range 3 {
					n := 3*ResponseBufferSize + 1000*round + i
					want := payload(uint64(round), n)
					w := &jitteryWriter{h: http.Header{}}
					resp := &http.Response{Header: http.Header{"Content-Type": {"application/octet-stream"}}}
					k, err := f.px.relayAhead(w, resp, &oddReader{data: want, sizes: sz})
					w.returned.Store(true)
					if err != nil || k != int64(n) {
						t.Fatalf("relayAhead: %d bytes, %v; want %d", k, err, n)
					}
					if !bytes.Equal(w.got.Bytes(), want) {
						at := 0
						for at < min(w.got.Len(), n) && w.got.Bytes()[at] == want[at] {
							at++
						}
						t.Fatalf("the client got %d bytes, differing from the origin's %d from byte %d", w.got.Len(), n, at)
					}
					if f.px.respBudget.left.Load() != budget {
						t.Fatalf("budget left %d, want %d back", f.px.respBudget.left.Load(), budget)
					}
					if w.late.Load() {
						t.Fatal("the client was written after relayAhead returned")
					}
				}
			})
		}
	}
}

// panicReader panics after handing out n bytes: the handler fails
// mid-relay.
type panicReader struct {
	r io.Reader
	n int
}

func (p *panicReader) Read(b []byte) (int, error) {
	if p.n <= 0 {
		panic(http.ErrAbortHandler) // as a failing handler would, quietly
	}
	k, err := p.r.Read(b[:min(len(b), p.n)])
	p.n -= k
	return k, err
}

// recordingWriter notes a write that begins after the handler returned.
type recordingWriter struct {
	http.ResponseWriter
	returned, late *atomic.Bool
}

func (w recordingWriter) Write(p []byte) (int, error) {
	if w.returned.Load() {
		w.late.Store(true)
	}
	n, err := w.ResponseWriter.Write(p)
	if w.returned.Load() {
		w.late.Store(true)
	}
	return n, err
}

func (w recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// A handler that panics mid-relay, while its client reads nothing, cuts
// the goroutine's write and waits for it: it returns at once (not after
// the send timeout), nothing writes to the connection after it, and the
// budget comes back.
func TestAPanicMidRelayLeavesNoWriterBehind(t *testing.T) {
	f := newFixture(t, "", cacheFor("", ""))
	var returned, late atomic.Bool
	took := make(chan time.Duration, 1)
	srv := serveSmallSend(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		defer func() {
			returned.Store(true)
			took <- time.Since(start)
		}()
		w.Header().Set("Content-Length", fmt.Sprint(4<<20))
		w.WriteHeader(200)
		resp := &http.Response{Header: http.Header{}}
		_, _ = f.px.relayAhead(recordingWriter{w, &returned, &late}, resp, &panicReader{r: bytes.NewReader(payload(3, 4<<20)), n: 256 << 10})
	}))
	t.Cleanup(srv.Close)
	conn, err := tinyWindowDialer().Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case d := <-took:
		if d > 5*time.Second {
			t.Fatalf("the handler took %v to return after its panic", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler did not return after its panic: the goroutine's write was not cut")
	}
	if late.Load() {
		t.Fatal("the client was written after the handler returned")
	}
	waitFor(t, func() bool { return f.px.respBudget.left.Load() == ResponseBufferBudget }, "the response buffer budget to come back whole")
}

// A client that takes nothing of a response larger than the read-ahead
// has the origin's side cut after origin.idleTimeout and is itself closed
// by the send timeout, with a response that looks broken.
func TestAClientThatTakesNothingIsCutOnBothSides(t *testing.T) {
	const size = 4 << 20
	originDone := make(chan error, 1)
	o := newOriginWith(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", fmt.Sprint(size))
		body := payload(7, size)
		for off := 0; off < size; off += 16 << 10 {
			if _, err := w.Write(body[off : off+16<<10]); err != nil {
				originDone <- err
				return
			}
		}
		originDone <- nil
	}, serveSmallSend)
	const sendTimeout = time.Second
	f := newFixtureWith(t, "origin: {idleTimeout: 300ms}", o, withTinyOriginWindow, serveSendTimeout(sendTimeout))
	start := time.Now()
	read := dialSlowReader(t, f.srv.Listener.Addr().String(), "/big")
	select {
	case err := <-originDone:
		if err == nil {
			t.Fatal("the origin wrote its whole 4 MiB to a client that read nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the origin's side was not cut while the client took nothing")
	}
	// The send timeout ends the write the client does not take, and the
	// handler with it: reading the connection now gives what the kernel
	// and the ring held, then its end.
	waitFor(t, func() bool { return f.px.respBudget.left.Load() == ResponseBufferBudget }, "the send timeout to end the response")
	if d := time.Since(start); d < sendTimeout {
		t.Fatalf("the response ended after %v, before the send timeout", d)
	}
	_ = read.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := io.Copy(io.Discard, read)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the stalled connection: %v (after %d bytes): it was not closed", err, n)
	}
	if n >= size {
		t.Fatalf("the client got %d bytes, a whole-looking response", n)
	}
	if time.Since(start) > 15*time.Second {
		t.Fatalf("took %v", time.Since(start))
	}
	waitFor(t, func() bool { return f.px.respBudget.left.Load() == ResponseBufferBudget }, "the response buffer budget to come back whole")
}

// A response the origin breaks off after more than the ring holds, with
// a Content-Length or chunked, passed or a GET not stored, reaches its
// client broken (cut short with an error, never a clean end), carrying
// every byte the origin sent before the break.
func TestABrokenResponseLooksBrokenWhenReadAhead(t *testing.T) {
	const sentBytes = ResponseBufferSize + 300<<10
	f := newFixture(t, `rules: [{name: pass, match: {pathPrefix: /pass}, bypass: true}]`, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if strings.HasSuffix(r.URL.Path, "/length") {
			w.Header().Set("Content-Length", fmt.Sprint(2*sentBytes))
		}
		body := payload(9, sentBytes)
		rc := http.NewResponseController(w)
		for off := 0; off < sentBytes; off += 50 << 10 {
			_, _ = w.Write(body[off:min(sentBytes, off+50<<10)])
			_ = rc.Flush()
		}
		panic(http.ErrAbortHandler)
	})
	for _, path := range []string{"/pass/length", "/pass/chunked", "/get/length", "/get/chunked"} {
		t.Run(path, func(t *testing.T) {
			resp, err := f.srv.Client().Get(f.srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("a response the origin broke off after %d bytes reached its client complete-looking with %d bytes", sentBytes, len(b))
			}
			if len(b) > sentBytes || !bytes.Equal(b, payload(9, sentBytes)[:len(b)]) {
				t.Fatalf("the client got %d bytes that are not the origin's first ones", len(b))
			}
		})
	}
	waitFor(t, func() bool { return f.px.respBudget.left.Load() == ResponseBufferBudget }, "the response buffer budget to come back whole")
}
