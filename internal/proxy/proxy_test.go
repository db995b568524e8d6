package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/invalidate"
)

func TestMissThenHitWithAge(t *testing.T) {
	f := newFixture(t, "", cacheFor("public, max-age=60", "hello"))
	expect(t, f.get("/a"), 200, "MISS")
	f.clock.Advance(10 * time.Second)
	r := f.get("/a")
	expect(t, r, 200, "HIT; layer=l1")
	if r.body != "hello" {
		t.Fatalf("body %q", r.body)
	}
	if age := r.header.Get("Age"); age < "10" || len(age) != 2 {
		t.Fatalf("Age = %q, want about 10", age)
	}
	if f.origin.count() != 1 {
		t.Fatalf("origin saw %d requests, want 1", f.origin.count())
	}
	if v := r.header.Get("Via"); !strings.Contains(v, "tiercache") {
		t.Fatalf("Via = %q", v)
	}
}

func TestFreshnessEndsAndTheEntryIsFetchedAgain(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=30", "x"))
	expect(t, f.get("/a"), 200, "MISS")
	f.clock.Advance(31 * time.Second)
	expect(t, f.get("/a"), 200, "MISS")
	if f.origin.count() != 2 {
		t.Fatalf("origin saw %d requests, want 2", f.origin.count())
	}
}

func TestQueryIsPartOfTheKeyAsReceived(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "x"))
	expect(t, f.get("/a?x=1&y=2"), 200, "MISS")
	expect(t, f.get("/a?y=2&x=1"), 200, "MISS")
	expect(t, f.get("/a?x=1&y=2"), 200, "HIT; layer=l1")
}

func TestRuleShapesTheKeyAndBypasses(t *testing.T) {
	cfg := `
rules:
- name: static
  match: {pathPrefix: /static/}
  cacheKey: {queryExclude: ["utm_*"], sortQuery: true}
- name: api
  match: {pathPrefix: /api/}
  bypass: true
`
	f := newFixture(t, cfg, cacheFor("max-age=60", "x"))
	expect(t, f.get("/static/a.css?v=1&utm_source=x"), 200, "MISS")
	expect(t, f.get("/static/a.css?utm_campaign=y&v=1"), 200, "HIT; layer=l1")
	expect(t, f.get("/api/x"), 200, "BYPASS")
	expect(t, f.get("/api/x"), 200, "BYPASS")
	if f.origin.count() != 3 {
		t.Fatalf("origin saw %d requests, want 3", f.origin.count())
	}
}

func TestRuleTTLOverridesOriginFreshness(t *testing.T) {
	cfg := `
rules:
- name: pinned
  match: {path: /p}
  ttl: 120s
`
	f := newFixture(t, cfg, cacheFor("max-age=5", "x"))
	expect(t, f.get("/p"), 200, "MISS")
	f.clock.Advance(60 * time.Second)
	expect(t, f.get("/p"), 200, "HIT; layer=l1")
}

func TestConcurrentMissesMakeOneOriginRequest(t *testing.T) {
	release := make(chan struct{})
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "shared")
	})
	const n = 50
	var wg sync.WaitGroup
	bodies := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies <- f.get("/herd").body
		}()
	}
	// Let every request reach the proxy before the origin answers.
	waitFor(t, func() bool { return f.px.m != nil && coalescedCount(f) >= n-1 }, "waiters")
	close(release)
	wg.Wait()
	close(bodies)
	for b := range bodies {
		if b != "shared" {
			t.Fatalf("a waiter got %q", b)
		}
	}
	if f.origin.count() != 1 {
		t.Fatalf("origin saw %d requests for %d concurrent misses, want 1", f.origin.count(), n)
	}
}

func coalescedCount(f *fixture) int {
	return int(testCounter(f.px.m.Coalesced))
}

func TestTheLeaderLeavingDoesNotCancelTheSharedFetch(t *testing.T) {
	release := make(chan struct{})
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "survived")
	})
	ctx, cancel := context.WithCancel(context.Background())
	leaderDone := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/x", nil)
		resp, err := f.srv.Client().Do(req)
		if err == nil {
			resp.Body.Close()
		}
		leaderDone <- err
	}()
	waitFor(t, func() bool { return f.origin.count() == 1 }, "the leader's fetch")
	waiter := make(chan response, 1)
	go func() { waiter <- f.get("/x") }()
	waitFor(t, func() bool { return coalescedCount(f) == 1 }, "the waiter")
	cancel()
	if err := <-leaderDone; err == nil {
		t.Fatal("the leader's request should have been cancelled")
	}
	close(release)
	r := <-waiter
	if r.body != "survived" || r.status != 200 {
		t.Fatalf("waiter got %d %q", r.status, r.body)
	}
	expect(t, f.get("/x"), 200, "HIT; layer=l1")
	if f.origin.count() != 1 {
		t.Fatalf("origin saw %d requests, want 1", f.origin.count())
	}
}

func TestATooLargeResponseStreamsToTheLeaderAndWaitersFetchThemselves(t *testing.T) {
	cfg := `
l1: {maxSize: 16Mi, maxEntrySize: 64Ki, shards: 16}
`
	big := strings.Repeat("b", 200<<10)
	var first atomic.Bool
	gate := make(chan struct{})
	f := newFixture(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		if first.CompareAndSwap(false, true) {
			<-gate // hold the leader until the waiters queue behind it
		}
		_, _ = io.WriteString(w, big)
	})
	var wg sync.WaitGroup
	results := make(chan response, 4)
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); results <- f.get("/big") }()
	}
	waitFor(t, func() bool { return coalescedCount(f) == 3 }, "waiters")
	close(gate)
	wg.Wait()
	close(results)
	for r := range results {
		if r.status != 200 || len(r.body) != len(big) {
			t.Fatalf("got %d with %d bytes", r.status, len(r.body))
		}
	}
	if f.origin.count() != 4 {
		t.Fatalf("origin saw %d requests, want 4 (the leader and each waiter)", f.origin.count())
	}
	// Remembered as uncacheable: the next request is a plain miss.
	expect(t, f.get("/big"), 200, "MISS")
}

func TestTheFirstByteArrivesBeforeTheOriginFinishes(t *testing.T) {
	finish := make(chan struct{})
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "first|")
		w.(http.Flusher).Flush()
		<-finish
		_, _ = io.WriteString(w, "second")
	})
	resp, err := f.srv.Client().Get(f.srv.URL + "/s")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first|" {
		t.Fatalf("first bytes %q, %v", buf, err)
	}
	close(finish)
	rest, _ := io.ReadAll(resp.Body)
	if string(rest) != "second" {
		t.Fatalf("rest %q", rest)
	}
	expect(t, f.get("/s"), 200, "HIT; layer=l1")
}

func TestHeadIsAnsweredFromGetAndAHeadMissIsNeverStored(t *testing.T) {
	var methods []string
	var mu sync.Mutex
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		methods = append(methods, r.Method)
		mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "body")
	})
	expect(t, f.do("HEAD", "/h"), 200, "MISS")
	expect(t, f.get("/h"), 200, "MISS")
	r := f.do("HEAD", "/h")
	expect(t, r, 200, "HIT; layer=l1")
	if r.body != "" || r.header.Get("Content-Length") != "4" {
		t.Fatalf("HEAD hit: body %q, Content-Length %q", r.body, r.header.Get("Content-Length"))
	}
	if strings.Join(methods, ",") != "HEAD,GET" {
		t.Fatalf("origin saw %v, want HEAD then GET", methods)
	}
}

// With defaults.contentCoding.normalize off, Accept-Encoding is a header
// like any other (coding_test.go tests the default, one copy for all).
func TestVaryKeepsVariantsApart(t *testing.T) {
	f := newFixture(t, "defaults: {contentCoding: {normalize: false}}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Encoding")
		_, _ = io.WriteString(w, "enc="+r.Header.Get("Accept-Encoding"))
	})
	expect(t, f.get("/v", "Accept-Encoding", "gzip"), 200, "MISS")
	expect(t, f.get("/v", "Accept-Encoding", "br"), 200, "MISS")
	r := f.get("/v", "Accept-Encoding", "gzip")
	expect(t, r, 200, "HIT; layer=l1")
	if r.body != "enc=gzip" {
		t.Fatalf("gzip variant served %q", r.body)
	}
	r = f.get("/v", "Accept-Encoding", " br ")
	expect(t, r, 200, "HIT; layer=l1")
	if r.body != "enc=br" {
		t.Fatalf("br variant served %q", r.body)
	}
	if f.origin.count() != 2 {
		t.Fatalf("origin saw %d, want 2", f.origin.count())
	}
}

func TestAChangeOfVaryReplacesTheOldVariants(t *testing.T) {
	var vary atomic.Value
	vary.Store("Accept-Encoding")
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", vary.Load().(string))
		_, _ = io.WriteString(w, "v")
	})
	expect(t, f.get("/v", "Accept-Encoding", "gzip", "Accept-Language", "en"), 200, "MISS")
	f.clock.Advance(61 * time.Second)
	vary.Store("Accept-Language")
	expect(t, f.get("/v", "Accept-Encoding", "gzip", "Accept-Language", "en"), 200, "MISS")
	// Same language, another encoding: the new marker only varies on language.
	expect(t, f.get("/v", "Accept-Encoding", "br", "Accept-Language", "en"), 200, "HIT; layer=l1")
	expect(t, f.get("/v", "Accept-Encoding", "br", "Accept-Language", "de"), 200, "MISS")
}

func TestVaryStarIsNeverServedFromCache(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "*")
		_, _ = io.WriteString(w, "x")
	})
	expect(t, f.get("/star"), 200, "MISS")
	expect(t, f.get("/star"), 200, "MISS")
}

func TestAStaleEntryIsRevalidatedWithItsETag(t *testing.T) {
	var inm atomic.Value
	inm.Store("")
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		inm.Store(r.Header.Get("If-None-Match"))
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.Header().Set("X-Refreshed", "yes")
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "stored body")
	})
	expect(t, f.get("/e"), 200, "MISS")
	f.clock.Advance(20 * time.Second)
	r := f.get("/e")
	expect(t, r, 200, "REVALIDATED")
	if inm.Load() != `"v1"` {
		t.Fatalf("origin saw If-None-Match %q", inm.Load())
	}
	if r.body != "stored body" || r.header.Get("X-Refreshed") != "yes" {
		t.Fatalf("revalidated response: %q, X-Refreshed %q", r.body, r.header.Get("X-Refreshed"))
	}
	r = f.get("/e")
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("X-Refreshed") != "yes" {
		t.Fatal("the 304's headers were not stored")
	}
}

func TestClientConditionalsAreAnsweredFromCache(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"abc"`)
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		_, _ = io.WriteString(w, "body")
	})
	// Even the miss answers the client's conditional from the fresh response.
	r := f.get("/c", "If-None-Match", `W/"abc"`)
	expect(t, r, 304, "MISS")
	if f.origin.last().Header.Get("If-None-Match") != "" {
		t.Fatal("the client's conditional reached the origin")
	}
	expect(t, f.get("/c", "If-None-Match", `"abc"`), 304, "HIT; layer=l1")
	expect(t, f.get("/c", "If-None-Match", `"other"`), 200, "HIT; layer=l1")
	expect(t, f.get("/c", "If-Modified-Since", "Mon, 02 Jan 2006 15:04:05 GMT"), 304, "HIT; layer=l1")
	expect(t, f.get("/c", "If-Modified-Since", "Sun, 01 Jan 2006 00:00:00 GMT"), 200, "HIT; layer=l1")
}

func TestStaleWhileRevalidateServesStaleAndRefreshesOnce(t *testing.T) {
	var version atomic.Int64
	version.Store(1)
	gate := make(chan struct{})
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if version.Load() > 1 {
			<-gate // hold the refresh until the stale hits are done
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=100")
		fmt.Fprintf(w, "v%d", version.Load())
	})
	expect(t, f.get("/swr"), 200, "MISS")
	version.Store(2)
	f.clock.Advance(20 * time.Second)
	for range 5 {
		r := f.get("/swr")
		expect(t, r, 200, "STALE; layer=l1")
		if r.body != "v1" {
			t.Fatalf("stale body %q", r.body)
		}
	}
	close(gate)
	waitFor(t, func() bool { return f.get("/swr").body == "v2" }, "the refreshed entry")
	if n := f.origin.count(); n != 2 {
		t.Fatalf("origin saw %d requests, want 2 (one refresh for five stale hits)", n)
	}
}

func TestStaleIfErrorServesStaleWhenTheOriginFails(t *testing.T) {
	var fail atomic.Bool
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-if-error=300")
		_, _ = io.WriteString(w, "good")
	})
	expect(t, f.get("/sie"), 200, "MISS")
	fail.Store(true)
	f.clock.Advance(60 * time.Second)
	r := f.get("/sie")
	expect(t, r, 200, "STALE; layer=l1")
	if r.body != "good" {
		t.Fatalf("body %q", r.body)
	}
	f.clock.Advance(300 * time.Second)
	expect(t, f.get("/sie"), 503, "MISS")
}

func TestTierStaleIfErrorCoversAnOriginThatIsGone(t *testing.T) {
	o := newOrigin(t, cacheFor("max-age=10", "kept"))
	f := newFixtureFor(t, "defaults: {staleIfError: 1h}", o)
	expect(t, f.get("/gone"), 200, "MISS")
	o.Close()
	f.clock.Advance(time.Minute)
	r := f.get("/gone")
	expect(t, r, 200, "STALE; layer=l1")
	if r.body != "kept" {
		t.Fatalf("body %q", r.body)
	}
	expect(t, f.get("/never-stored"), 502, "MISS")
}

func TestMustRevalidateForbidsStaleOnError(t *testing.T) {
	var fail atomic.Bool
	f := newFixture(t, "defaults: {staleIfError: 1h}", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Cache-Control", "max-age=10, must-revalidate")
		_, _ = io.WriteString(w, "x")
	})
	expect(t, f.get("/mr"), 200, "MISS")
	fail.Store(true)
	f.clock.Advance(time.Minute)
	expect(t, f.get("/mr"), 500, "MISS")
}

func TestOnlyIfCachedMissIs504(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "x"))
	expect(t, f.get("/o", "Cache-Control", "only-if-cached"), 504, "")
	if f.origin.count() != 0 {
		t.Fatal("only-if-cached reached the origin")
	}
	expect(t, f.get("/o"), 200, "MISS")
	expect(t, f.get("/o", "Cache-Control", "only-if-cached"), 200, "HIT; layer=l1")
}

func TestRequestNoCacheRevalidates(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "x"))
	expect(t, f.get("/nc"), 200, "MISS")
	expect(t, f.get("/nc", "Cache-Control", "no-cache"), 200, "MISS")
	expect(t, f.get("/nc", "Pragma", "no-cache"), 200, "MISS")
	if f.origin.count() != 3 {
		t.Fatalf("origin saw %d, want 3", f.origin.count())
	}
}

func TestTheTierCanIgnoreClientCacheControl(t *testing.T) {
	f := newFixture(t, "defaults: {ignoreRequestCacheControl: true}", cacheFor("max-age=60", "x"))
	expect(t, f.get("/i"), 200, "MISS")
	expect(t, f.get("/i", "Cache-Control", "no-cache"), 200, "HIT; layer=l1")
}

func TestNegativeCachingOf404(t *testing.T) {
	f := newFixture(t, "defaults: {negativeTTL: 30s}", func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	})
	expect(t, f.get("/nope"), 404, "MISS")
	expect(t, f.get("/nope"), 404, "HIT; layer=l1")
	f.clock.Advance(31 * time.Second)
	expect(t, f.get("/nope"), 404, "MISS")
}

func TestWithoutNegativeTTLA404IsNotStored(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	expect(t, f.get("/nope"), 404, "MISS")
	expect(t, f.get("/nope"), 404, "MISS")
}

func TestUnsafeMethodsInvalidateTargetAndLocation(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("Location", "/items/2")
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, r.URL.Path)
	})
	for _, p := range []string{"/items", "/items/2", "/other"} {
		expect(t, f.get(p), 200, "MISS")
		expect(t, f.get(p), 200, "HIT; layer=l1")
	}
	expect(t, f.do("POST", "/items"), 201, "BYPASS")
	expect(t, f.get("/items"), 200, "MISS")
	expect(t, f.get("/items/2"), 200, "MISS")
	expect(t, f.get("/other"), 200, "HIT; layer=l1")
}

func TestAFailedUnsafeRequestInvalidatesNothing(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "x")
	})
	expect(t, f.get("/keep"), 200, "MISS")
	expect(t, f.do("DELETE", "/keep"), 403, "BYPASS")
	expect(t, f.get("/keep"), 200, "HIT; layer=l1")
}

func TestRangeRequestsOnAStoredResponse(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader("0123456789"))
	})
	// A range miss asks the origin for the range; its part lacks both
	// ends of the representation, so the full GET is fetched whole.
	expect(t, f.get("/r", "Range", "bytes=2-4"), 206, "MISS")
	expect(t, f.get("/r"), 200, "MISS")
	if rg := f.origin.last().Header.Get("Range"); rg != "" {
		t.Fatalf("the full GET asked for Range %q", rg)
	}
	r := f.get("/r", "Range", "bytes=2-4")
	expect(t, r, 206, "HIT; layer=l1")
	if r.body != "234" || r.header.Get("Content-Range") != "bytes 2-4/10" {
		t.Fatalf("range: %q %q", r.body, r.header.Get("Content-Range"))
	}
	r = f.get("/r", "Range", "bytes=20-")
	expect(t, r, 416, "HIT; layer=l1")
	if r.header.Get("Content-Range") != "bytes */10" {
		t.Fatalf("416 Content-Range %q", r.header.Get("Content-Range"))
	}
	expect(t, f.get("/r", "Range", "bytes=0-1,4-5"), 200, "HIT; layer=l1")
}

func TestHopByHopFieldsAreDroppedAndForwardingFieldsSet(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Connection", "X-Internal")
		w.Header().Set("X-Internal", "secret")
		w.Header().Set("Keep-Alive", "timeout=5")
		_, _ = io.WriteString(w, "x")
	})
	r := f.get("/hop", "Connection", "X-Client-Hop", "X-Client-Hop", "1", "X-Forwarded-For", "10.0.0.1")
	got := f.origin.last()
	if got.Header.Get("X-Client-Hop") != "" {
		t.Fatal("a field named by Connection reached the origin")
	}
	if xff := got.Header.Get("X-Forwarded-For"); xff != "10.0.0.1, 127.0.0.1" {
		t.Fatalf("X-Forwarded-For = %q", xff)
	}
	if got.Header.Get("X-Forwarded-Proto") != "http" || !strings.Contains(got.Header.Get("Via"), "tiercache") {
		t.Fatalf("forwarding fields: proto %q via %q", got.Header.Get("X-Forwarded-Proto"), got.Header.Get("Via"))
	}
	for _, resp := range []response{r, f.get("/hop")} {
		if resp.header.Get("X-Internal") != "" || resp.header.Get("Keep-Alive") != "" {
			t.Fatalf("hop-by-hop fields reached the client (%s): %v", resp.xcache(), resp.header)
		}
	}
}

func TestUnkeyedHeadersCannotPoisonTheCache(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		host := r.Header.Get("X-Forwarded-Host")
		fmt.Fprintf(w, "<a href=\"//%s/next\">", host)
	})
	r := f.get("/page", "Host", "good.example", "X-Forwarded-Host", "evil.example", "X-Original-URL", "/admin")
	if strings.Contains(r.body, "evil") {
		t.Fatalf("the attacker's X-Forwarded-Host reached the origin: %q", r.body)
	}
	if f.origin.last().Header.Get("X-Original-Url") != "" {
		t.Fatal("X-Original-URL reached the origin")
	}
	r = f.get("/page", "Host", "good.example")
	expect(t, r, 200, "HIT; layer=l1")
	if !strings.Contains(r.body, "good.example") {
		t.Fatalf("served %q", r.body)
	}
	// A forged scheme only ever selects its own entry.
	expect(t, f.get("/page", "Host", "good.example", "X-Forwarded-Proto", "https"), 200, "MISS")
}

func TestPrivateSetCookieAndNoStoreAreNotStored(t *testing.T) {
	cases := map[string]http.HandlerFunc{
		"private":  cacheFor("private, max-age=60", "x"),
		"no-store": cacheFor("no-store", "x"),
		"set-cookie": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Set-Cookie", "s=1")
			cacheFor("max-age=60", "x")(w, r)
		},
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "", h)
			expect(t, f.get("/u"), 200, "MISS")
			expect(t, f.get("/u"), 200, "MISS")
		})
	}
}

func TestSetCookieIsStrippedWhenTheTierAllowsStoring(t *testing.T) {
	f := newFixture(t, "defaults: {allowSetCookie: true}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", "session=mine")
		cacheFor("max-age=60", "x")(w, r)
	})
	r := f.get("/sc")
	if r.header.Get("Set-Cookie") != "session=mine" {
		t.Fatal("the fetching client lost its own cookie")
	}
	r = f.get("/sc")
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Set-Cookie") != "" {
		t.Fatal("a stored Set-Cookie was replayed to another client")
	}
}

func TestUncacheableAnswersSkipCoalescingAfterwards(t *testing.T) {
	var inflight, peak atomic.Int64
	var armed, alone atomic.Bool
	two := make(chan struct{}) // closed when two requests are at the origin at once
	var twoOnce sync.Once
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		n := inflight.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		if n >= 2 {
			twoOnce.Do(func() { close(two) })
		}
		if armed.Load() {
			// Hold each request until a second one is here too; requests
			// queued behind one another never meet, and the bound ends the
			// wait of the first.
			select {
			case <-two:
			case <-time.After(5 * time.Second):
				alone.Store(true)
			}
		}
		inflight.Add(-1)
		w.Header().Set("Cache-Control", "private")
		_, _ = io.WriteString(w, "mine")
	})
	expect(t, f.get("/priv"), 200, "MISS")
	peak.Store(0)
	armed.Store(true)
	var wg sync.WaitGroup
	for range 5 {
		wg.Add(1)
		go func() { defer wg.Done(); f.get("/priv") }()
	}
	wg.Wait()
	if alone.Load() || peak.Load() < 2 {
		t.Fatalf("requests for a hit-for-miss key were serialized (one waited alone at the origin: %v; peak concurrency %d)", alone.Load(), peak.Load())
	}
}

func TestPurgeRemovesEntriesAndAnInFlightFillIsNotStoredAfterIt(t *testing.T) {
	release := make(chan struct{})
	var slow atomic.Bool
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if slow.Load() {
			<-release
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Surrogate-Key", "red")
		_, _ = io.WriteString(w, "x")
	})
	expect(t, f.get("/p1"), 200, "MISS")
	expect(t, f.get("/p1"), 200, "HIT; layer=l1")
	if res, err := f.purger.Purge(context.Background(), invalidate.Request{Tags: []string{"red"}}); err != nil || res.Purged != 1 {
		t.Fatalf("purged %+v, %v; want 1", res, err)
	}
	expect(t, f.get("/p1"), 200, "MISS")

	slow.Store(true)
	done := make(chan response)
	go func() { done <- f.get("/p2") }()
	waitFor(t, func() bool { return f.origin.count() == 3 }, "the slow fill")
	if _, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/p2"}}); err != nil {
		t.Fatal(err)
	}
	close(release)
	expect(t, <-done, 200, "MISS")
	slow.Store(false)
	expect(t, f.get("/p2"), 200, "MISS")
}

func TestOriginBreakingOffMidBodyBreaksTheClientResponse(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		if r.URL.Path != "/broken" {
			return
		}
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "only part")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	})
	resp, err := f.srv.Client().Get(f.srv.URL + "/broken")
	if err == nil {
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if err == nil {
		t.Fatal("the client read a complete-looking response from a broken origin body")
	}
	expect(t, f.get("/broken2"), 200, "MISS") // the proxy keeps serving
}

func TestEarlyHintsArePassedThrough(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</app.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "x")
	})
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET /hints HTTP/1.1\r\nHost: x\r\n\r\n")
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 103") {
		t.Fatalf("first status line %q, %v", line, err)
	}
}

func TestOriginErrorsAre502And504(t *testing.T) {
	// The origin never sends headers (it holds the request until the
	// proxy gives up on it).
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	f := newFixtureFor(t, "origin: {responseHeaderTimeout: 100ms}", o)
	expect(t, f.get("/slow"), 504, "MISS")
	o.Close()
	expect(t, f.get("/closed"), 502, "MISS")
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestAClientThatLeftBeforeTheFetchCausesNoOriginRequest(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("GET", "http://a.example/gone", nil).WithContext(ctx)
	f.px.ServeHTTP(httptest.NewRecorder(), req)
	if n := f.origin.count(); n != 0 {
		t.Fatalf("the origin saw %d requests for a client that had left", n)
	}
}
