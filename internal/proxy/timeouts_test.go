package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// within returns a context that ends after d, for a client request that
// must not hang the test.
func within(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// sseOrigin sends one event, waits until the test has read it through the
// proxy (so a proxy that buffers deadlocks here and the test fails), then
// sends n more, one every 50 ms, and a last "end" event.
func sseOrigin(t *testing.T, cc string, firstRead <-chan struct{}, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		rc := http.NewResponseController(w)
		fmt.Fprint(w, "data: 0\n\n")
		_ = rc.Flush()
		select {
		case <-firstRead:
		case <-time.After(5 * time.Second):
			t.Error("the first event did not reach the client before the origin sent the rest")
			return
		case <-r.Context().Done():
			return
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 1; i <= n; i++ {
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "data: %d\n\n", i)
			_ = rc.Flush()
		}
		fmt.Fprint(w, "data: end\n\n")
	}
}

func TestServerSentEventsReachTheClientEventByEventAndOutliveTheOriginTimeout(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg, path, cc string
	}{
		// SSE origins typically send no-cache, which allows storing: the
		// fill must still stream it and not hold it to origin.timeout.
		"an event stream on a cached path":     {"origin: {timeout: 300ms}", "/events", "no-cache"},
		"an event stream on a bypass rule":     {"origin: {timeout: 300ms}\nrules: [{name: live, match: {pathPrefix: /live/}, bypass: true}]", "/live/events", ""},
		"an event stream that looks cacheable": {"origin: {timeout: 300ms}", "/cacheable-events", "max-age=60"},
	} {
		t.Run(name, func(t *testing.T) {
			firstRead := make(chan struct{})
			const n = 12 // 12 × 50 ms: twice origin.timeout
			f := newFixture(t, tc.cfg, sseOrigin(t, tc.cc, firstRead, n))
			req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "GET", f.srv.URL+tc.path, nil)
			start := time.Now()
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			br := bufio.NewReader(resp.Body)
			if line, err := br.ReadString('\n'); err != nil || line != "data: 0\n" {
				t.Fatalf("first event: %q, %v", line, err)
			}
			close(firstRead)
			rest, err := io.ReadAll(br)
			if err != nil {
				t.Fatalf("the stream was cut after %s: %v (read %q)", time.Since(start), err, rest)
			}
			if !strings.HasSuffix(string(rest), fmt.Sprintf("data: %d\n\ndata: end\n\n", n)) {
				t.Fatalf("stream ended without its last events: %q", rest)
			}
			if took := time.Since(start); took < 300*time.Millisecond {
				t.Fatalf("the stream took %s, not longer than origin.timeout: the test proves nothing", took)
			}
			// An event stream is never stored: the next request goes to
			// the origin again.
			if tc.path != "/live/events" {
				if got := resp.Header.Get("X-Cache"); got != "MISS" {
					t.Fatalf("X-Cache %q, want MISS", got)
				}
			}
		})
	}
}

func TestAnEventStreamIsNotStored(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprint(w, "data: x\n\n")
	})
	expect(t, f.get("/ev"), 200, "MISS")
	expect(t, f.get("/ev"), 200, "MISS")
	if n := f.origin.count(); n != 2 {
		t.Fatalf("origin saw %d requests, want 2", n)
	}
}

// stallingOrigin sends headers and part of a body of unknown length, then
// stands still until the proxy gives up on it (or the test ends).
func stallingOrigin(t *testing.T, cc string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		fmt.Fprint(w, "partial body")
		_ = http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-t.Context().Done():
		}
	}
}

func TestAnOriginThatStallsMidBodyIsCutAfterTheIdleTimeout(t *testing.T) {
	for name, tc := range map[string]struct{ path, cc string }{
		"a pass-through response is cut": {"/pass/x", ""},
		"an uncacheable fill is cut":     {"/x", "no-store"},
		"a fill being stored is cut":     {"/y", "max-age=60"},
	} {
		t.Run(name, func(t *testing.T) {
			// origin.timeout is far away: only the idle timeout can end this.
			f := newFixture(t, "origin: {timeout: 1m, idleTimeout: 200ms}\nrules: [{name: p, match: {pathPrefix: /pass/}, bypass: true}]",
				stallingOrigin(t, tc.cc))
			ctx := within(t, 5*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+tc.path, nil)
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("the client read a complete-looking response %q from a stalled origin", b)
			}
			if ctx.Err() != nil {
				t.Fatalf("the stalled response was not cut within 5s: %v", err)
			}
			if string(b) != "partial body" {
				t.Fatalf("read %q before the cut, want the bytes the origin sent", b)
			}
			// Nothing was stored: the next request goes to the origin.
			before := f.origin.count()
			req, _ = http.NewRequestWithContext(within(t, 5*time.Second), "GET", f.srv.URL+tc.path, nil)
			if resp, err := f.srv.Client().Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			if f.origin.count() != before+1 {
				t.Fatal("a cut response was served from the cache")
			}
		})
	}
}

func TestAnOriginThatSendsNoHeadersGets504AfterTheHeaderTimeout(t *testing.T) {
	for name, method := range map[string]string{
		"a fill":         "GET",
		"a pass-through": "POST",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "origin: {timeout: 1m, responseHeaderTimeout: 150ms}", func(w http.ResponseWriter, r *http.Request) {
				// net/http notices the proxy hanging up only once the
				// body was read.
				_, _ = io.Copy(io.Discard, r.Body)
				select {
				case <-r.Context().Done():
				case <-t.Context().Done():
				}
			})
			req, _ := http.NewRequestWithContext(within(t, 5*time.Second), method, f.srv.URL+"/h", strings.NewReader("x"))
			if method == "GET" {
				req.Body, req.ContentLength = http.NoBody, 0
			}
			start := time.Now()
			r := f.send(req)
			if r.status != http.StatusGatewayTimeout {
				t.Fatalf("got %d %q, want 504", r.status, r.body)
			}
			if took := time.Since(start); took < 150*time.Millisecond {
				t.Fatalf("504 after %s, before the header timeout", took)
			}
		})
	}
}

// pacedBody sends n pieces, one every interval, then ends.
func pacedBody(n int, interval time.Duration, piece string) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := 0; i < n; i++ {
			<-tick.C
			if _, err := io.WriteString(pw, piece); err != nil {
				return
			}
		}
		pw.Close()
	}()
	return pr
}

func TestASlowButSteadyUploadOnABypassedPathIsNotCut(t *testing.T) {
	// 12 pieces, one every 50 ms: 600 ms in all, longer than every
	// timeout, but never idle for long.
	f := newFixture(t, "origin: {timeout: 200ms, responseHeaderTimeout: 200ms, idleTimeout: 250ms}", func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "got %d bytes", len(b))
	})
	req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/upload", pacedBody(12, 50*time.Millisecond, "0123456789"))
	start := time.Now()
	r := f.send(req)
	if r.status != 200 || r.body != "got 120 bytes" {
		t.Fatalf("got %d %q after %s, want 200 \"got 120 bytes\"", r.status, r.body, time.Since(start))
	}
}

func TestAnUploadThatStandsStillGets408(t *testing.T) {
	f := newFixture(t, "origin: {idleTimeout: 200ms}", func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "should not get here")
	})
	// A raw client: it announces 100 bytes, sends 10 and then nothing.
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(conn, "PUT /stuck HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a stalled upload: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(b), "origin.idleTimeout") {
		t.Fatalf("got %d %q, want 408 naming origin.idleTimeout", resp.StatusCode, b)
	}
	// The proxy hangs up rather than wait for the rest of the body.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after the 408 the connection stayed open: %v", err)
	}
}

func TestAStoredFillPastTheOriginTimeoutStopsStoringAndReleasesItsWaiters(t *testing.T) {
	second := make(chan struct{})
	var calls atomic.Int32
	f := newFixture(t, "origin: {timeout: 300ms}\ncoalescing: {timeout: 10s}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		if calls.Add(1) > 1 {
			close(second)
			fmt.Fprint(w, "quick")
			return
		}
		fmt.Fprint(w, "slow ")
		_ = http.NewResponseController(w).Flush()
		// Go on only once the coalesced waiter has given up on this fill
		// and fetched for itself, long before its coalescing timeout.
		select {
		case <-second:
		case <-time.After(5 * time.Second):
			t.Error("the waiter was not released at origin.timeout")
		}
		fmt.Fprint(w, "but complete")
	})
	leader := make(chan response, 1)
	go func() {
		req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "GET", f.srv.URL+"/slow", nil)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			leader <- response{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			b = append(b, " / "+err.Error()...)
		}
		leader <- response{resp.StatusCode, resp.Header, string(b)}
	}()
	waitFor(t, func() bool { return f.origin.count() == 1 }, "the leader's fetch")
	waiter := f.get("/slow")
	if waiter.body != "quick" {
		t.Fatalf("the waiter got %q, want its own fetch", waiter.body)
	}
	if n := testCounter(f.px.m.Coalesced); n != 1 {
		t.Fatalf("%v requests waited for the leader, want 1", n)
	}
	l := <-leader
	if l.status != 200 || l.body != "slow but complete" {
		t.Fatalf("the leader got %d %q: a slow fill must still reach its client whole", l.status, l.body)
	}
	// The slow fill was not stored; the waiter's quick one was.
	expect(t, f.get("/slow"), 200, "HIT; layer=l1")
	if n := f.origin.count(); n != 2 {
		t.Fatalf("origin saw %d requests, want 2", n)
	}
}
