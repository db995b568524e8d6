package connguard

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The attacker's and reviewer's tests of MaxConns: silent connections,
// and requests read on a connection just as Accept reclaims it.

// heldServer serves h behind Listener with MaxConns(n) and lets a test
// stop the connection it names (hold) in net/http's ConnState hook, at
// state at, after (StateIdle) or before (any other state) connguard's
// ConnState saw it: the interleavings a busy server meets by chance.
type heldServer struct {
	addr   string
	m      *meter
	srv    *http.Server
	done   <-chan error
	idle   chan *conn    // each connection net/http marks idle
	closed chan *conn    // each connection net/http marks closed
	held   chan struct{} // the held connection reached the state
	go_    chan struct{} // closed: it goes on

	hold atomic.Pointer[conn]
	at   http.ConnState
}

func newHeldServer(t *testing.T, n int, at http.ConnState, h http.Handler) *heldServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &heldServer{
		m: newMeter(), at: at,
		idle: make(chan *conn, 16), closed: make(chan *conn, 16),
		held: make(chan struct{}, 1), go_: make(chan struct{}),
	}
	wait := func(c net.Conn, st http.ConnState) {
		if gc, _ := c.(*conn); st == s.at && gc != nil && gc == s.hold.Load() {
			s.held <- struct{}{}
			<-s.go_
		}
	}
	s.srv = &http.Server{
		Handler:           Middleware(h),
		ConnContext:       ConnContext,
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(c net.Conn, st http.ConnState) {
			if st != http.StateIdle {
				wait(c, st)
			}
			ConnState(c, st)
			if st == http.StateIdle {
				wait(c, st)
			}
			switch st {
			case http.StateIdle:
				s.idle <- c.(*conn)
			case http.StateClosed:
				s.closed <- c.(*conn)
			}
		},
	}
	done := make(chan error, 1)
	go func() { done <- s.srv.Serve(Listener(ln, MaxConns(n, s.m))) }()
	s.addr, s.done = ln.Addr().String(), done
	return s
}

func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// untilReclaimed waits for the server's side of the held connection to
// be closed (by Accept, reclaiming it), lets it go on, and waits for
// net/http to be done with it.
func (s *heldServer) untilReclaimed(t *testing.T, c *conn) {
	t.Helper()
	waitUntil(t, func() bool { return c.closed.Load() }, "the held connection to be reclaimed")
	close(s.go_)
	for {
		if recv(t, s.closed, "net/http to close the reclaimed connection") == c {
			return
		}
	}
}

// A request read in full on a keep-alive connection that Accept reclaims
// before net/http marks it active (the window between readRequest and
// ConnState(StateActive)) must not reach the handler: the client sees its
// connection closed before any answer and may retry it elsewhere, which
// is only safe if it was not served. Before the fix, the handler ran a
// POST whose client was told nothing.
func TestARequestReadAsItsConnectionIsReclaimedNeverReachesTheHandler(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served[r.Method+" "+r.URL.Path]++
		mu.Unlock()
		ok(w, r)
	})
	s := newHeldServer(t, 1, http.StateActive, h)
	t.Cleanup(func() { shutdown(t, s.srv, s.done) })

	a := dial(t, s.addr)
	a.getOK("/first")
	sc := recv(t, s.idle, "the first connection to turn idle")
	s.hold.Store(sc)
	a.send("POST /order HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	recv(t, s.held, "the POST to be read") // read, not yet marked active

	b := dial(t, s.addr) // at the bound: reclaims a, still marked idle
	b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	s.untilReclaimed(t, sc)

	a.closed() // no answer at all
	b.answeredOK("the new client")
	mu.Lock()
	defer mu.Unlock()
	if n := served["POST /order"]; n != 0 {
		t.Errorf("the handler served the POST read on the reclaimed connection (%d times): its client saw only a closed connection", n)
	}
	if n := s.m.reclaimed.Load(); n != 1 {
		t.Errorf("reclaimed: %d, want 1", n)
	}
}

// A pipelined request already in net/http's read buffer when the
// connection turns idle, and is reclaimed, is not served either: the
// client gets the answer to the first request whole, then the close.
func TestAPipelinedRequestOnAReclaimedConnectionNeverReachesTheHandler(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	var s *heldServer
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served[r.URL.Path]++
		mu.Unlock()
		if r.URL.Path == "/1" {
			// Hold this connection when it turns idle after /1.
			s.hold.Store(connFrom(r.Context()))
		}
		ok(w, r)
	})
	s = newHeldServer(t, 1, http.StateIdle, h)
	t.Cleanup(func() { shutdown(t, s.srv, s.done) })

	a := dial(t, s.addr)
	// One write, so one read on the server: /2 waits in net/http's buffer.
	a.send("GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\n\r\n")
	recv(t, s.held, "the connection to turn idle after /1")
	sc := s.hold.Load()

	b := dial(t, s.addr) // at the bound: reclaims a
	b.send("GET /b HTTP/1.1\r\nHost: x\r\n\r\n")
	s.untilReclaimed(t, sc)

	a.answeredOK("the first pipelined request")
	a.closed()
	b.answeredOK("the new client")
	mu.Lock()
	defer mu.Unlock()
	if n := served["/2"]; n != 0 {
		t.Errorf("the handler served the pipelined request read on the reclaimed connection (%d times): its client saw only a closed connection", n)
	}
}

// Silent connections (accepted, never a byte: StateNew until the header
// timeout, 10 s in the sidecar) are reclaimable, oldest first, as nginx
// reclaims a connection that waits for its first request
// (ngx_http_init_connection marks it reusable). Before the fix they were
// not: --max-connections of them, renewed every header timeout, kept
// every honest new client in the backlog.
func TestSilentConnectionsDoNotLockOutANewClient(t *testing.T) {
	addr, m, _, srv, done := limited(t, 2, http.HandlerFunc(ok))
	t.Cleanup(func() { shutdown(t, srv, done) })

	s1 := dial(t, addr)
	waitUntil(t, func() bool { return m.open.Load() == 1 }, "the first silent connection to take a slot")
	s2 := dial(t, addr)
	waitUntil(t, func() bool { return m.open.Load() == 2 }, "the second silent connection to take a slot")

	c := dial(t, addr)
	if err := c.c.SetDeadline(time.Now().Add(3 * time.Second)); err != nil {
		t.Fatal(err)
	}
	c.getOK("/honest") // after newGrace (1 s); before the fix, the header timeout (10 s)
	s1.closed()        // the oldest silent one made room
	if n := m.reclaimed.Load(); n != 1 {
		t.Errorf("reclaimed: %d, want 1", n)
	}
	_ = s2
}

// A new connection is reclaimable only once it has been silent for a
// moment (newGrace): under load, with every other slot at work, a
// connection accepted a moment ago whose request is on its way is not
// closed for the next one accepted (each newcomer would close the one
// before it, and a client whose fresh connection closes gets an error:
// HTTP clients retry only on a reused one). The newcomer waits instead,
// and gets the slot when that connection, served, turns idle.
func TestANewConnectionIsNotReclaimedForTheNextBeforeItCouldSpeak(t *testing.T) {
	h, release, served := holding()
	addr, m, _, srv, done := limited(t, 2, h)
	t.Cleanup(func() { shutdown(t, srv, done) })
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // first, on failure too

	a := dial(t, addr)
	a.send("GET /hold HTTP/1.1\r\nHost: x\r\n\r\n")
	waitUntil(t, func() bool { _, ok := served.Load("/hold"); return ok }, "the first request to reach the handler")

	x := dial(t, addr) // accepted, its request not sent yet
	waitUntil(t, func() bool { return m.open.Load() == 2 }, "the second connection to take a slot")
	y := dial(t, addr)
	y.send("GET /y HTTP/1.1\r\nHost: x\r\n\r\n")
	m.waits(t, "the third connection did not wait: it closed the second, accepted a moment before it")
	x.getOK("/x") // sent within the grace: served
	y.answeredOK("the connection that waited")
	x.closed() // idle after its answer: it made room for y
	free()
	a.answeredOK("the connection at work")
}

// Each way a connection ends gives its slot back once: a handler that
// panics (net/http recovers and closes), a request Middleware refuses
// with Connection: close, a body the handler left unread (net/http's
// closeWriteAndWait: half-close, linger, close), a hijacked connection
// its hijacker closes. The count comes back to 0 after each, never
// below.
func TestSlotsAreGivenBackWhateverEndsAConnection(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/panic":
			panic(http.ErrAbortHandler) // net/http's recovery, without the log
		case "/unread":
			ok(w, r) // the body is left unread
		case "/hijack":
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			Detach(r.Context())
			_ = c.Close()
		default:
			ok(w, r)
		}
	})
	addr, m, _, srv, done := limited(t, 4, h)
	t.Cleanup(func() { shutdown(t, srv, done) })

	big := strings.Repeat("x", 1<<20)
	cases := []struct {
		name, raw string
		answered  bool
	}{
		{"a handler that panics", "GET /panic HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"a request refused by Middleware", "POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", true},
		{"a body left unread (closeWriteAndWait)", "POST /unread HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big, true},
		{"a hijacked connection its hijacker closes", "GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n", false},
	}
	for _, tc := range cases {
		c := dial(t, addr)
		go func() { _, _ = io.WriteString(c.c, tc.raw) }() // may be cut short by the close
		if tc.answered {
			if _, err := http.ReadResponse(c.br, nil); err != nil {
				t.Fatalf("%s: no answer: %v", tc.name, err)
			}
			_, _ = io.Copy(io.Discard, c.br)
		} else {
			c.closed()
		}
		waitUntil(t, func() bool { return m.open.Load() == 0 }, tc.name+": the slot to be given back")
		_ = c.c.Close()
		if n := m.open.Load(); n != 0 {
			t.Fatalf("%s: open connections %d after the client closed too, want 0", tc.name, n)
		}
	}
}

// Many keep-alive clients over few slots, each sending its next request
// as soon as it has the last answer: connections are reclaimed while
// requests arrive on them, new ones wait, idle marks race the scan. No
// client waits for ever, every answer is the one to its own request, and
// a request whose client saw its connection close unanswered was not
// served (so retrying it, as the client does here, repeats nothing).
func TestUnderChurnEveryRequestIsAnsweredRightOrNotServed(t *testing.T) {
	var mu sync.Mutex
	served := map[string]int{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served[r.URL.Path]++
		mu.Unlock()
		_, _ = io.WriteString(w, r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &counts{}
	srv := &http.Server{
		Handler:           Middleware(h),
		ConnContext:       ConnContext,
		ConnState:         ConnState,
		ReadHeaderTimeout: 10 * time.Second,
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(Listener(ln, MaxConns(3, m))) }()
	t.Cleanup(func() { shutdown(t, srv, done) })
	addr := ln.Addr().String()

	const clients, requests = 8, 40
	var wg sync.WaitGroup
	unanswered := make(chan string, clients*requests*4)
	errs := make(chan error, clients)
	for i := range clients {
		wg.Go(func() {
			var c net.Conn
			var br *bufio.Reader
			defer func() {
				if c != nil {
					c.Close()
				}
			}()
			for j, tries := 0, 0; j < requests; tries++ {
				if tries > requests*4 {
					errs <- fmt.Errorf("client %d: %d tries for %d requests", i, tries, requests)
					return
				}
				if c == nil {
					var err error
					if c, err = net.Dial("tcp", addr); err != nil {
						errs <- err
						return
					}
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					br = bufio.NewReader(c)
				}
				path := fmt.Sprintf("/%d/%d/%d", i, j, tries)
				_, werr := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n")
				res, err := http.ReadResponse(br, nil)
				if werr != nil || err != nil {
					var ne net.Error
					if errors.As(err, &ne) && ne.Timeout() {
						errs <- fmt.Errorf("client %d: no answer and no close for %s: %v", i, path, err)
						return
					}
					unanswered <- path // closed before an answer: retry on a new one
					c.Close()
					c = nil
					continue
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				if err != nil || res.StatusCode != http.StatusOK || string(b) != path {
					errs <- fmt.Errorf("client %d: %s answered %d %q (%v)", i, path, res.StatusCode, b, err)
					return
				}
				j++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	close(unanswered)
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for path := range unanswered {
		n++
		if served[path] != 0 {
			t.Errorf("%s was served, but its client saw its connection close unanswered", path)
		}
	}
	t.Logf("%d requests closed unanswered and retried; %d reclaimed, %d waited", n, m.reclaimed.Load(), m.waited.Load())
}

// counts is a ConnMeter that only counts.
type counts struct{ open, reclaimed, waited atomic.Int64 }

func (m *counts) ConnOpened()    { m.open.Add(1) }
func (m *counts) ConnClosed()    { m.open.Add(-1) }
func (m *counts) ConnReclaimed() { m.reclaimed.Add(1) }
func (m *counts) ConnWaited()    { m.waited.Add(1) }
