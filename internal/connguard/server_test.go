package connguard

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// echo answers "<path> <body length>" and counts calls per path.
type echo struct {
	mu    sync.Mutex
	calls map[string]int
}

func (e *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	e.mu.Lock()
	e.calls[r.URL.Path]++
	e.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	fmt.Fprintf(w, "%s %d", r.URL.Path, n)
}

func (e *echo) count(path string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[path]
}

func (e *echo) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, c := range e.calls {
		n += c
	}
	return n
}

// serve runs a guarded server on loopback until the test ends.
func serve(t *testing.T, configure func(*http.Server)) (string, *echo) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{calls: map[string]int{}}
	srv := &http.Server{
		Handler:           Middleware(e),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
	}
	if configure != nil {
		configure(srv)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln)) }()
	t.Cleanup(func() { shutdown(t, srv, done) })
	return ln.Addr().String(), e
}

func shutdown(t *testing.T, srv *http.Server, done <-chan error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
		srv.Close()
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve: %v", err)
	}
}

type client struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dial(t *testing.T, addr string) *client {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return &client{t: t, c: c, br: bufio.NewReader(c)}
}

func (c *client) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatal(err)
	}
}

// response reads one response and its body.
func (c *client) response() (*http.Response, string) {
	c.t.Helper()
	res, err := http.ReadResponse(c.br, nil)
	if err != nil {
		c.t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		c.t.Fatalf("read response body: %v", err)
	}
	return res, string(body)
}

// closed asserts the server closed the connection.
func (c *client) closed() {
	c.t.Helper()
	b, err := c.br.ReadByte()
	if err == nil {
		c.t.Fatalf("connection still open: read %q", b)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		c.t.Fatalf("connection still open: %v", err)
	}
}

func TestServerPassesWellFramedRequests(t *testing.T) {
	tests := []struct {
		name string
		raw  string
		want string
	}{
		{"a plain GET", "GET /get HTTP/1.1\r\nHost: x\r\n\r\n", "/get 0"},
		{"a POST with Content-Length", "POST /post HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world", "/post 11"},
		{
			"a chunked POST with trailers",
			"POST /chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n" +
				"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 11\r\n\r\n",
			"/chunked 11",
		},
	}
	addr, e := serve(t, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			c.send(tc.raw)
			res, body := c.response()
			if res.StatusCode != http.StatusOK || body != tc.want {
				t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, tc.want)
			}
			// The connection stays usable.
			c.send("GET /again HTTP/1.1\r\nHost: x\r\n\r\n")
			if res, body := c.response(); res.StatusCode != http.StatusOK || body != "/again 0" {
				t.Fatalf("second request: got %d %q", res.StatusCode, body)
			}
		})
	}
	if n := e.count("/again"); n != len(tests) {
		t.Errorf("/again served %d times, want %d", n, len(tests))
	}
}

func TestServerAnswersPipelinedRequestsInOrder(t *testing.T) {
	addr, e := serve(t, nil)
	c := dial(t, addr)
	c.send("POST /1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc" +
		"POST /2 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n0\r\n\r\n" +
		"\r\n" + // tolerated after a POST
		"GET /3 HTTP/1.1\r\nHost: x\r\n\r\n" +
		"POST /4 HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nz\r\n0\r\nX-T: 1\r\n\r\n" +
		"POST /5 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n12345")
	for _, want := range []string{"/1 3", "/2 4", "/3 0", "/4 1", "/5 5"} {
		res, body := c.response()
		if res.StatusCode != http.StatusOK || body != want {
			t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, want)
		}
	}
	if n := e.total(); n != 5 {
		t.Errorf("handler called %d times, want 5", n)
	}
}

func TestServerRefusesAmbiguousFraming(t *testing.T) {
	const reasonBoth = "request has both Content-Length and Transfer-Encoding"
	tests := []struct {
		name string
		raw  string
		// want is the exact status and reason when Middleware answers;
		// zero when net/http refuses the request on its own.
		want       int
		wantReason string
	}{
		{
			name:       "Content-Length then Transfer-Encoding",
			raw:        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			want:       http.StatusBadRequest,
			wantReason: reasonBoth,
		},
		{
			name:       "Transfer-Encoding then Content-Length",
			raw:        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
			want:       http.StatusBadRequest,
			wantReason: reasonBoth,
		},
		{
			name:       "odd capitalisation",
			raw:        "POST / HTTP/1.1\r\nHost: x\r\ncontent-LENGTH: 5\r\nTRANSFER-ENCODING: CHUNKED\r\n\r\n0\r\n\r\n",
			want:       http.StatusBadRequest,
			wantReason: reasonBoth,
		},
		{
			name:       "Content-Length 0",
			raw:        "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
			want:       http.StatusBadRequest,
			wantReason: reasonBoth,
		},
		{
			name:       "HTTP/1.0 with Transfer-Encoding, which net/http ignores",
			raw:        "POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
			want:       http.StatusBadRequest,
			wantReason: reasonBoth,
		},
		{
			name:       "obs-folded Transfer-Encoding",
			raw:        "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n",
			want:       http.StatusBadRequest,
			wantReason: "request framing could not be verified",
		},
		{
			name: "duplicate Transfer-Encoding lines",
			raw:  "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "a Transfer-Encoding list",
			raw:  "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "a Transfer-Encoding list with Content-Length",
			raw:  "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
		},
		{
			name: "differing Content-Length lines",
			raw:  "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcdef",
		},
		{
			name: "whitespace before the colon",
			raw:  "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
		},
	}
	addr, e := serve(t, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, addr)
			c.send(tc.raw + "GET /after HTTP/1.1\r\nHost: x\r\n\r\n")
			res, body := c.response()
			switch {
			case tc.want != 0 && (res.StatusCode != tc.want || strings.TrimSpace(body) != tc.wantReason):
				t.Errorf("got %d %q, want %d %q", res.StatusCode, body, tc.want, tc.wantReason)
			case tc.want == 0 && res.StatusCode < 400:
				t.Errorf("got %d %q, want an error status", res.StatusCode, body)
			}
			if tc.want != 0 && !res.Close { // ReadResponse turns Connection: close into Close
				t.Errorf("response does not announce Connection: close")
			}
			c.closed()
		})
	}
	if n := e.total(); n != 0 {
		t.Errorf("handler called %d times, want 0 (%v)", n, e.calls)
	}
}

func TestServerRefusesSmuggledRequest(t *testing.T) {
	addr, e := serve(t, nil)
	c := dial(t, addr)
	// A front end framing by Content-Length forwards one request with body
	// "0\r\n\r\n"... net/http frames by chunked and would find GET /admin.
	c.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n")
	res, body := c.response()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d %q, want 400", res.StatusCode, body)
	}
	c.closed()
	if n, m := e.count("/"), e.count("/admin"); n != 0 || m != 0 {
		t.Errorf("handler reached: / %d times, /admin %d times", n, m)
	}
}

func TestServerAnswersRefusedRequestWithLargeBody(t *testing.T) {
	// net/http reads at most 256 KiB of a body the handler left unread,
	// then half-closes (CloseWrite, which the guarded conn passes on) and
	// closes. The client still gets its 400.
	addr, e := serve(t, nil)
	c := dial(t, addr)
	const size = 4 << 20
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"+
			strconv.FormatInt(size, 16)+"\r\n"+strings.Repeat("z", size)+"\r\n0\r\n\r\n")
		wrote <- err
	}()
	res, body := c.response()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d %q, want 400", res.StatusCode, body)
	}
	c.closed()
	c.c.Close()
	<-wrote // the server stopped reading; the write fails, which is expected
	if n := e.total(); n != 0 {
		t.Errorf("handler called %d times", n)
	}
}

func TestServerOptionsStar(t *testing.T) {
	t.Run("an OPTIONS * answered by net/http keeps later requests matched", func(t *testing.T) {
		addr, e := serve(t, nil)
		c := dial(t, addr)
		c.send("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n")
		if res, _ := c.response(); res.StatusCode != http.StatusOK {
			t.Fatalf("OPTIONS *: got %d", res.StatusCode)
		}
		if res, body := c.response(); res.StatusCode != http.StatusOK || body != "/a 0" {
			t.Fatalf("GET /a: got %d %q", res.StatusCode, body)
		}
		if n := e.count("/a"); n != 1 {
			t.Errorf("/a served %d times", n)
		}
	})
	t.Run("a smuggling OPTIONS * answered by net/http refuses the smuggled request", func(t *testing.T) {
		addr, e := serve(t, nil)
		c := dial(t, addr)
		c.send("OPTIONS * HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
			"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n")
		c.response() // net/http's own answer to OPTIONS *, which Middleware never sees
		if res, body := c.response(); res.StatusCode != http.StatusBadRequest {
			t.Fatalf("GET /admin: got %d %q, want 400", res.StatusCode, body)
		}
		c.closed()
		if n := e.count("/admin"); n != 0 {
			t.Errorf("/admin served %d times", n)
		}
	})
	t.Run("an OPTIONS * passed to the handler is checked like any request", func(t *testing.T) {
		addr, e := serve(t, func(s *http.Server) { s.DisableGeneralOptionsHandler = true })
		c := dial(t, addr)
		c.send("OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n")
		c.response()
		if res, body := c.response(); res.StatusCode != http.StatusOK || body != "/a 0" {
			t.Fatalf("GET /a: got %d %q", res.StatusCode, body)
		}
		if n := e.count("/a"); n != 1 {
			t.Errorf("/a served %d times", n)
		}
	})
}

func TestServerRefusesPRIWithFields(t *testing.T) {
	// net/http serves this as an HTTP/1 request with ProtoMajor 2 and keeps
	// the connection; it must not pass as HTTP/2.
	addr, e := serve(t, nil)
	c := dial(t, addr)
	c.send("PRI * HTTP/2.0\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n")
	if res, body := c.response(); res.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d %q, want 400", res.StatusCode, body)
	}
	c.closed()
	if n := e.total(); n != 0 {
		t.Errorf("handler called %d times", n)
	}
}

func TestServerPassesHTTP2PriorKnowledge(t *testing.T) {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	addr, e := serve(t, func(s *http.Server) { s.Protocols = &p })

	var cp http.Protocols
	cp.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &cp}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for range 3 {
		res, err := hc.Post("http://"+addr+"/h2", "text/plain", strings.NewReader("abc"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.ProtoMajor != 2 || res.StatusCode != http.StatusOK || string(body) != "/h2 3" {
			t.Fatalf("got %s %d %q", res.Proto, res.StatusCode, body)
		}
	}
	if n := e.count("/h2"); n != 3 {
		t.Errorf("/h2 served %d times", n)
	}
}

func TestServerWithoutGuardPassesThrough(t *testing.T) {
	// No Listener/ConnContext: Middleware has no tracker and stays out of
	// the way.
	e := &echo{calls: map[string]int{}}
	srv := httptest.NewServer(Middleware(e))
	defer srv.Close()
	res, err := http.Post(srv.URL+"/plain", "text/plain", strings.NewReader("abcd"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(body) != "/plain 4" {
		t.Fatalf("got %d %q", res.StatusCode, body)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestShutdownLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echo{calls: map[string]int{}}
	srv := &http.Server{Handler: Middleware(e), ConnContext: ConnContext}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln)) }()

	// One idle keep-alive connection and one refused one.
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	c := &client{t: t, c: idle, br: bufio.NewReader(idle)}
	c.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.response()
	refused, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()
	r := &client{t: t, c: refused, br: bufio.NewReader(refused)}
	r.send("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
	r.response()

	shutdown(t, srv, done)
}

// pipeline writes raw in one write from its own goroutine, so the server
// can answer while the client is still sending, and returns the write's
// result.
func (c *client) pipeline(raw string) <-chan error {
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(c.c, raw)
		wrote <- err
	}()
	return wrote
}

func TestServerAnswersLongPipelinedBursts(t *testing.T) {
	const n = 1000
	tests := []struct {
		name    string
		request func(i int) string
		want    func(i int) string // body; "" means any 200
	}{
		{
			name:    "a thousand GETs with distinct paths",
			request: func(i int) string { return fmt.Sprintf("GET /p/%d HTTP/1.1\r\nHost: x\r\n\r\n", i) },
			want:    func(i int) string { return fmt.Sprintf("/p/%d 0", i) },
		},
		{
			// 20 bytes each: the densest stream net/http serves on a
			// keep-alive connection, so the most header blocks its
			// read-ahead can hold.
			name:    "a thousand of the shortest requests net/http serves",
			request: func(int) string { return "A / HTTP/1.1\nHost:\n\n" },
			want:    func(int) string { return "/ 0" },
		},
		{
			name: "a thousand POSTs with bodies, chunked and by length",
			request: func(i int) string {
				if i%2 == 0 {
					return fmt.Sprintf("POST /c/%d HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", i)
				}
				return fmt.Sprintf("POST /l/%d HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", i)
			},
			want: func(i int) string {
				if i%2 == 0 {
					return fmt.Sprintf("/c/%d 3", i)
				}
				return fmt.Sprintf("/l/%d 2", i)
			},
		},
		{
			name:    "a thousand OPTIONS * answered by net/http itself",
			request: func(int) string { return "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n" },
			want:    func(int) string { return "" },
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			addr, e := serve(t, nil)
			c := dial(t, addr)
			var raw strings.Builder
			for i := range n {
				raw.WriteString(tc.request(i))
			}
			raw.WriteString("GET /last HTTP/1.1\r\nHost: x\r\n\r\n")
			wrote := c.pipeline(raw.String())
			for i := range n {
				res, body := c.response()
				if want := tc.want(i); res.StatusCode != http.StatusOK || want != "" && body != want {
					t.Fatalf("response %d: got %d %q, want 200 %q", i, res.StatusCode, body, want)
				}
			}
			if res, body := c.response(); res.StatusCode != http.StatusOK || body != "/last 0" {
				t.Fatalf("last request: got %d %q", res.StatusCode, body)
			}
			if err := <-wrote; err != nil {
				t.Fatalf("write: %v", err)
			}
			want := n + 1
			if tc.want(0) == "" {
				want = 1 // net/http answered the others itself
			}
			if got := e.total(); got != want {
				t.Errorf("handler called %d times, want %d", got, want)
			}
		})
	}
}

func TestServerStillRefusesSmugglingAfterALongBurst(t *testing.T) {
	addr, e := serve(t, nil)
	c := dial(t, addr)
	const n = 500
	wrote := c.pipeline(strings.Repeat("GET /ok HTTP/1.1\r\nHost: x\r\n\r\n", n) +
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"0\r\n\r\nGET /admin HTTP/1.1\r\nHost: x\r\n\r\n")
	for i := range n {
		if res, body := c.response(); res.StatusCode != http.StatusOK {
			t.Fatalf("response %d: got %d %q", i, res.StatusCode, body)
		}
	}
	if res, body := c.response(); res.StatusCode != http.StatusBadRequest ||
		strings.TrimSpace(body) != "request has both Content-Length and Transfer-Encoding" {
		t.Fatalf("smuggling request: got %d %q, want 400", res.StatusCode, body)
	}
	c.closed()
	<-wrote
	if m := e.count("/admin"); m != 0 {
		t.Errorf("/admin served %d times", m)
	}
}

// TestServerBoundsTrackerOnHijackedConnection: after a handler hijacks
// the connection (as a WebSocket proxy does), net/http stops taking
// results but the tracker still sees every byte. Request-shaped bytes
// must not grow its queue without bound.
func TestServerBoundsTrackerOnHijackedConnection(t *testing.T) {
	const flood = 1 << 20
	type seen struct {
		n      int64
		dead   bool
		queued int
		capa   int
	}
	got := make(chan seen, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		ConnContext: ConnContext,
		Handler: Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tr := &connFrom(r.Context()).t
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			defer conn.Close()
			io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: raw\r\n\r\n")
			n, _ := io.CopyN(io.Discard, brw, flood)
			tr.mu.Lock()
			s := seen{n: n, dead: tr.st == stDead, queued: len(tr.q) - tr.head, capa: cap(tr.q)}
			tr.mu.Unlock()
			got <- s
		})),
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln)) }()
	defer shutdown(t, srv, done)

	c := dial(t, ln.Addr().String())
	c.send("GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: raw\r\n\r\n")
	res, err := http.ReadResponse(c.br, nil)
	if err != nil || res.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", res, err)
	}
	block := "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	wrote := c.pipeline(strings.Repeat(block, flood/len(block)+1))
	var s seen
	select {
	case s = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not finish reading")
	}
	<-wrote
	if s.n != flood {
		t.Fatalf("handler read %d bytes, want %d", s.n, flood)
	}
	if !s.dead || s.queued > maxPending || s.capa > maxPending {
		t.Errorf("tracker after %d bytes: dead %v, %d results queued, capacity %d; want dead, at most %d",
			flood, s.dead, s.queued, s.capa, maxPending)
	}
}
