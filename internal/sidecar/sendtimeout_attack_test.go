package sidecar

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// metricsText returns the sidecar's /metrics page.
func metricsText(t *testing.T, s *sidecar) string {
	t.Helper()
	_, body := s.get(t, "http://"+s.addrs.Admin+"/metrics")
	return body
}

// requestsEnded is how many requests the sidecar has counted in
// tiercache_requests_total (a request is counted when its handler ends).
func requestsEnded(t *testing.T, s *sidecar) int {
	t.Helper()
	n := 0
	for _, line := range strings.Split(metricsText(t, s), "\n") {
		if !strings.HasPrefix(line, "tiercache_requests_total{") {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		n += int(v)
	}
	return n
}

// waitRequestsEnded polls the metrics until n requests have ended (a
// bounded loop: 150 polls, 15 s at most).
func waitRequestsEnded(t *testing.T, s *sidecar, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for i := 0; i < 150 && time.Now().Before(deadline); i++ {
		if requestsEnded(t, s) >= n {
			return
		}
		<-time.After(100 * time.Millisecond)
	}
	t.Fatalf("fewer than %d requests ended within 15 s:\n%s", n, metricsText(t, s))
}

// TestAFillWhoseClientIsCutByTheSendTimeoutIsStoredForTheNext: the client
// that started a fill of a large cacheable body (a body file) reads its
// header and nothing more. The origin sends half the body, then holds the
// rest until that client's request has ended: the send timeout (1 s) cut
// it. The fill goes on without it: once the origin completes, the next
// request gets the whole body, exact, and the one after is a hit, with
// one origin request in all. The cut client is not an origin failure:
// nothing is logged at warn or above, no request counts as an error; and
// it sees a short body and the end of its connection, not a complete
// response.
func TestAFillWhoseClientIsCutByTheSendTimeoutIsStoredForTheNext(t *testing.T) {
	const size = 16 << 20
	body := make([]byte, size)
	for i := range body {
		body[i] = byte(i*13/7 + i>>12)
	}
	release := make(chan struct{})
	var asked atomic.Int32
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(body[:size/2])
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-time.After(20 * time.Second):
		}
		_, _ = w.Write(body[size/2:])
	}))
	defer origin.Close()
	var logs lockedBuffer
	s := startLogging(t, &logs, origin.URL, "--send-timeout", "1s",
		"--body-dir", filepath.Join(t.TempDir(), "bodies"), "--body-dir-size", "64Mi")
	defer s.stop(t)

	c, err := net.Dial("tcp", s.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: "+testHost+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %v, %v", resp, err)
	}
	// The client reads nothing more; its request ends when it is cut.
	waitRequestsEnded(t, s, 1)
	if took := time.Since(start); took < time.Second {
		t.Fatalf("the client's request ended after %s, before --send-timeout", took)
	}
	close(release)

	// Request 2 joins the fill if it is still running (MISS; coalesced)
	// or finds it stored (HIT): both depend only on how fast the origin's
	// second half arrives after release. Request 3 finds it stored.
	for i, want := range []string{"", "HIT"} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+s.addrs.Serve+"/big", nil)
		req.Host = testHost
		r2, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(r2.Body)
		r2.Body.Close()
		if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("request %d after the cut: %d bytes (%v), want the whole body", i+2, len(got), err)
		}
		if x := r2.Header.Get("X-Cache"); !strings.HasPrefix(x, want) || !strings.HasPrefix(x, "MISS") && !strings.HasPrefix(x, "HIT") {
			t.Fatalf("request %d after the cut: X-Cache %q, want %s", i+2, x, want)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the origin was asked %d times, want 1", n)
	}

	expectCutShort(t, c, resp.Body, size)
	for _, line := range strings.Split(metricsText(t, s), "\n") {
		if strings.HasPrefix(line, "tiercache_requests_total{") && strings.Contains(line, `result="error"`) && !strings.HasSuffix(line, " 0") {
			t.Errorf("a request counted as an error: %s", line)
		}
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) {
			t.Errorf("logged: %s", line)
		}
	}
}

// TestAStreamWhoseOriginIsIdleLongerThanTheSendTimeoutIsNotCut: the send
// timeout bounds the client, not the origin. A Server-Sent Events stream
// whose origin sends nothing for 3 send timeouts (the server has nothing
// to write) reaches a reading client whole: both events, the second
// after the pause, and the end of the stream.
func TestAStreamWhoseOriginIsIdleLongerThanTheSendTimeoutIsNotCut(t *testing.T) {
	const pause = 3 * time.Second
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-time.After(pause) // the origin has nothing to say
		_, _ = io.WriteString(w, "data: two\n\n")
	}))
	defer origin.Close()
	s := start(t, origin.URL, "--send-timeout", "1s")
	defer s.stop(t)

	req, _ := http.NewRequest(http.MethodGet, "http://"+s.addrs.Serve+"/events", nil)
	req.Host = testHost
	start := time.Now()
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	first, err := br.ReadString('\n')
	if err != nil || first != "data: one\n" {
		t.Fatalf("first event %q, %v", first, err)
	}
	rest, err := io.ReadAll(br)
	if err != nil || string(rest) != "\ndata: two\n\n" {
		t.Fatalf("after the pause: %q, %v; want the second event and the end", rest, err)
	}
	if took := time.Since(start); took < pause {
		t.Fatalf("the stream took %s, less than the origin's pause: the test proves nothing", took)
	}
}

// TestASlowlorisIsClosedByTheHeaderTimeout: a client that sends its
// request header a byte a second is the read side's affair, which the
// send timeout (a write deadline) does not touch: the serving port's
// ReadHeaderTimeout (10 s) closes it, with no answer, and not before.
func TestASlowlorisIsClosedByTheHeaderTimeout(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("a request reached the origin: %s", r.URL)
	}))
	defer origin.Close()
	s := start(t, origin.URL, "--send-timeout", "1s")
	defer s.stop(t)
	c, err := net.Dial("tcp", s.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: "+testHost+"\r\n"); err != nil {
		t.Fatal(err)
	}
	header := strings.Repeat("X-Slow: loris\r\n", 2)
	var b [1]byte
	for i := 0; i < len(header); i++ {
		// A read that waits a second paces the bytes and sees the close.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(b[:])
		if n > 0 {
			t.Fatalf("the sidecar answered a header still being sent (%q...)", b[:n])
		}
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			took := time.Since(start)
			if took < 9500*time.Millisecond || took > 15*time.Second {
				t.Fatalf("the connection ended after %s (%v), want about 10 s (ReadHeaderTimeout)", took, err)
			}
			return
		}
		if _, err := c.Write([]byte{header[i]}); err != nil {
			t.Fatalf("after %s: %v", time.Since(start), err)
		}
	}
	t.Fatalf("the connection was still open after %s of a header sent a byte a second", time.Since(start))
}
