package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// framingOrigin is an origin on a raw loopback listener, keep-alive,
// that answers each request with what answer returns for it and records
// the connection (numbered from 1) each request arrived on. It holds its
// answer to the path set by hold until release.
type framingOrigin struct {
	ln     net.Listener
	answer func(path string) string

	mu       sync.Mutex
	on       map[string]int // path -> connection
	asked    map[string]int // path -> requests
	conns    int
	holdPath string
	held     chan struct{}
	wg       sync.WaitGroup
}

func newFramingOrigin(t *testing.T, answer func(path string) string) *framingOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &framingOrigin{ln: ln, answer: answer, on: map[string]int{}, asked: map[string]int{}}
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		var open []net.Conn
		defer func() {
			for _, c := range open {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			open = append(open, c)
			o.mu.Lock()
			o.conns++
			id := o.conns
			o.mu.Unlock()
			o.wg.Add(1)
			go o.serve(c, id)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		o.wg.Wait()
	})
	return o
}

func (o *framingOrigin) serve(c net.Conn, id int) {
	defer o.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		o.mu.Lock()
		o.on[r.URL.Path] = id
		o.asked[r.URL.Path]++
		held := o.held
		if r.URL.Path != o.holdPath {
			held = nil
		}
		o.mu.Unlock()
		if held != nil {
			select {
			case <-held:
			case <-time.After(10 * time.Second):
			}
		}
		if _, err := io.WriteString(c, o.answer(r.URL.Path)); err != nil {
			return
		}
	}
}

func (o *framingOrigin) hold(path string) {
	o.mu.Lock()
	o.holdPath, o.held = path, make(chan struct{})
	o.mu.Unlock()
}

func (o *framingOrigin) release() {
	o.mu.Lock()
	close(o.held)
	o.mu.Unlock()
}

// requests is how many requests for path reached the origin.
func (o *framingOrigin) requests(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.asked[path]
}

// conn is the connection path's request arrived on (0: none yet).
func (o *framingOrigin) conn(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.on[path]
}

// keepAliveClient is one client connection to the sidecar, reused for
// every request, so that a response framed wrong leaves it stuck or
// reading garbage.
type keepAliveClient struct {
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAliveClient {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAliveClient{c: c, br: bufio.NewReader(c)}
}

// get sends GET path on the client's connection and reads the response
// within 10 seconds: a client left waiting fails here.
func (k *keepAliveClient) get(path string) (status int, body string, err error) {
	_ = k.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: app.example\r\n\r\n", path); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.Close {
		return resp.StatusCode, string(b), fmt.Errorf("the sidecar closed the client's connection after %s", path)
	}
	return resp.StatusCode, string(b), err
}

// TestAnOriginConnectionIsNeverReusedAfterBadFraming: when the origin
// sends more body than its Content-Length (here a whole forged response
// after it), or a transfer coding the sidecar does not accept, the client
// gets an exactly framed answer on a keep-alive connection it can go on
// using, and the sidecar never sends another request on that origin
// connection: the next request arrives at the origin on a new one. The
// sidecar's transport allows one origin connection here, so that the
// next request waits for exactly that connection and gets it the moment
// it is given back; without the guard (internal/originconn) it reads the
// forged bytes as its own answer (and the cache keeps them for an hour)
// in about one round in a hundred, so the case runs 400 rounds.
func TestAnOriginConnectionIsNeverReusedAfterBadFraming(t *testing.T) {
	const forged = "HTTP/1.1 200 OK\r\nContent-Length: 8\r\nCache-Control: max-age=3600\r\n\r\nSMUGGLED"
	for _, tc := range []struct {
		name       string
		bad        string
		status     int
		body, xc   string
		rounds     int
		checkStore bool
	}{
		{"more body than its Content-Length",
			"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 5\r\n\r\nhello" + forged,
			200, "hello", "MISS", 400, true},
		{"an unknown transfer coding",
			"HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nTransfer-Encoding: gzip\r\n\r\n" + forged,
			502, "Bad Gateway: origin unavailable\n", "MISS", 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newFramingOrigin(t, func(path string) string {
				if strings.HasPrefix(path, "/bad/") {
					return tc.bad
				}
				body := "the real " + path
				return "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
			})
			// Every GetConn of the sidecar's origin requests is reported,
			// through the request contexts of the serving connections.
			getConn := make(chan struct{}, 64)
			srv := framingProxy(t, "http://"+o.ln.Addr().String(), func(tr *http.Transport) { tr.MaxConnsPerHost = 1 },
				&httptrace.ClientTrace{GetConn: func(string) { getConn <- struct{}{} }})
			client := dialKeepAlive(t, srv.Listener.Addr().String())
			other := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
			defer other.CloseIdleConnections()

			for round := range tc.rounds {
				bad, next := fmt.Sprintf("/bad/%d", round), fmt.Sprintf("/next/%d", round)
				o.hold(bad)
				type answer struct {
					status   int
					body, xc string
					err      error
				}
				badDone := make(chan answer, 1)
				go func() {
					status, body, err := client.get(bad)
					badDone <- answer{status, body, "", err}
				}()
				// Once bad is at the origin, it holds the one origin
				// connection.
				deadline := time.Now().Add(10 * time.Second)
				for o.requests(bad) == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: %s did not reach the origin", round, bad)
					}
					time.Sleep(100 * time.Microsecond)
				}
				for len(getConn) > 0 {
					<-getConn // bad's
				}
				nextDone := make(chan answer, 1)
				go func() {
					req, _ := http.NewRequest(http.MethodGet, srv.URL+next, nil)
					req.Host = "app.example" // the key the keep-alive client's requests have
					resp, err := other.Do(req)
					if err != nil {
						nextDone <- answer{err: err}
						return
					}
					b, err := io.ReadAll(resp.Body)
					resp.Body.Close()
					nextDone <- answer{resp.StatusCode, string(b), resp.Header.Get("X-Cache"), err}
				}()
				// The fill of next asks for an origin connection, and waits
				// for bad's.
				awaitSignal(t, getConn, "the fill of "+next+" to ask for an origin connection")
				o.release()

				a := <-badDone
				if a.err != nil || a.status != tc.status || a.body != tc.body {
					t.Fatalf("round %d: %s: %d %q (%v), want %d %q", round, bad, a.status, a.body, a.err, tc.status, tc.body)
				}
				n := <-nextDone
				if n.err != nil || n.status != 200 || n.body != "the real "+next || n.xc != "MISS" {
					t.Fatalf("round %d: %s got %d %q %q (%v): the bytes past the bad response were read as its answer",
						round, next, n.status, n.body, n.xc, n.err)
				}
				if a, b := o.conn(bad), o.conn(next); a == b {
					t.Fatalf("round %d: %s was sent on the origin connection of %s (%d)", round, next, bad, a)
				}
				// The client's keep-alive connection carries on, and the
				// cache holds the real answer.
				if status, body, err := client.get(next); err != nil || status != 200 || body != "the real "+next {
					t.Fatalf("round %d: %s again on the client's connection: %d %q (%v)", round, next, status, body, err)
				}
				if k := o.requests(next); k != 1 {
					t.Fatalf("round %d: %s reached the origin %d times, want once (then a hit)", round, next, k)
				}
				if tc.checkStore {
					if status, body, err := client.get(bad); err != nil || status != 200 || body != tc.body {
						t.Fatalf("round %d: %s from the cache: %d %q (%v), want what its framing says", round, bad, status, body, err)
					}
				}
			}
		})
	}
}

func awaitSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

// framingProxy serves a proxy of upstream over L1 on a real listener,
// with the default origin transport adjusted by tune, and trace on the
// contexts of its requests (so on its origin requests too).
func framingProxy(t *testing.T, upstream string, tune func(*http.Transport), trace *httptrace.ClientTrace) *httptest.Server {
	t.Helper()
	compiled, err := tierconfig.Compile(tierconfig.Default())
	if err != nil {
		t.Fatal(err)
	}
	holder := tierconfig.NewHolder(compiled)
	ctx, cancel := context.WithCancel(context.Background())
	cache, err := l1.New(ctx, l1.Config{
		MaxSize: int64(compiled.Config.L1.MaxSize), MaxEntrySize: int64(compiled.Config.L1.MaxEntrySize),
		Shards: compiled.Config.L1.Shards, LifeWindow: 24 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse(upstream)
	tr := NewTransport()
	tune(tr)
	px, err := New(Options{Upstream: up, Config: holder, Store: testStore{cache}, Invalidator: invalidate.NewPurger(cache, holder),
		Transport: tr, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(px)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return httptrace.WithClientTrace(ctx, trace)
	}
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		_ = px.Close(context.Background())
		tr.CloseIdleConnections()
		cancel()
		cache.Close()
	})
	return srv
}
