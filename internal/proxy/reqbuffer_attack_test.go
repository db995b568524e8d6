package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/metrics"
)

// liveHeap is the heap the process holds once garbage is collected.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// A buffered body's memory goes when its budget comes back: a client
// that posts 1 MiB bodies one after another to an endpoint that answers
// slowly (or streams) must not make the sidecar hold a megabyte per
// request after the budget says it is free, or the budget bounds nothing.
func TestABufferedBodyIsFreedWhenItsBudgetComesBack(t *testing.T) {
	const n = 40 // 40 MiB read ahead one after another, 16 MiB of budget
	release := make(chan struct{})
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		io.WriteString(w, "started ")
		http.NewResponseController(w).Flush()
		select { // a slow answer, or a stream
		case <-release:
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	})
	defer close(release)
	obs := observe(t, f.px)
	f.px.respBudget = newByteBudget(0) // the answers' memory is not this test's
	body := bytes.Repeat([]byte("m"), 1<<20)
	base := liveHeap()
	for i := range n {
		req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/slow", bytes.NewReader(body))
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: got %d", i, resp.StatusCode)
		}
	}
	if got := testCounter(obs.m.RequestBodies.WithLabelValues(metrics.BufferedWhole)); got != n {
		t.Fatalf("%v of %d bodies buffered whole, want all", got, n)
	}
	// The transport may write a body's last bytes straight to the socket
	// (bufio.Writer.ReadFrom) and so be answered, and the answer relayed,
	// before its read of the body's end gives the last chunk back: wait
	// for that read, a moment at most.
	for deadline := time.Now().Add(5 * time.Second); f.px.reqBudget.left.Load() != RequestBufferBudget && time.Now().Before(deadline); {
		runtime.Gosched()
	}
	if left := f.px.reqBudget.left.Load(); left != RequestBufferBudget {
		t.Fatalf("%d bytes of the budget left 5s after every body was sent, want %d", left, RequestBufferBudget)
	}
	grew := liveHeap() - base
	t.Logf("%d answers pending after 1 MiB bodies: live heap grew by %.1f MiB", n, float64(grew)/(1<<20))
	if grew > RequestBufferBudget {
		t.Fatalf("live heap grew by %.1f MiB with %d answers pending and the whole budget given back: the bodies are still held", float64(grew)/(1<<20), n)
	}
}

// A client that sends a few bytes of a body and stands still holds a few
// KiB of the budget, whether it announced a large body or sends it
// chunked: were each such client to hold a 64 KiB chunk, 256 connections
// sending a byte each would spend the sidecar's 16 MiB and leave every
// honest upload unbuffered; and a 10-byte JSON POST sent chunked would
// cost 64 KiB.
func TestAFewBytesHoldAFewBytesOfTheBudget(t *testing.T) {
	const few = 4 << 10
	for name, raw := range map[string]string{
		"announced 1 MiB": "PUT /a HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(1<<20) + "\r\n\r\n0123456789",
		"chunked":         "PUT /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "origin: {idleTimeout: 5s}", bodyEcho(nil))
			c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, raw); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return f.px.reqBudget.left.Load() < RequestBufferBudget }, "the body to be read")
			if held := RequestBufferBudget - f.px.reqBudget.left.Load(); held > few {
				t.Fatalf("10 bytes received hold %d bytes of the budget, want at most %d", held, few)
			}
		})
	}
}

// BenchmarkASmallPost is a 10-byte JSON POST passed to the origin, with
// Content-Length or chunked, read ahead or streamed: what buffering it
// costs (B/op), the origin exchange included.
func BenchmarkASmallPost(b *testing.B) {
	for _, cfg := range []string{"", "origin: {streamRequestBodies: true}"} {
		for _, chunked := range []bool{false, true} {
			name := fmt.Sprintf("buffered=%v/chunked=%v", cfg == "", chunked)
			b.Run(name, func(b *testing.B) {
				f := newFixture(b, cfg, bodyCounter)
				w := &benchWriter{h: make(http.Header, 16)}
				const body = `{"a":1234}`
				b.ReportAllocs()
				for b.Loop() {
					req := httptest.NewRequest("POST", "http://a.example/api", strings.NewReader(body))
					if chunked {
						req.ContentLength, req.TransferEncoding = -1, []string{"chunked"}
					}
					clear(w.h)
					w.status, w.n = 0, 0
					f.px.ServeHTTP(w, req)
					if w.status != 200 || w.n != len(body) {
						b.Fatalf("status %d, %d bytes", w.status, w.n)
					}
				}
			})
		}
	}
}

// A client whose chunked body ends after a pause shorter than
// origin.idleTimeout, before an origin slower to connect to than that
// timeout too, is answered: the last chunk is the client's progress, so
// the origin has a whole idle timeout from it to take the request. Were
// the timer left where the last data chunk set it, the origin would be
// blamed (504, "did not take the request") for the client's pause.
func TestTheLastChunkOfABufferedBodyGivesTheOriginAFullIdleTimeout(t *testing.T) {
	const idle, pause, dial = time.Second, 700 * time.Millisecond, 700 * time.Millisecond
	o := newOrigin(t, bodyEcho(nil))
	f := newFixtureWith(t, fmt.Sprintf("origin: {idleTimeout: %s}", idle), o, func(opts *Options) {
		tr := NewTransport()
		next := tr.DialContext
		tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
			select { // an origin slow to accept, though quicker than idle
			case <-time.After(dial):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return next(ctx, network, addr)
		}
		t.Cleanup(tr.CloseIdleConnections)
		opts.Transport = tr
	}, nil)
	obs := observe(t, f.px)
	c := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
	if _, err := io.WriteString(c, "POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(pause) // the client's pace: it pauses, less than idle
	if _, err := io.WriteString(c, "0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.HasPrefix(string(b), "unknown 3 ") {
		t.Fatalf("got %d %q, want the origin's 200 for the 3 bytes", res.StatusCode, b)
	}
	if n := testCounter(obs.m.OriginRequests.WithLabelValues("error")); n != 0 {
		t.Errorf("origin_requests_total{code=error} = %v, want 0", n)
	}
}

// A stored POST answer's request time is taken once the body is read,
// when the origin is asked (RFC 9111 §4.2.3): a slow upload does not age
// the answer a later GET is served from.
func TestASlowUploadDoesNotAgeTheStoredPostAnswer(t *testing.T) {
	for name, parts := range map[string][2]string{
		"with Content-Length": {"Content-Length: 7\r\n\r\nx=1", "&y=2"},
		"chunked":             {"Transfer-Encoding: chunked\r\n\r\n3\r\nx=1\r\n", "4\r\n&y=2\r\n0\r\n\r\n"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "defaults: {storePostResponses: true}",
				postOrigin("Cache-Control", "max-age=600", "Content-Location", "/form"))
			c := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
			if _, err := io.WriteString(c, "POST /form HTTP/1.1\r\nHost: "+f.srv.Listener.Addr().String()+"\r\nContent-Type: text/plain\r\n"+parts[0]); err != nil {
				t.Fatal(err)
			}
			waitFor(t, func() bool { return f.px.reqBudget.left.Load() < RequestBufferBudget }, "the body to be read ahead")
			f.clock.Advance(2 * time.Minute) // the upload takes two minutes
			if _, err := io.WriteString(c, parts[1]); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("the POST got %d", res.StatusCode)
			}
			hit := f.get("/form")
			expect(t, hit, 200, "HIT; layer=l1")
			if hit.body != "posted:x=1&y=2" {
				t.Fatalf("the GET got %q", hit.body)
			}
			if age, _ := strconv.Atoi(hit.header.Get("Age")); age >= 60 {
				t.Fatalf("Age %q: the two minutes the upload took aged the stored answer", hit.header.Get("Age"))
			}
		})
	}
}

// A client that sends Expect: 100-continue gets its 100 from the sidecar
// as the body is read ahead, on every path that reads ahead; the origin
// gets the body whole, with Content-Length, and no Expect.
func TestAnExpectContinueUploadGetsItsContinueAndTheOriginNoExpect(t *testing.T) {
	for name, cfg := range map[string]string{
		"passed":      "",
		"stored POST": "defaults: {storePostResponses: true}",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, cfg, bodyEcho(nil))
			c := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
			if _, err := io.WriteString(c, "POST /e HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			interim, err := http.ReadResponse(br, nil)
			if err != nil || interim.StatusCode != http.StatusContinue {
				t.Fatalf("before its body the client got %v (err %v), want 100 Continue", interim, err)
			}
			if _, err := io.WriteString(c, "hello"); err != nil {
				t.Fatal(err)
			}
			res, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || !strings.HasPrefix(string(b), "unknown 5 ") || !strings.HasSuffix(string(b), "cl=5 te=[]") {
				t.Fatalf("got %d %q, want the origin to have had the 5 bytes with Content-Length", res.StatusCode, b)
			}
			if e := f.origin.last().Header.Get("Expect"); e != "" {
				t.Fatalf("the origin got Expect: %q", e)
			}
		})
	}
}

// dialFor is a raw connection to addr whose reads and writes must be
// done within d; it is closed when the test ends.
func dialFor(t *testing.T, addr string, d time.Duration) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(d)); err != nil {
		t.Fatal(err)
	}
	return c
}
