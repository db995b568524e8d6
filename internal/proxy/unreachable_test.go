package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/test/testredis"
)

// RFC 9111 §4.2.4: when the origin cannot be reached, a stale stored
// response stands in for it without the origin's stale-if-error, for
// defaults.staleIfUnreachable (10m) past its freshness.

// failing is how an origin that answered once fails afterwards.
type failing int

const (
	stopped failing = iota // its listener is closed: connections are refused
	resets                 // it accepts, reads the request and resets the connection
	closes                 // it accepts, reads the request and closes without a response
)

func (f failing) String() string {
	return [...]string{"stopped", "resets the connection", "closes before a response"}[f]
}

// failingOrigin answers the first request with cc and body, then fails as
// how says. fail makes it fail from then on.
func failingOrigin(t *testing.T, cc, body string, how failing) (o *origin, fail func()) {
	t.Helper()
	var down atomic.Bool
	o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return
			}
			if how == resets {
				_ = conn.(*net.TCPConn).SetLinger(0) // close sends RST
			}
			_ = conn.Close()
			return
		}
		cacheFor(cc, body)(w, r)
	})
	return o, func() {
		down.Store(true)
		if how == stopped {
			o.Close()
		}
	}
}

func TestAStaleResponseStandsInForAnOriginThatCannotBeReached(t *testing.T) {
	for _, how := range []failing{stopped, resets, closes} {
		t.Run("the origin "+how.String(), func(t *testing.T) {
			o, fail := failingOrigin(t, "max-age=2", "kept", how)
			f := newFixtureFor(t, "", o)
			expect(t, f.get("/u"), 200, "MISS")
			fail()
			f.clock.Advance(62 * time.Second) // 60s stale
			r := f.get("/u")
			expect(t, r, 200, "STALE; layer=l1")
			if r.body != "kept" {
				t.Fatalf("body %q, want the stored one", r.body)
			}
			if age := r.header.Get("Age"); age != "62" {
				t.Errorf("Age %q, want 62 (the stored response's current age)", age)
			}
			if w := r.header.Values("Warning"); len(w) > 0 {
				t.Errorf("Warning %q: a stale answer carries none (RFC 9111 obsoletes it)", w)
			}
			if how != stopped && o.count() < 2 {
				t.Errorf("origin saw %d requests: the stale answer must come after trying it", o.count())
			}
			// A URL with nothing stored still gets the gateway error.
			expect(t, f.get("/never-stored"), 502, "MISS")
		})
	}
}

func TestStaleIfUnreachableEndsWithItsWindow(t *testing.T) {
	o, fail := failingOrigin(t, "max-age=2", "kept", stopped)
	f := newFixtureFor(t, "defaults: {staleIfUnreachable: 5m}", o)
	expect(t, f.get("/w"), 200, "MISS")
	fail()
	// The origin's Date has whole seconds, so the stored response may be
	// up to a second old when it arrives: stay a second inside the window,
	// then step a second past its end.
	f.clock.Advance(2*time.Second + 5*time.Minute - time.Second)
	expect(t, f.get("/w"), 200, "STALE; layer=l1")
	f.clock.Advance(2 * time.Second)
	expect(t, f.get("/w"), 502, "MISS")
}

func TestStaleIfUnreachableZeroTurnsItOff(t *testing.T) {
	o, fail := failingOrigin(t, "max-age=2", "kept", stopped)
	f := newFixtureFor(t, "defaults: {staleIfUnreachable: 0s}", o)
	expect(t, f.get("/off"), 200, "MISS")
	fail()
	f.clock.Advance(time.Minute)
	expect(t, f.get("/off"), 502, "MISS")
}

// Responses whose directives forbid stale use are never served stale, and
// a request's own limits are kept (RFC 9111 §4.2.4, §5.2.1, §5.2.2).
func TestStaleIfUnreachableRespectsDirectives(t *testing.T) {
	tests := []struct {
		name, cc string
		req      []string
		want     int
		xcache   string
	}{
		{"must-revalidate forbids it", "max-age=2, must-revalidate", nil, 502, "MISS"},
		{"proxy-revalidate forbids it", "max-age=2, proxy-revalidate", nil, 502, "MISS"},
		{"s-maxage forbids it", "s-maxage=2", nil, 502, "MISS"},
		{"no-cache forbids it", "max-age=2, no-cache", nil, 502, "MISS"},
		{"the request's no-cache forbids it", "max-age=2", []string{"Cache-Control", "no-cache"}, 502, "MISS"},
		{"the request's max-age forbids an older response", "max-age=2", []string{"Cache-Control", "max-age=30"}, 502, "MISS"},
		{"the request's min-fresh forbids a stale response", "max-age=2", []string{"Cache-Control", "min-fresh=1"}, 502, "MISS"},
		{"a bounded max-stale the response exceeds forbids it", "max-age=2", []string{"Cache-Control", "max-stale=10"}, 502, "MISS"},
		{"a plain request is answered stale", "max-age=2", nil, 200, "STALE; layer=l1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"v1"`) // so that no-cache is stored too
				cacheFor(tt.cc, "kept")(w, r)
			})
			f := newFixtureFor(t, "", o)
			expect(t, f.get("/d"), 200, "MISS")
			o.Close()
			f.clock.Advance(time.Minute)
			expect(t, f.get("/d", tt.req...), tt.want, tt.xcache)
		})
	}
}

// Only a connection that fails counts: a 5xx the origin sends passes
// through unless stale-if-error (the origin's or the tier's) allows stale.
func TestAn5xxFromTheOriginStillPassesThrough(t *testing.T) {
	var fail atomic.Bool
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		cacheFor("max-age=2", "kept")(w, r)
	})
	expect(t, f.get("/5xx"), 200, "MISS")
	fail.Store(true)
	f.clock.Advance(time.Minute)
	r := f.get("/5xx")
	expect(t, r, 503, "MISS")
	if !strings.Contains(r.body, "maintenance") {
		t.Fatalf("body %q, want the origin's", r.body)
	}
	if n := f.origin.count(); n != 2 {
		t.Fatalf("origin saw %d requests, want 2", n)
	}
}

// A slow origin is not an unreachable one: a response-header timeout is
// the origin's error (504), not a reason to serve stale.
func TestAResponseHeaderTimeoutIsNotUnreachable(t *testing.T) {
	var slow atomic.Bool
	release := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		cacheFor("max-age=2", "kept")(w, r)
	})
	defer close(release)
	f := newFixtureFor(t, "origin: {responseHeaderTimeout: 200ms}", o)
	expect(t, f.get("/slow"), 200, "MISS")
	slow.Store(true)
	f.clock.Advance(time.Minute)
	expect(t, f.get("/slow"), 504, "MISS")
}

// The window keeps an entry in L2 (Redis TTL) past its freshness, so a
// replica that never held it serves it when the origin cannot be reached.
func TestStaleIfUnreachableKeepsTheEntryInL2(t *testing.T) {
	srv := testredis.Start(t)
	o, fail := failingOrigin(t, "max-age=2", "shared", stopped)
	a := replica(t, srv.Addr(), o)
	expect(t, a.get("/l2", "Host", "shop.example"), 200, "MISS")

	rc := rawRedis(t, srv.Addr())
	ctx := context.Background()
	var key string
	waitFor(t, func() bool {
		keys, err := rc.Keys(ctx, "tc:test/cluster:e:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 1 {
			key = keys[0]
		}
		return key != ""
	}, "the entry to reach L2")
	pttl, err := rc.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	// max-age=2 and no validator: 2s of freshness, then the 10m window.
	if want := 2*time.Second + 10*time.Minute; pttl > want || pttl < want-5*time.Second {
		t.Fatalf("L2 PTTL = %s, want about %s", pttl, want)
	}

	fail()
	a.clock.Advance(5 * time.Minute)
	b := replica(t, srv.Addr(), o)
	r := b.get("/l2", "Host", "shop.example")
	expect(t, r, 200, "STALE; layer=l2")
	if r.body != "shared" {
		t.Fatalf("body %q", r.body)
	}
}

func TestUnreachableClassifiesOriginErrors(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a refused connection is unreachable", refused, true},
		{"a dial that timed out is unreachable", &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"a reset connection is unreachable", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, true},
		{"a connection closed before a response is unreachable", io.EOF, true},
		{"a wrapped reset is unreachable", fmt.Errorf("transport: %w", syscall.ECONNRESET), true},
		{"an origin that did not take the request is unreachable", &timeoutError{msg: "m", unreachable: true}, true},
		{"a response header timeout is not", &timeoutError{msg: "m"}, false},
		{"a client body that stood still is not", &timeoutError{msg: "m", client: true}, false},
		{"a malformed response is not", errors.New(`net/http: HTTP/1.x transport connection broken: malformed HTTP response "x"`), false},
		{"a cancelled dial is not", &net.OpError{Op: "dial", Net: "tcp", Err: context.Canceled}, false},
		{"no error is not", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := unreachable(tt.err); got != tt.want {
				t.Errorf("unreachable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// L2 keeps responses past their freshness (stale windows, the
// revalidation grace, staleIfUnreachable). A replica waiting for another
// replica's refresh hands its waiters what it finds there as a hit, so it
// must take only a fresh newer response, never a stale one.
func TestAReplicaWaitingForARefreshDoesNotTakeAStaleNewerEntry(t *testing.T) {
	srv := testredis.Start(t)
	var version atomic.Int64
	version.Store(1)
	hold := make(chan struct{})
	held := false
	t.Cleanup(func() {
		if !held {
			close(hold)
		}
	})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if version.Load() > 1 {
			<-hold // A's refresh keeps the lease
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=300")
		fmt.Fprintf(w, "v%d", version.Load())
	})
	var stA *store.Layered
	a := replicaWith(t, srv.Addr(), o, func(po *Options) { stA = po.Store.(*store.Layered) })
	b := replica(t, srv.Addr(), o)
	expect(t, a.get("/r", "Host", "shop"), 200, "MISS")
	waitFor(t, func() bool { return b.get("/r", "Host", "shop").xcache() == "HIT; layer=l2" }, "B to see A's fill in L2")

	version.Store(2)
	o.clock.Advance(20 * time.Second)
	expect(t, a.get("/r", "Host", "shop"), 200, "STALE; layer=l1") // A's refresh leads, held at the origin
	waitFor(t, func() bool { return o.count() == 2 }, "A's refresh to reach the origin")
	expect(t, b.get("/r", "Host", "shop"), 200, "STALE; layer=l1") // B's refresh waits for A's

	// A request that needs a fresher answer joins B's refresh flight.
	waiter := make(chan response, 1)
	go func() { waiter <- b.get("/r", "Host", "shop", "Cache-Control", "max-age=1") }()
	waitFor(t, func() bool { return testCounter(b.px.m.Coalesced) >= 1 }, "the request to join B's refresh")

	// A newer response that is itself stale lands in L2 (another replica
	// stored it earlier; L2 still keeps it).
	kb := &keyBuf{}
	kb.build(httptest.NewRequest("GET", "http://shop/r", nil), a.px.cfg.Load().Default)
	key := kb.Primary()
	var e1 entry.Entry
	if _, err := stA.Get(context.Background(), key, &e1); err != nil {
		t.Fatal(err)
	}
	e2 := *detach(&e1)
	e2.ResponseTime = e1.ResponseTime.Add(time.Second) // newer than B's copy, 19s old: stale
	e2.Body = []byte("newer but stale")
	if err := stA.SetShared(context.Background(), key, &e2); err != nil {
		t.Fatal(err)
	}
	// B's polls have seen it once it is in B's L1 (GetNewer promotes it).
	waitFor(t, func() bool {
		var got entry.Entry
		return b.cache.GetInto(key, &got) == nil && string(got.Body) == "newer but stale"
	}, "B's refresh to look at the stale newer entry")

	held = true
	close(hold) // A's refresh stores v2
	select {
	case r := <-waiter:
		if r.body != "v2" {
			t.Fatalf("the waiter got %q (%s), want the refreshed v2: a stale entry was handed out as a hit", r.body, r.xcache())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get an answer")
	}
}

// The other two ways an entry is stored or refreshed carry the window too:
// a stored POST answer (defaults.storePostResponses), and a HEAD that
// updates the stored GET (defaults.updateFromHead), which also answers
// stale when the origin cannot be reached.
func TestStaleIfUnreachableCoversPostAnswersAndHeadUpdates(t *testing.T) {
	t.Run("a stored POST answer stands in for a stopped origin", func(t *testing.T) {
		o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Location", "/p")
			cacheFor("max-age=2", "posted")(w, r)
		})
		f := newFixtureFor(t, "defaults: {storePostResponses: true}", o)
		expect(t, f.post("/p", "x=1"), 200, "BYPASS")
		expect(t, f.get("/p"), 200, "HIT; layer=l1")
		o.Close()
		f.clock.Advance(time.Minute)
		r := f.get("/p")
		expect(t, r, 200, "STALE; layer=l1")
		if r.body != "posted" {
			t.Fatalf("body %q", r.body)
		}
	})
	t.Run("a HEAD for a stale GET is answered stale by a stopped origin", func(t *testing.T) {
		o, fail := failingOrigin(t, "max-age=2", "kept", stopped)
		f := newFixtureFor(t, "defaults: {updateFromHead: true}", o)
		expect(t, f.get("/h"), 200, "MISS")
		fail()
		f.clock.Advance(time.Minute)
		r := f.do(http.MethodHead, "/h")
		expect(t, r, 200, "STALE; layer=l1")
		if r.body != "" {
			t.Fatalf("a HEAD answer with a body %q", r.body)
		}
	})
}
