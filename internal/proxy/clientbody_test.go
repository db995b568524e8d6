package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/metrics"
)

// syncBuffer is a bytes.Buffer for a logger written from handler
// goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// observed swaps in the proxy's metrics and logger so a test can read
// them; call before the first request.
type observed struct {
	reg *prometheus.Registry
	m   *metrics.Metrics
	log *syncBuffer
}

func observe(t *testing.T, px *Proxy) *observed {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := &observed{reg: reg, m: m, log: &syncBuffer{}}
	px.m = m
	px.log = slog.New(slog.NewTextHandler(o.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return o
}

// requests returns tiercache_requests_total{result,layer}, summed over
// the rules.
func (o *observed) requests(t *testing.T, result, layer string) float64 {
	t.Helper()
	mfs, err := o.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "tiercache_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["result"] == result && labels["layer"] == layer {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// bodyCounter is an origin that reads the whole request body before it
// answers, as most applications do.
func bodyCounter(w http.ResponseWriter, r *http.Request) {
	n, err := io.Copy(io.Discard, r.Body)
	if err != nil {
		http.Error(w, "origin could not read the body", http.StatusBadRequest)
		return
	}
	io.WriteString(w, strings.Repeat("x", int(n)))
}

// rawExchange writes raw to addr on a fresh connection, half-closes when
// asked, and reads one response.
func rawExchange(t *testing.T, addr, raw string, halfClose bool) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read response body: %v", err)
	}
	return res, string(b)
}

func TestAnUnreadableClientBodyIsTheClientsError(t *testing.T) {
	const head = "POST /w HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct {
		name      string
		raw       string
		halfClose bool
		wantMsg   string
	}{
		{
			name:    "a chunk size that is not hex",
			raw:     head + "zz\r\nabc\r\n0\r\n\r\n",
			wantMsg: "malformed request body: invalid byte in chunk length",
		},
		{
			name:    "chunk data longer than its size",
			raw:     head + "3\r\nabcdef\r\n0\r\n\r\n",
			wantMsg: "malformed request body: malformed chunked encoding",
		},
		{
			name:      "a chunked body cut off before the last chunk",
			raw:       head + "5\r\nab",
			halfClose: true,
			wantMsg:   "malformed request body: unexpected EOF",
		},
		{
			name:      "a body shorter than its Content-Length",
			raw:       "POST /w HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc",
			halfClose: true,
			wantMsg:   "malformed request body: unexpected EOF",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "", bodyCounter)
			obs := observe(t, f.px)
			res, body := rawExchange(t, f.srv.Listener.Addr().String(), tc.raw, tc.halfClose)
			if res.StatusCode != http.StatusBadRequest || strings.TrimSpace(body) != tc.wantMsg {
				t.Errorf("got %d %q, want 400 %q", res.StatusCode, body, tc.wantMsg)
			}
			if !res.Close {
				t.Errorf("the answer does not close the connection, whose framing is lost")
			}
			if n := testCounter(obs.m.OriginRequests.WithLabelValues("error")); n != 0 {
				t.Errorf("counted %v origin errors", n)
			}
			if n := obs.requests(t, metrics.ResultError, metrics.LayerNone); n != 1 {
				t.Errorf("requests_total{result=error,layer=none} = %v, want 1", n)
			}
			if n := obs.requests(t, metrics.ResultError, metrics.LayerOrigin); n != 0 {
				t.Errorf("requests_total{result=error,layer=origin} = %v, want 0", n)
			}
			logs := obs.log.String()
			if strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "request body unreadable") {
				t.Errorf("want one debug line about the body and no warning, got:\n%s", logs)
			}
		})
	}
}

func TestAClientThatLeavesMidBodyIsNoOriginError(t *testing.T) {
	f := newFixture(t, "", bodyCounter)
	obs := observe(t, f.px)
	c, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "PUT /w HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitFor(t, func() bool {
		return obs.requests(t, metrics.ResultError, metrics.LayerNone)+obs.requests(t, metrics.ResultError, metrics.LayerOrigin) > 0
	}, "the request to finish")
	if n := obs.requests(t, metrics.ResultError, metrics.LayerOrigin); n != 0 {
		t.Errorf("requests_total{result=error,layer=origin} = %v, want 0", n)
	}
	if n := testCounter(obs.m.OriginRequests.WithLabelValues("error")); n != 0 {
		t.Errorf("counted %v origin errors", n)
	}
	if logs := obs.log.String(); strings.Contains(logs, "level=WARN") {
		t.Errorf("a client leaving was logged as a warning:\n%s", logs)
	}
}

func TestABodyOverAServerLimitIs413(t *testing.T) {
	f := newFixture(t, "", bodyCounter)
	obs := observe(t, f.px)
	srv := httptest.NewServer(http.MaxBytesHandler(f.px, 10))
	defer srv.Close()
	// Chunked, so that only the limit, not a Content-Length check, stops it.
	res, body := rawExchange(t, srv.Listener.Addr().String(),
		"POST /w HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n14\r\n"+strings.Repeat("a", 20)+"\r\n0\r\n\r\n", false)
	if res.StatusCode != http.StatusRequestEntityTooLarge || strings.TrimSpace(body) != "request body larger than 10 bytes" {
		t.Errorf("got %d %q, want 413 naming the limit", res.StatusCode, body)
	}
	if n := testCounter(obs.m.OriginRequests.WithLabelValues("error")); n != 0 {
		t.Errorf("counted %v origin errors", n)
	}
}

func TestAWellFramedChunkedBodyStillReachesTheOrigin(t *testing.T) {
	f := newFixture(t, "", bodyCounter)
	res, body := rawExchange(t, f.srv.Listener.Addr().String(),
		"POST /w HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n", false)
	if res.StatusCode != http.StatusOK || body != "xxxxx" {
		t.Errorf("got %d %q, want 200 with the 5 body bytes echoed", res.StatusCode, body)
	}
}

func TestClientBodyFailureClassifiesRoundTripErrors(t *testing.T) {
	bodyErr := errors.New("invalid byte in chunk length")
	// failedBody returns an outbound request whose body has failed once.
	failedBody := func() *http.Request {
		b := &clientBody{rc: io.NopCloser(iotest.ErrReader(bodyErr))}
		_, _ = b.Read(make([]byte, 8))
		return &http.Request{Body: b}
	}
	intactBody := func() *http.Request {
		return &http.Request{Body: &clientBody{rc: io.NopCloser(strings.NewReader("abc"))}}
	}
	tests := []struct {
		name string
		out  func() *http.Request
		err  error
		want bool
	}{
		{"the transport returning the body's error is the client's fault", intactBody, &clientBodyError{err: bodyErr}, true},
		{"the body's error wrapped by the transport is the client's fault", intactBody, fmt.Errorf("write: %w", &clientBodyError{err: bodyErr}), true},
		{"a cancellation reported after the body failed is the client's fault", failedBody, context.Canceled, true},
		{"a broken origin connection with an intact body is the origin's fault", intactBody, io.ErrUnexpectedEOF, false},
		{"a request without a body is the origin's fault", func() *http.Request { return &http.Request{Body: http.NoBody} }, io.EOF, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ce, got := clientBodyFailure(tc.out(), tc.err)
			if got != tc.want {
				t.Fatalf("client's fault = %v, want %v", got, tc.want)
			}
			if got && !errors.Is(ce, bodyErr) {
				t.Errorf("error %v does not carry the body's error", ce)
			}
		})
	}
}
