package proxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/metrics"
)

// A file fill runs at the origin's pace on a goroutine of its own, and the
// client that started it follows it like any waiter (fillfile.go,
// fillfeed.go).

func TestAFillWhoseLeaderDoesNotReadIsStoredAtTheOriginsPace(t *testing.T) {
	const size = 48 << 20 // far above what the socket buffers of a loopback connection hold
	body := payload(22, size)
	for name, withLength := range map[string]bool{"with a Content-Length": true, "chunked": false} {
		t.Run(name, func(t *testing.T) {
			f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=300")
				if withLength {
					w.Header().Set("Content-Length", strconv.Itoa(size))
				}
				_, _ = w.Write(body)
			}), bodystore.Options{})
			dialSlowReader(t, f.srv.Listener.Addr().String(), "/hot")
			waitFor(t, func() bool { _, tmp := f.files(); return len(tmp) == 1 }, "the slow client's fill to begin its body file")

			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			waiter := f.started(t, ctx, "/hot")
			if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
				t.Fatalf("the second client was not a waiter of the fill: X-Cache %q", x)
			}
			got, err := io.ReadAll(waiter.Body)
			if !bytes.Equal(got, body) {
				t.Fatalf("the waiter got %d of %d bytes in 10s (err %v): the unread leader paces the fill", len(got), size, err)
			}
			// Stored, and its reservation turned into a committed file,
			// while the leader's client still has not read.
			if e := f.waitStored(t, "/hot"); e.File == nil || e.File.Size != size {
				t.Fatalf("stored %+v, want a %d-byte file", e.File, size)
			}
			if committed, files, reserved := f.bodies.Usage(); files != 1 || reserved != 0 || committed < size {
				t.Fatalf("body store: %d bytes in %d files, %d reserved; want the one file and nothing reserved", committed, files, reserved)
			}
			expectBody(t, f.get("/hot"), 200, "HIT; layer=l1", body)
			if n := f.origin.count(); n != 1 {
				t.Fatalf("the origin saw %d requests, want 1", n)
			}
		})
	}
}

func TestTheClientThatStartsAFileFillIsSentItWithSendfile(t *testing.T) {
	f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
	expectBody(t, f.get("/big"), 200, "MISS", bodyFor("/big", fileSize))
	if got := f.rec.take(); !slices.Contains(got, "*io.LimitedReader(*os.File)") {
		t.Fatalf("the connection's ReadFrom saw %q, want pieces of the body file", got)
	}
}

func TestAFileWriteErrorWhileItsClientIsBehindStillServesItTheWholeBody(t *testing.T) {
	// The client reads nothing until the fill's file has failed at 1 MiB
	// (RLIMIT_FSIZE): it must then get what the file holds, and the rest
	// from the origin, byte for byte.
	body := payload(23, 4<<20)
	f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}), bodystore.Options{})
	restore := limitFileSize(t, 1<<20)
	conn := dialSlowReader(t, f.srv.Listener.Addr().String(), "/disk")
	waitFor(t, func() bool { return f.bodyErrors(metrics.BodyOpWrite) >= 1 }, "the body file's write to fail")
	restore()

	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("the client got %d of %d bytes (err %v, equal prefix %d)", len(got), len(body), err, commonPrefix(got, body))
	}
	if x := resp.Header.Get("X-Cache"); x != "MISS" {
		t.Fatalf("X-Cache %q", x)
	}
	waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 0 && len(tmp) == 0 }, "the failed file to be removed")
	if e := f.stored("/disk"); e != nil {
		t.Fatal("a body whose file failed was stored")
	}
}

func TestAWaiterThatStopsReadingHoldsUpNobody(t *testing.T) {
	// Each follower reads the file at its own pace: one that stops holds
	// its own connection and descriptor, not the fill, the leader or the
	// other waiters.
	o := newHeldOrigin(t, 32<<20, false)
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	leader := f.started(t, ctx, "/held")
	fromLeader := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(leader.Body); fromLeader <- b }()
	o.holding(t)
	dialSlowReader(t, f.srv.Listener.Addr().String(), "/held")
	waitFor(t, func() bool { return testCounter(f.px.m.Coalesced) == 1 }, "the slow client to wait on the fill")
	waiter := f.started(t, ctx, "/held")
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
		t.Fatalf("waiter: X-Cache %q", x)
	}
	close(o.release)
	if got, err := io.ReadAll(waiter.Body); !bytes.Equal(got, o.body) {
		t.Fatalf("waiter: %d of %d bytes (err %v)", len(got), len(o.body), err)
	}
	select {
	case got := <-fromLeader:
		if !bytes.Equal(got, o.body) {
			t.Fatalf("leader: %d of %d bytes", len(got), len(o.body))
		}
	case <-ctx.Done():
		t.Fatal("the leader's response did not end within 10s")
	}
	f.waitStored(t, "/held")
}

func TestClosingTheProxyCutsAFileFillThatRunsOnItsOwn(t *testing.T) {
	o := newHeldOrigin(t, 512<<10, false)
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	leader := f.started(t, t.Context(), "/closing")
	readN(t, leader.Body, len(o.body)/2)
	// The origin holds the second half: the fill's goroutine waits on it
	// (origin.idleTimeout is a minute). Close must cut it and wait for it.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if err := f.px.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if rest, err := io.ReadAll(leader.Body); err == nil {
		t.Fatalf("the client's response ended cleanly after %d more bytes", len(rest))
	}
	if b, tmp := f.files(); len(b) != 0 || len(tmp) != 0 {
		t.Fatalf("files left after Close: %q %q", b, tmp)
	}
	if e := f.stored("/closing"); e != nil {
		t.Fatal("a fill cut by Close was stored")
	}
}

// dialSlowReader connects to addr with a tiny receive buffer and sends
// GET path without ever reading the answer: the slowest client there is.
func dialSlowReader(t *testing.T, addr, path string) net.Conn {
	t.Helper()
	d := tinyWindowDialer()
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

// tinyWindowDialer dials with a 4 KiB receive buffer: a client whose
// kernel takes little at a time.
func tinyWindowDialer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
		if err != nil {
			return err
		}
		return serr
	}}
}

// A slow-reading leader stalls no follower of its file fill.
//
// ATTACK: a client requests a large
// cacheable URL nobody has cached yet and then reads its response as
// slowly as TCP lets it (a tiny receive window, or simply not reading).
// fillFile wrote every chunk to that client (w.Write + Flush) inside the
// loop that reads the origin and appends to the body file, so the
// leader's socket paced the whole fill: the body file grew only as fast as
// the slowest client drained, every waiter that follows the growing file
// was stalled at the attacker's pace, the fill's budget reservation was
// pinned, and once the origin's body had been unread for
// origin.idleTimeout the watchdog cut it, which aborted the file: every
// follower's response was broken off and nothing stored, so the next
// request elected a new leader the attacker could stall again. One
// connection per hot large object denied it to all clients of the pod.
// (nginx's proxy_cache writes the upstream body to its temp file at
// upstream speed, independently of the client; proxy_cache_lock waiters
// read the finished file.)
// Defence: once a fill has begun its file, the copy origin -> file runs
// at the origin's pace on a goroutine of its own (fillfile.go), and the
// leader's client follows the file like any waiter (fillfeed.go).
func TestASlowReadingLeaderStallsNoFollowerOfAFileFill(t *testing.T) {
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
