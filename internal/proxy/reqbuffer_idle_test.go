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
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/metrics"
)

// The idle timeout while a body read ahead (reqbuffer.go) is sent to the
// origin: the origin taking it is progress, as the client sending it was.

// smallBuffers sets a socket's kernel send and receive buffers to 4 KiB
// (the kernel doubles it), before it connects or listens: what a peer
// writes then waits on the other end's reading instead of filling
// loopback's megabytes of kernel buffers.
func smallBuffers(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4096); serr == nil {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		}
	})
	if err != nil {
		return err
	}
	return serr
}

// withSmallOriginBuffers makes the proxy's origin connections send (and
// receive) through small kernel buffers.
func withSmallOriginBuffers(t *testing.T) func(*Options) {
	return func(po *Options) {
		tr := &http.Transport{DialContext: (&net.Dialer{Control: smallBuffers}).DialContext}
		t.Cleanup(tr.CloseIdleConnections)
		po.Transport = tr
	}
}

// serveSmallBuffers starts h on loopback with small kernel buffers on
// every connection it accepts (they inherit the listener's).
func serveSmallBuffers(t *testing.T) func(http.Handler) *httptest.Server {
	return func(h http.Handler) *httptest.Server {
		ln, err := (&net.ListenConfig{Control: smallBuffers}).Listen(context.Background(), "tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		s := httptest.NewUnstartedServer(h)
		s.Listener.Close()
		s.Listener = ln
		s.Start()
		return s
	}
}

// steadyTaker is an origin that reads a request body piece bytes at a
// time, pausing gap after each (an application that processes what it
// reads), for at most 10 s, and answers with the count and how long it
// took (X-Took, in milliseconds).
func steadyTaker(piece int, gap time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, piece)
		start := time.Now()
		n := 0
		for time.Since(start) < 10*time.Second {
			m, err := io.ReadFull(r.Body, buf)
			n += m
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				break
			}
			if err != nil {
				http.Error(w, fmt.Sprintf("after %d bytes: %v", n, err), http.StatusBadRequest)
				return
			}
			time.Sleep(gap) // the origin's pace, not a barrier
		}
		w.Header().Set("X-Took", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
		fmt.Fprintf(w, "took %d bytes", n)
	}
}

// An origin that takes a buffered body slowly but steadily, for longer
// than origin.idleTimeout in all, is not cut: each piece it takes is
// progress, as each piece the client sent was while the body was read
// ahead. Before, nothing re-armed the idle timer while the read-ahead
// chunks were sent, and such an upload (64 MiB to an application that
// processes as it reads) got 504 "the origin did not take the request"
// although bytes moved the whole time. Whether the body was read ahead
// whole, or only its first part (chunked and larger than the buffer, or
// past the budget) with the rest from the client after it.
func TestAnOriginThatTakesABufferedBodySlowlyButSteadilyIsNotCut(t *testing.T) {
	const idle = 300 * time.Millisecond
	const size = 640 << 10
	for _, c := range []struct {
		name    string
		cfg     string
		chunked bool
		budget  int64 // 0: RequestBufferBudget
		result  string
	}{
		{"read ahead whole", "", false, 0, metrics.BufferedWhole},
		{"chunked and larger than the buffer", "requestBuffer: 512Ki, ", true, 0, metrics.BufferedTooLarge},
		{"past the budget", "", false, 512 << 10, metrics.BufferedOverBudget},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := newOriginWith(t, steadyTaker(4<<10, 5*time.Millisecond), serveSmallBuffers(t))
			f := newFixtureWith(t, fmt.Sprintf("origin: {%sidleTimeout: %s}", c.cfg, idle), o, withSmallOriginBuffers(t), nil)
			obs := observe(t, f.px)
			if c.budget > 0 {
				f.px.reqBudget = newByteBudget(c.budget)
			}
			body := bytes.Repeat([]byte("u"), size)
			req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/upload", io.NopCloser(bytes.NewReader(body)))
			req.ContentLength = size
			if c.chunked {
				req.ContentLength = -1
			}
			start := time.Now()
			r := f.send(req)
			if r.status != 200 || r.body != fmt.Sprintf("took %d bytes", size) {
				t.Fatalf("got %d %q after %s, want 200 \"took %d bytes\": an origin that took the body steadily was cut", r.status, r.body, time.Since(start), size)
			}
			took, _ := strconv.Atoi(r.header.Get("X-Took"))
			if time.Duration(took)*time.Millisecond < 2*idle {
				t.Fatalf("the origin took the body in %d ms, not much longer than origin.idleTimeout (%s): the kernel absorbed it, this proves nothing", took, idle)
			}
			if n := testCounter(obs.m.RequestBodies.WithLabelValues(c.result)); n != 1 {
				t.Errorf("request_bodies_buffered_total{result=%q} = %v, want 1", c.result, n)
			}
		})
	}
}

// An origin that stops taking a buffered body is still cut after
// origin.idleTimeout, and it is the origin's fault (504), not the
// client's (408): the client had sent what the origin stalls on.
func TestAnOriginThatStopsTakingABufferedBodyIsCutAfterTheIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, c := range []struct {
		name    string
		cfg     string
		size    int
		chunked bool
	}{
		{"read ahead whole", "", 640 << 10, false},
		// The rest (128 KiB) is what net/http drains after the answer.
		{"chunked and larger than the buffer", "requestBuffer: 256Ki, ", 384 << 10, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			release := make(chan struct{})
			o := newOriginWith(t, func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.CopyN(io.Discard, r.Body, 16<<10); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				select { // takes nothing more
				case <-release:
				case <-time.After(10 * time.Second):
				}
			}, serveSmallBuffers(t))
			f := newFixtureWith(t, fmt.Sprintf("origin: {%sidleTimeout: %s}", c.cfg, idle), o, withSmallOriginBuffers(t), nil)
			t.Cleanup(func() { close(release) }) // before the origin closes
			req, _ := http.NewRequestWithContext(within(t, 10*time.Second), "POST", f.srv.URL+"/upload", io.NopCloser(bytes.NewReader(bytes.Repeat([]byte("s"), c.size))))
			req.ContentLength = int64(c.size)
			if c.chunked {
				req.ContentLength = -1
			}
			start := time.Now()
			r := f.send(req)
			took := time.Since(start)
			if r.status != http.StatusGatewayTimeout {
				t.Fatalf("got %d %q after %s, want 504: the origin stopped taking the body", r.status, r.body, took)
			}
			if took < idle || took > idle+3*time.Second {
				t.Fatalf("504 after %s, want it after origin.idleTimeout (%s)", took, idle)
			}
		})
	}
}

// Past the seam of a body only partly read ahead, the client's stalls
// are the client's again: the read-ahead part went to an origin that
// took it slowly (longer than origin.idleTimeout), then the client sends
// nothing more and gets 408.
func TestAClientThatStallsAfterTheReadAheadPartGets408(t *testing.T) {
	const idle = 300 * time.Millisecond
	var taken atomic.Int64
	o := newOriginWith(t, func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 4<<10)
		for start := time.Now(); time.Since(start) < 10*time.Second; {
			n, err := r.Body.Read(buf)
			taken.Add(int64(n))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			time.Sleep(5 * time.Millisecond) // the origin's pace, not a barrier
		}
	}, serveSmallBuffers(t))
	f := newFixtureWith(t, fmt.Sprintf("origin: {requestBuffer: 512Ki, idleTimeout: %s}", idle), o, withSmallOriginBuffers(t), nil)
	c := dialFor(t, f.srv.Listener.Addr().String(), 10*time.Second)
	chunk := strings.Repeat("c", 32<<10)
	var req strings.Builder
	req.WriteString("POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	for range 20 { // 640 KiB, then nothing: no last chunk
		fmt.Fprintf(&req, "%x\r\n%s\r\n", len(chunk), chunk)
	}
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatal(err)
	}
	res, b := readAnswer(t, bufio.NewReader(c))
	if res.StatusCode != http.StatusRequestTimeout || !strings.Contains(b, "origin.idleTimeout") {
		t.Fatalf("got %d %q with %d bytes taken by the origin, want 408 naming origin.idleTimeout", res.StatusCode, b, taken.Load())
	}
	if n := taken.Load(); n < 256<<10 {
		t.Fatalf("the origin took %d bytes before the 408, want the read-ahead part (512 KiB) first", n)
	}
}
