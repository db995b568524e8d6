package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
)

// Attacker-review tests of issue 12 (the body store). Each one FAILS on
// the code as reviewed: the failure is the weakness.

// dialSlowReader connects to addr with a tiny receive buffer and sends
// GET path without ever reading the answer: the slowest client there is.
func dialSlowReader(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr); err != nil {
		t.Fatal(err)
	}
	return conn
}

// ATTACK: a client requests a large cacheable URL nobody has cached yet
// and then reads its response as slowly as TCP lets it (a tiny receive
// window, or simply not reading). fillFile writes every chunk to that
// client (w.Write + Flush) inside the loop that reads the origin and
// appends to the body file, so the leader's socket paces the whole fill:
// the body file grows only as fast as the slowest client drains, every
// waiter that follows the growing file (the "streaming waiters" feature)
// is stalled at the attacker's pace, the fill's budget reservation is
// pinned, and once the origin's body has been unread for
// origin.idleTimeout the watchdog cuts it, which aborts the file: every
// follower's response is broken off and nothing is stored, so the next
// request elects a new leader the attacker can stall again. One
// connection per hot large object denies it to all clients of the pod.
// (nginx's proxy_cache writes the upstream body to its temp file at
// upstream speed, independently of the client; proxy_cache_lock waiters
// read the finished file.)
// Defence: decouple the client from the fill once a body file is begun:
// the fill goroutine writes the origin body to the file only, and the
// leader's own client follows the file like any waiter (or the client
// write gets a deadline after which that client is dropped, never the
// fill).
func TestATTACK_ASlowReadingLeaderStallsEveryFollowerOfAFileFill(t *testing.T) {
	const size = 48 << 20 // far above what the socket buffers of a loopback connection hold
	body := payload(21, size)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(body) // as fast as loopback goes
	})
	f := newFileFixture(t, "", o, bodystore.Options{})

	dialSlowReader(t, f.srv.Listener.Addr().String(), "/hot")
	waitFor(t, func() bool { _, tmp := f.files(); return len(tmp) == 1 }, "the slow client's fill to begin its body file")

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	waiter := f.started(t, ctx, "/hot")
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
		t.Fatalf("the second client was not a waiter of the fill: X-Cache %q", x)
	}
	got, err := io.ReadAll(waiter.Body)
	if len(got) != size || !bytes.Equal(got, body) {
		t.Fatalf("an honest client waiting on the fill got %d of %d bytes in 10s (err %v) although the origin "+
			"sent the whole body at once: the attacker's unread connection paces the fill and every follower",
			len(got), size, err)
	}
}
