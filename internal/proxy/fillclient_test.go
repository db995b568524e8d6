package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/accesslog"
	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// A client that stops reading never paces an in-memory fill.
//
// ATTACK: a client asks for a hot cacheable URL just as its entry
// expires, and then does not read. An in-memory fill wrote each read of
// the origin's body to that client before reading the next, so once the
// socket buffers were full the fill stopped: the origin's body was read
// no further, every request for the URL waited on the flight until
// origin.idleTimeout or origin.timeout (30 s by default) let it go, then
// all went to the origin at once, and nothing was stored. One connection
// per hot URL held the URL from everyone, again at each expiry. (The same
// held for file fills: TestASlowReadingLeaderStallsNoFollowerOfAFileFill.)
// Defence (fillclient.go): while a fill collects its body, its client is
// written from the collected bytes on a goroutine of its own.
func TestAClientThatStopsReadingNeverPacesAnInMemoryFill(t *testing.T) {
	const size = 24 << 20 // far above what the socket buffers of a loopback connection hold
	body := payload(31, size)
	sent := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(body) // as fast as loopback goes
		if r.URL.Path == "/hot" {
			close(sent)
		}
	})
	f := newFixtureFor(t, "l1: {maxSize: 256Mi, maxEntrySize: 32Mi, shards: 4}", o)

	dialSlowReader(t, f.srv.Listener.Addr().String(), "/hot")
	select {
	case <-sent:
	case <-time.After(15 * time.Second):
		t.Fatal("the origin could not send its body within 15s: the fill reads it only as fast as the client " +
			"that started it, which reads nothing")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/hot", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := f.send(req)
	if resp.status != http.StatusOK || resp.body != string(body) {
		t.Fatalf("an honest client got status %d and %d of %d bytes", resp.status, len(resp.body), size)
	}
	if x := resp.xcache(); !strings.HasPrefix(x, "HIT") && x != "MISS; coalesced" {
		t.Fatalf("an honest client was answered %q, want the stalled client's fill", x)
	}
	if n := o.count(); n != 1 {
		t.Fatalf("origin requests: %d, want 1", n)
	}
}

// The client of an in-memory fill gets its body whole and in order
// however the origin's reads and the client's writes interleave: each
// read of a body of unknown length is written on the client's goroutine
// while the next is collected.
func TestAnInMemoryFillOfManyReadsReachesItsClientWholeAndInOrder(t *testing.T) {
	const size = 3 << 20
	body := payload(32, size)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		rc := http.NewResponseController(w)
		for off := 0; off < size; off += 7001 { // chunked, in odd pieces
			_, _ = w.Write(body[off:min(off+7001, size)])
			_ = rc.Flush()
		}
	})
	f := newFixtureFor(t, "l1: {maxSize: 64Mi, maxEntrySize: 4Mi, shards: 4}", o)
	for i, want := range []string{"MISS", "HIT"} {
		r := f.get("/many")
		if r.status != http.StatusOK || !strings.HasPrefix(r.xcache(), want) || !bytes.Equal([]byte(r.body), body) {
			t.Fatalf("request %d: status %d, X-Cache %q, %d of %d bytes, equal %v", i, r.status, r.xcache(), len(r.body), size, r.body == string(body))
		}
	}
}

// smallSendListener gives every connection it accepts a small send
// buffer, so that what the server writes waits on its client's reading
// instead of filling loopback's megabytes of kernel buffers.
type smallSendListener struct{ net.Listener }

func (l smallSendListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(8 << 10)
	}
	return c, err
}

// serveSmallSend starts h on loopback behind smallSendListener.
func serveSmallSend(h http.Handler) *httptest.Server {
	s := httptest.NewUnstartedServer(h)
	s.Listener = smallSendListener{s.Listener}
	s.Start()
	return s
}

// serveSendTimeout serves h as serveSmallSend does, behind connguard's
// listener with the send timeout d, as the sidecar serves its clients.
func serveSendTimeout(d time.Duration) func(http.Handler) *httptest.Server {
	return func(h http.Handler) *httptest.Server {
		s := httptest.NewUnstartedServer(h)
		s.Listener = connguard.Listener(smallSendListener{s.Listener}, connguard.SendTimeout(d))
		s.Start()
		return s
	}
}

// readAnswer reads one response from br and its whole body.
func readAnswer(t *testing.T, br *bufio.Reader) (*http.Response, string) {
	t.Helper()
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

// pacedReader reads at most piece bytes per tick: a slow but steady
// client (a phone on a weak link).
type pacedReader struct {
	r     io.Reader
	piece int
	tick  *time.Ticker
}

func (p *pacedReader) Read(b []byte) (int, error) {
	<-p.tick.C
	return p.r.Read(b[:min(len(b), p.piece)])
}

// getSteadily sends GET path to addr over a connection with a small
// receive buffer and reads the response at about rate bytes per second.
// It returns the body read and the error that ended it (nil: the
// response was complete).
func getSteadily(t *testing.T, addr, path string, rate int) (*http.Response, []byte, error) {
	t.Helper()
	resp, b, err := askSteadily(t, addr, "GET", path, rate)
	if resp == nil {
		t.Fatal(err)
	}
	return resp, b, err
}

// askSteadily is getSteadily for any method (with an empty body); a
// response whose header never came is a nil response and the error.
func askSteadily(t *testing.T, addr, method, path string, rate int) (*http.Response, []byte, error) {
	t.Helper()
	conn, err := tinyWindowDialer().Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 0\r\n\r\n", method, path, addr); err != nil {
		t.Fatal(err)
	}
	const every = 10 * time.Millisecond
	tick := time.NewTicker(every)
	defer tick.Stop()
	br := bufio.NewReaderSize(&pacedReader{r: conn, piece: rate / int(time.Second/every), tick: tick}, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the response header: %w", err)
	}
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// A slow but steady client of a fill that stops storing gets its whole
// response.
//
// ATTACK (none needed: an honest client on a slow link is enough): an
// in-memory fill reads the origin at the origin's pace while its client
// is written from the collected body on a goroutine of its own. When the
// fill stops collecting (the body of unknown length outgrows the entry
// limit; or origin.timeout passes) it must first let the client catch up
// with everything collected, up to l1.maxEntrySize, before it writes the
// rest in step. It read nothing from the origin meanwhile, so when the
// catch-up took longer than origin.idleTimeout (1 MiB at 17 KB/s with the
// defaults; 32 MiB at 550 KB/s with l1.maxEntrySize 32Mi and no body
// store) the watchdog cut the origin as if it had stood still, logged it
// as the origin's failure, and the client, which had been reading all
// along, got a broken response. Written in step (before that commit), each
// write that the client took let the fill read on, and it got the whole
// body.
// Defence: while the fill waits for its client to catch up, every piece
// the client takes counts as the exchange moving (watchdog.clientTook), as
// each read did when fill and client went in step; a client that takes
// nothing is still cut after origin.idleTimeout.
func TestASlowButSteadyClientOfAFillThatStopsStoringGetsTheWholeBody(t *testing.T) {
	const size = 768 << 10
	body := payload(41, size)
	for name, tc := range map[string]struct {
		cfg    string
		origin http.HandlerFunc
	}{
		"a body of unknown length outgrows the entry limit": {
			cfg: "l1: {maxSize: 64Mi, maxEntrySize: 256Ki, shards: 4}\norigin: {idleTimeout: 250ms}",
			origin: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=300")
				rc := http.NewResponseController(w)
				for off := 0; off < size; off += 16 << 10 { // chunked, as fast as loopback goes
					_, _ = w.Write(body[off:min(off+16<<10, size)])
					_ = rc.Flush()
				}
			},
		},
		"origin.timeout passes": {
			cfg: "l1: {maxSize: 64Mi, maxEntrySize: 1Mi, shards: 4}\norigin: {timeout: 300ms, idleTimeout: 250ms}",
			origin: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=300")
				w.Header().Set("Content-Length", strconv.Itoa(size))
				rc := http.NewResponseController(w)
				// 800 KB/s: past origin.timeout before the end, faster than
				// the client.
				for off := 0; off < size; off += 16 << 10 {
					_, _ = w.Write(body[off:min(off+16<<10, size)])
					_ = rc.Flush()
					time.Sleep(20 * time.Millisecond) // the origin's own pace, not a barrier
				}
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := newOrigin(t, tc.origin)
			f := newFixtureWith(t, tc.cfg, o, nil, serveSmallSend)
			// 400 KB/s: each 32 KiB the fill writes in step is taken in
			// about 80 ms, far within the idle timeout; everything the fill
			// collected before it stopped takes well over it.
			resp, got, err := getSteadily(t, f.srv.Listener.Addr().String(), "/steady", 400_000)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if err != nil || !bytes.Equal(got, body) {
				t.Fatalf("a client reading steadily at 400 KB/s got %d of %d bytes (equal %v), ending with %v",
					len(got), size, bytes.Equal(got, body), err)
			}
		})
	}
}

// A client that takes nothing while its fill waits for it to catch up
// is still cut after origin.idleTimeout: the pieces a client takes keep
// the exchange going, not the wait itself.
func TestAClientThatTakesNothingOfAFillThatStoppedStoringIsStillCut(t *testing.T) {
	const size = 8 << 20 // far above what the small buffers hold
	body := payload(42, size)
	cut := make(chan error, 1)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		rc := http.NewResponseController(w)
		for off := 0; off < size; off += 16 << 10 {
			if _, err := w.Write(body[off:min(off+16<<10, size)]); err != nil {
				cut <- err
				return
			}
			if err := rc.Flush(); err != nil {
				cut <- err
				return
			}
		}
		cut <- nil
	})
	f := newFixtureWith(t, "l1: {maxSize: 64Mi, maxEntrySize: 256Ki, shards: 4}\norigin: {idleTimeout: 250ms}", o, nil, serveSmallSend)
	dialSlowReader(t, f.srv.Listener.Addr().String(), "/stuck")
	select {
	case err := <-cut:
		if err == nil {
			t.Fatal("the origin sent its whole body to a proxy whose client reads nothing")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the origin was not cut within 10s of a client that takes nothing (origin.idleTimeout is 250ms)")
	}
}

// memOrigin answers /<case>/<anything> for the cases of
// TestAnInMemoryFillNeverCorruptsWhatItsClientReceives, each with body
// (or its first bytes).
func memOrigin(body []byte) http.HandlerFunc {
	odd := func(w http.ResponseWriter, b []byte, pause time.Duration) {
		rc := http.NewResponseController(w)
		for off := 0; off < len(b); off += 7001 {
			_, _ = w.Write(b[off:min(off+7001, len(b))])
			_ = rc.Flush()
			if pause > 0 {
				time.Sleep(pause) // the origin's own pace, not a barrier
			}
		}
	}
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "max-age=300")
		h.Set("ETag", `"m"`)
		c, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		switch c {
		case "length":
			h.Set("Content-Length", "300000")
			odd(w, body[:300000], 0)
		case "chunked":
			odd(w, body[:300000], 0)
		case "overflow":
			odd(w, body, 0)
		case "late":
			h.Set("Content-Length", "600000")
			odd(w, body[:600000], 3*time.Millisecond) // ~86 pieces: past origin.timeout
		case "broken-chunked":
			odd(w, body[:200000], 0)
			panic(http.ErrAbortHandler)
		case "broken-length":
			h.Set("Content-Length", "400000")
			odd(w, body[:200000], 0)
			panic(http.ErrAbortHandler)
		case "empty-length":
			h.Set("Content-Length", "0")
		case "empty-chunked":
			_ = http.NewResponseController(w).Flush()
		case "more":
			// More than announced: the Content-Length frames the body.
			conn, bw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			fmt.Fprintf(bw, "HTTP/1.1 200 OK\r\nCache-Control: max-age=300\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n")
			_, _ = bw.Write(body[:150000])
			_ = bw.Flush()
		case "post":
			h.Set("Content-Location", r.URL.Path)
			odd(w, body[:300000], 0)
		}
	}
}

// An in-memory fill never corrupts what its client receives.
//
// ATTACK: the client of an in-memory fill is written from the growing
// collected body on a goroutine of its own, which hands over to the fill
// when it stops collecting, and its last bytes are held until the entry
// is stored. Could a client receive bytes out of order, twice, missing or
// from another response (the body reallocated by append while the
// goroutine writes from it, the pooled read buffer reused, the hand-over
// when the body outgrows the entry limit or origin.timeout passes, more
// bytes than announced), or a complete-looking short body when the origin
// breaks off? Does the access log count what the client got? Every case,
// to a fast client and to one that reads in small pieces behind small
// buffers (so that the goroutine lags behind the fill), several times:
// complete responses are exactly the body (and what is stored is too),
// broken ones are a prefix of it with an error. (HTTP/2 is refused with
// 505 on the serving port, upgrade.go: there is no HTTP/2 client to try.)
func TestAnInMemoryFillNeverCorruptsWhatItsClientReceives(t *testing.T) {
	body := payload(43, 2_500_000)
	cases := []struct {
		name, method string
		hdr          []string
		status       int
		want         []byte // the whole body; nil for a broken response
		prefix       []byte // a broken response is a prefix of it
		storedAs     string // X-Cache of the next GET; "" to skip
	}{
		{"length", "GET", nil, 200, body[:300000], nil, "HIT"},
		{"chunked", "GET", nil, 200, body[:300000], nil, "HIT"},
		{"overflow", "GET", nil, 200, body, nil, "MISS"},
		{"late", "GET", nil, 200, body[:600000], nil, "MISS"},
		{"broken-chunked", "GET", nil, 200, nil, body[:200000], ""},
		{"broken-length", "GET", nil, 200, nil, body[:200000], ""},
		{"empty-length", "GET", nil, 200, []byte{}, nil, "HIT"},
		{"empty-chunked", "GET", nil, 200, []byte{}, nil, "HIT"},
		{"more", "GET", nil, 200, body[:100000], nil, "HIT"},
		{"length", "HEAD", nil, 200, []byte{}, nil, ""},
		{"length", "GET", []string{"If-None-Match", `"m"`}, 304, []byte{}, nil, "HIT"},
		{"post", "POST", nil, 200, body[:300000], nil, "HIT"},
	}
	cfg := `
l1: {maxSize: 64Mi, maxEntrySize: 1Mi, shards: 4}
origin: {timeout: 150ms}
defaults: {storePostResponses: true}
`
	for _, mode := range []string{"fast", "slow"} {
		t.Run(mode, func(t *testing.T) {
			out := &lockedBuffer{}
			lg, err := accesslog.New(accesslog.Options{Writer: out, Defaults: accesslog.DefaultDefaults(), FlushInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			serve := httptest.NewServer
			if mode == "slow" {
				serve = serveSmallSend
			}
			f := newFixtureWith(t, cfg, newOrigin(t, memOrigin(body)), func(po *Options) { po.AccessLog = lg }, serve)
			client := f.srv.Client()
			if mode == "slow" {
				client = &http.Client{Transport: &http.Transport{ReadBufferSize: 4096, DisableCompression: true}}
				defer client.CloseIdleConnections()
			}
			got := map[string]int{} // method and path -> bytes the client got
			for round := range 3 {
				for _, tc := range cases {
					path := fmt.Sprintf("/%s/%s-%d-%d", tc.name, tc.method, round, len(tc.hdr))
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					req, _ := http.NewRequestWithContext(ctx, tc.method, f.srv.URL+path, nil)
					for i := 0; i+1 < len(tc.hdr); i += 2 {
						req.Header.Set(tc.hdr[i], tc.hdr[i+1])
					}
					resp, err := client.Do(req)
					if err != nil {
						cancel()
						t.Fatalf("%s %s: %v", tc.method, path, err)
					}
					var r io.Reader = resp.Body
					if mode == "slow" {
						r = &nibbler{r: resp.Body}
					}
					b, rerr := io.ReadAll(r)
					resp.Body.Close()
					cancel()
					got[tc.method+" "+path] = len(b)
					if resp.StatusCode != tc.status {
						t.Fatalf("%s %s: status %d, want %d", tc.method, path, resp.StatusCode, tc.status)
					}
					switch {
					case tc.want != nil && (rerr != nil || !bytes.Equal(b, tc.want)):
						t.Fatalf("%s %s: %d of %d bytes, equal %v, err %v", tc.method, path, len(b), len(tc.want), bytes.Equal(b, tc.want), rerr)
					case tc.want == nil && rerr == nil:
						t.Fatalf("%s %s: a complete-looking response of %d bytes from an origin that broke off", tc.method, path, len(b))
					case tc.want == nil && !bytes.HasPrefix(tc.prefix, b):
						t.Fatalf("%s %s: the %d bytes before the break are not the origin's", tc.method, path, len(b))
					}
					if tc.storedAs == "" {
						continue
					}
					// What was stored is the body too (a POST's answer
					// stands for its own URI).
					next := f.get(path)
					want := tc.want
					if tc.status == http.StatusNotModified {
						want = body[:300000]
					}
					if !strings.HasPrefix(next.xcache(), tc.storedAs) || next.body != string(want) {
						t.Fatalf("GET %s after %s: X-Cache %q, %d bytes (equal %v), want %s", path, tc.method, next.xcache(), len(next.body), next.body == string(want), tc.storedAs)
					}
				}
			}
			// Every handler has returned once the server is closed.
			f.srv.Close()
			for _, l := range logLines(t, lg, out) {
				m, _ := l["method"].(string)
				p, _ := l["path"].(string)
				n, ok := got[m+" "+p]
				if !ok {
					continue // a GET that looked at what was stored
				}
				if m == "HEAD" {
					n = 0
				}
				if l["bytes"] != float64(n) {
					t.Errorf("%s %s: access log bytes %v, the client got %d", m, p, l["bytes"], n)
				}
				delete(got, m+" "+p)
			}
			for k := range got {
				t.Errorf("%s: no access log line", k)
			}
		})
	}
}

// nibbler reads at most 4 KiB at a time, pausing now and then: a client
// slower than loopback, so that what the server writes waits on it.
type nibbler struct {
	r io.Reader
	n int
}

func (nb *nibbler) Read(b []byte) (int, error) {
	nb.n++
	if nb.n%16 == 0 {
		time.Sleep(200 * time.Microsecond) // the client's own pace, not a barrier
	}
	return nb.r.Read(b[:min(len(b), 4096)])
}

// lifeWriter is the ResponseWriter of one request that tells whether it
// was written to, or was being written to, once the handler had returned
// (or panicked): net/http forbids it, since the connection's buffered
// writer goes back to a pool that other connections take theirs from.
type lifeWriter struct {
	http.ResponseWriter
	inflight atomic.Int32
	done     atomic.Bool
	late     *atomic.Int32
}

func (lw *lifeWriter) Write(b []byte) (int, error) {
	if lw.done.Load() {
		lw.late.Add(1)
		return 0, errors.New("written after the handler returned")
	}
	lw.inflight.Add(1)
	defer lw.inflight.Add(-1)
	return lw.ResponseWriter.Write(b)
}

func (lw *lifeWriter) Unwrap() http.ResponseWriter { return lw.ResponseWriter }

// watchLifetimes wraps h so that late counts the requests whose
// ResponseWriter was being written to, or was written to, after h
// returned.
func watchLifetimes(h http.Handler, late *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lw := &lifeWriter{ResponseWriter: w, late: late}
		defer func() {
			// No recover: a panic goes on to net/http.
			if lw.inflight.Load() > 0 {
				late.Add(1)
			}
			lw.done.Store(true)
		}()
		h.ServeHTTP(lw, r)
	})
}

// panickyStore panics on storing a response with a body: a bug anywhere
// below keep.
type panickyStore struct{ testStore }

func (s panickyStore) Set(ctx context.Context, key string, e *entry.Entry) error {
	if len(e.Body) > 0 {
		panic("store bug")
	}
	return s.testStore.Set(ctx, key, e)
}

// A fill that panics leaves no goroutine writing to its client.
//
// ATTACK (on a bug elsewhere): the client of an in-memory fill is written
// on a goroutine of its own until the fill's end waits for it. Should the
// fill panic between the two (say in keep, storing the entry), net/http
// recovers the handler and closes the connection, returning its buffered
// writer to the pool that new connections take theirs from, while the
// goroutine still writes the body through it: another connection's
// response gets these bytes (the race detector sees the new connection
// Reset the writer the goroutine writes to), or the goroutine, which
// nobody recovers, dereferences the nil writer and the process dies.
// Defence: on every way out of the fill, a panic included, a goroutine
// still writing is stopped (its write cut by an immediate deadline: the
// connection is being given up) and waited for (clientWriter.stop).
func TestAFillThatPanicsLeavesNoGoroutineWritingToItsClient(t *testing.T) {
	const size = 4 << 20
	body := payload(44, size)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Location", r.URL.Path) // a POST's answer stands for its URI
		_, _ = w.Write(body)
	})
	var late atomic.Int32
	f := newFixtureWith(t, "l1: {maxSize: 64Mi, maxEntrySize: 8Mi, shards: 4}\ndefaults: {storePostResponses: true}", o, func(po *Options) {
		po.Store = panickyStore{po.Store.(testStore)}
	}, func(h http.Handler) *httptest.Server {
		return serveSmallSend(watchLifetimes(h, &late))
	})
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the recovered panics
	for i := range 6 {
		// A client that reads slowly: the goroutine is still writing
		// when the fill (or the stored POST answer) is stored.
		method := []string{"GET", "POST"}[i%2]
		// Broken before its header (the fill collected the whole body
		// before the goroutine wrote a byte) or after it: either way
		// not complete.
		resp, _, err := askSteadily(t, f.srv.Listener.Addr().String(), method, fmt.Sprintf("/boom%d", i), 1_000_000)
		if err == nil {
			t.Fatalf("%s: a fill that panicked gave its client a complete-looking response (%d)", method, resp.StatusCode)
		}
	}
	// Every handler has returned once the server is closed.
	f.srv.Close()
	if n := late.Load(); n > 0 {
		t.Fatalf("%d of 6 responses (3 GET, 3 POST) were written to after their handler had panicked", n)
	}
}

// A client that takes nothing while its fill waits for it is not logged
// as an origin failure.
//
// Suspicion (it held): a fill that stopped storing waits for its client
// to catch up before it reads the origin again; when the client takes
// nothing for origin.idleTimeout the watchdog cuts the exchange with a
// cause naming the origin ("the origin's response body stood still"),
// and bodyFailed would log a warning against a healthy origin. It does
// not: the client's write fails first (here it goes; in production the
// send timeout closes it), tee sees the client gone and returns without
// reading the origin again, so nothing is logged. (A client that pauses
// for longer than origin.idleTimeout and then reads on is still cut and
// logged as the origin's failure, as on a pass-through: operations.md
// "Timeouts", "counts too".)
func TestAClientThatTakesNothingIsNotLoggedAsAnOriginFailure(t *testing.T) {
	const size = 8 << 20 // far above what the small buffers hold
	body := payload(45, size)
	cut := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		defer close(cut)
		w.Header().Set("Cache-Control", "max-age=300")
		rc := http.NewResponseController(w)
		for off := 0; off < size; off += 16 << 10 {
			if _, err := w.Write(body[off:min(off+16<<10, size)]); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	})
	f := newFixtureWith(t, "l1: {maxSize: 64Mi, maxEntrySize: 256Ki, shards: 4}\norigin: {idleTimeout: 250ms}", o, nil, serveSmallSend)
	obs := observe(t, f.px)
	conn := dialSlowReader(t, f.srv.Listener.Addr().String(), "/stuck")
	select {
	case <-cut:
	case <-time.After(10 * time.Second):
		t.Fatal("the origin was not cut within 10s of a client that takes nothing")
	}
	// The client goes (as the send timeout would close it): the fill's
	// handler ends.
	_ = conn.Close()
	waitFor(t, func() bool { return obs.requests(t, metrics.ResultMiss, metrics.LayerOrigin) > 0 }, "the request to finish")
	if logs := obs.log.String(); strings.Contains(logs, "level=WARN") || strings.Contains(logs, "origin's response body stood still") {
		t.Errorf("a client that took nothing was logged as the origin's failure:\n%s", logs)
	}
}
