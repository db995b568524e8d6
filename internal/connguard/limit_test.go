package connguard

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// meter is a ConnMeter that counts, and signals each wait for a slot.
type meter struct {
	open, reclaimed atomic.Int64
	waited          chan struct{}
}

func newMeter() *meter { return &meter{waited: make(chan struct{}, 16)} }

func (m *meter) ConnOpened()    { m.open.Add(1) }
func (m *meter) ConnClosed()    { m.open.Add(-1) }
func (m *meter) ConnReclaimed() { m.reclaimed.Add(1) }
func (m *meter) ConnWaited()    { m.waited <- struct{}{} }

// limited serves h on loopback behind Listener with MaxConns(n). idle
// receives each connection net/http marks idle, after connguard has.
func limited(t *testing.T, n int, h http.Handler) (addr string, m *meter, idle <-chan net.Conn, srv *http.Server, done <-chan error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m = newMeter()
	idles := make(chan net.Conn, 16)
	srv = &http.Server{
		Handler:           Middleware(h),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			ConnState(c, st)
			if st == http.StateIdle {
				idles <- c
			}
		},
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(Listener(ln, MaxConns(n, m))) }()
	return ln.Addr().String(), m, idles, srv, errc
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }

// getOK sends GET path on c and expects 200 "ok".
func (c *client) getOK(path string) {
	c.t.Helper()
	c.send("GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n")
	c.answeredOK("GET " + path)
}

// answeredOK reads a response on c and expects 200 "ok"; what names the
// exchange in the failure.
func (c *client) answeredOK(what string) {
	c.t.Helper()
	if res, body := c.response(); res.StatusCode != http.StatusOK || body != "ok" {
		c.t.Fatalf("%s: %d %q", what, res.StatusCode, body)
	}
}

// At the bound, the connection idle longest is closed to make room for a
// new one, and the others are kept.
func TestAtTheBoundTheLongestIdleConnectionMakesRoom(t *testing.T) {
	addr, m, idle, srv, done := limited(t, 2, http.HandlerFunc(ok))
	t.Cleanup(func() { shutdown(t, srv, done) })

	a := dial(t, addr)
	a.getOK("/a")
	<-idle
	b := dial(t, addr)
	b.getOK("/b")
	<-idle

	c := dial(t, addr) // a third client, with both slots taken by idle ones
	c.getOK("/c")
	a.closed()
	b.getOK("/b2")
	if n := m.reclaimed.Load(); n != 1 {
		t.Errorf("idle connections reclaimed: %d, want 1", n)
	}
	if n := m.open.Load(); n != 2 {
		t.Errorf("open connections: %d, want 2", n)
	}
}

// With no idle connection to close, a new connection waits for a slot and
// no connection at work is cut for it; it is served once one closes.
func TestWithNoIdleConnectionANewOneWaitsForASlot(t *testing.T) {
	h, release, served := holding()
	addr, m, _, srv, done := limited(t, 1, h)
	t.Cleanup(func() { shutdown(t, srv, done) })

	a := dial(t, addr)
	a.send("GET /hold HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	waitUntil(t, func() bool { _, ok := served.Load("/hold"); return ok }, "the first request to reach the handler")

	b := dial(t, addr)
	b.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	m.waits(t, "the second connection did not wait for a slot: the bound did not hold")
	if _, ok := served.Load("/next"); ok {
		t.Fatal("the second request was served while the only slot was taken")
	}

	close(release)
	a.answeredOK("the connection at work")
	b.answeredOK("the waiting connection, once a slot was free")
	if n := m.reclaimed.Load(); n != 0 {
		t.Errorf("connections reclaimed: %d, want 0 (none was idle)", n)
	}
}

// A connection that turns idle while a new one waits for a slot makes
// room for it at once, not when it closes (120 s later in the sidecar).
func TestAConnectionThatTurnsIdleMakesRoomForOneThatWaits(t *testing.T) {
	h, release, served := holding()
	addr, m, _, srv, done := limited(t, 1, h)
	t.Cleanup(func() { shutdown(t, srv, done) })

	a := dial(t, addr)
	a.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n") // keep-alive
	waitUntil(t, func() bool { _, ok := served.Load("/hold"); return ok }, "the first request to reach the handler")
	b := dial(t, addr)
	b.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	m.waits(t, "the second connection did not wait for a slot")
	close(release)
	a.answeredOK("the connection at work")
	b.answeredOK("the waiting connection")
	a.closed()
}

// A hijacked connection keeps its slot until it is closed.
func TestAHijackedConnectionHoldsItsSlotUntilClosed(t *testing.T) {
	hijacked := make(chan net.Conn, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/upgrade" {
			ok(w, r)
			return
		}
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		Detach(r.Context())
		hijacked <- c
	})
	addr, m, _, srv, done := limited(t, 1, h)
	t.Cleanup(func() { shutdown(t, srv, done) })

	a := dial(t, addr)
	a.send("GET /upgrade HTTP/1.1\r\nHost: x\r\n\r\n")
	hc := <-hijacked
	b := dial(t, addr)
	b.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	m.waits(t, "a new connection did not wait while the hijacked one held the only slot")
	_ = hc.Close()
	b.answeredOK("after the hijacked connection closed")
}

// Every connection gives its slot back exactly once, however it ends.
func TestSlotsAreGivenBackOnceHoweverConnectionsEnd(t *testing.T) {
	addr, m, idle, srv, done := limited(t, 3, http.HandlerFunc(ok))
	for i := range 30 {
		c := dial(t, addr)
		switch i % 3 {
		case 0: // the client closes
			c.getOK("/x")
			<-idle
			_ = c.c.Close()
		case 1: // the server closes
			c.send("GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			c.response()
			c.closed()
		case 2: // reclaimed or closed at shutdown
			c.getOK("/x")
			<-idle
		}
	}
	shutdown(t, srv, done)
	waitUntil(t, func() bool { return m.open.Load() == 0 }, "every slot to be given back")
	if n := m.reclaimed.Load(); n == 0 {
		t.Error("no idle connection was reclaimed, though more were left idle than the bound")
	}
}

// Closing the listener ends an Accept that waits for a slot.
func TestShutdownEndsAWaitForASlot(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		ok(w, r)
	})
	addr, m, _, srv, done := limited(t, 1, h)
	a := dial(t, addr)
	a.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	b := dial(t, addr)
	b.send("GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
	m.waits(t, "the second connection did not wait for a slot")
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, http.ErrServerClosed) {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return: the wait for a slot outlived the listener")
	}
	close(release)
	b.closed()
}

// MaxConns(0) is no bound.
func TestNoBoundWithMaxConnsZero(t *testing.T) {
	addr, m, _, srv, done := limited(t, 0, http.HandlerFunc(ok))
	t.Cleanup(func() { shutdown(t, srv, done) })
	for range 5 {
		dial(t, addr).getOK("/x")
	}
	if n := m.open.Load(); n != 0 {
		t.Fatalf("the meter counted %d connections without a bound", n)
	}
}

// holding answers "ok", but holds /hold until release is closed; served
// records the paths that reached it.
func holding() (h http.Handler, release chan struct{}, served *sync.Map) {
	release, served = make(chan struct{}), &sync.Map{}
	h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Store(r.URL.Path, true)
		if r.URL.Path == "/hold" {
			<-release
		}
		ok(w, r)
	})
	return h, release, served
}

// waits expects an accepted connection to wait for a slot within 5s; why
// says what it means if none does.
func (m *meter) waits(t *testing.T, why string) {
	t.Helper()
	select {
	case <-m.waited:
	case <-time.After(5 * time.Second):
		t.Fatal(why)
	}
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
