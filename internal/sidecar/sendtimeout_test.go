package sidecar

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/connguard"
)

func TestTheSendTimeoutIsSixtySecondsUnlessSet(t *testing.T) {
	if connguard.DefaultSendTimeout != 60*time.Second {
		t.Fatalf("connguard.DefaultSendTimeout = %s, want nginx's 60s", connguard.DefaultSendTimeout)
	}
	o, err := ParseArgs([]string{"--upstream", "http://x:1"}, noEnv, io.Discard)
	if err != nil || o.SendTimeout != connguard.DefaultSendTimeout {
		t.Fatalf("default --send-timeout = %s (%v), want 60s", o.SendTimeout, err)
	}
	o, err = ParseArgs([]string{"--upstream", "http://x:1"}, func(k string) string {
		return map[string]string{"TIERCACHE_SEND_TIMEOUT": "2m"}[k]
	}, io.Discard)
	if err != nil || o.SendTimeout != 2*time.Minute {
		t.Fatalf("TIERCACHE_SEND_TIMEOUT=2m gave %s (%v)", o.SendTimeout, err)
	}
}

// TestAClientThatStopsReadingIsClosedAtTheSendTimeout: through the whole
// sidecar, a client that asks for a large streamed body and reads nothing
// after the header is given up on after --send-timeout (1 s): the
// sidecar stops reading the origin and drops its request (the origin's
// write fails), and the client, reading at last, gets a short body and
// the end of the connection. Without the flag wired to the listener the
// origin would still be writing 15 s later.
func TestAClientThatStopsReadingIsClosedAtTheSendTimeout(t *testing.T) {
	const size = 64 << 20 // far more than both ends' socket buffers hold
	chunk := make([]byte, 64<<10)
	originDone := make(chan error, 1)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		var err error
		for n := 0; n < size && err == nil; n += len(chunk) {
			_, err = w.Write(chunk)
		}
		originDone <- err
	}))
	defer origin.Close()
	s := start(t, origin.URL, "--send-timeout", "1s")
	defer s.stop(t)

	c, err := net.Dial("tcp", s.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetReadBuffer(32 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: "+testHost+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("response %v, %v", resp, err)
	}
	start := time.Now()
	// The client reads nothing more until the origin's write fails.
	select {
	case err := <-originDone:
		if err == nil {
			t.Fatalf("the origin wrote all %d bytes to a sidecar whose client reads nothing", size)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the origin was still writing 15 s after the client stopped reading")
	}
	if took := time.Since(start); took < time.Second {
		t.Fatalf("the sidecar gave up after %s, before --send-timeout", took)
	}
	expectCutShort(t, c, resp.Body, size)
}

// expectCutShort reads body, of a response of size bytes the sidecar gave
// up on, from c: a short body, then the end of the connection (not a
// wait for more).
func expectCutShort(t *testing.T, c net.Conn, body io.Reader, size int64) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.Copy(io.Discard, body)
	if err == nil || got >= size {
		t.Fatalf("the cut client read %d bytes (%v), want a short body and an error", got, err)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the cut client waited for more after %d bytes: the sidecar did not close the connection", got)
	}
}
