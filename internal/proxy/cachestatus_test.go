package proxy

import (
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Cache-Status (RFC 9211) against a real origin, one test per way a
// request is answered.

const csRules = `
rules:
- name: nocache
  match: {pathPrefix: /pass/}
  bypass: true
- name: static
  match: {pathPrefix: /static/}
`

func expectCS(t *testing.T, r response, want ...string) {
	t.Helper()
	if got := r.header.Values("Cache-Status"); !slices.Equal(got, want) {
		t.Fatalf("Cache-Status = %q, want %q (X-Cache %q, status %d)", got, want, r.xcache(), r.status)
	}
}

// hitTTL checks a hit's member ("tiercache; hit; ttl=N; detail=rule")
// and returns N.
func hitTTL(t *testing.T, r response, rule string) int {
	t.Helper()
	got := r.header.Values("Cache-Status")
	if len(got) != 1 {
		t.Fatalf("Cache-Status = %q, want one member", got)
	}
	rest, ok := strings.CutPrefix(got[0], "tiercache; hit; ttl=")
	num, tail, _ := strings.Cut(rest, ";")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || tail != " detail="+rule {
		t.Fatalf("Cache-Status = %q, want tiercache; hit; ttl=<n>; detail=%s", got[0], rule)
	}
	return n
}

func TestCacheStatusOfAMissThatIsStoredAndTheHitAfterIt(t *testing.T) {
	f := newFixture(t, csRules, cacheFor("max-age=60", "hi"))
	expectCS(t, f.get("/static/a"), "tiercache; fwd=uri-miss; stored; detail=static")
	if n := hitTTL(t, f.get("/static/a"), "static"); n < 58 || n > 60 {
		t.Fatalf("ttl = %d, want about 60", n)
	}
	f.clock.Advance(30 * time.Second)
	if n := hitTTL(t, f.get("/static/a"), "static"); n < 28 || n > 30 {
		t.Fatalf("ttl 30 s later = %d, want about 30", n)
	}
	expectCS(t, f.get("/other"), "tiercache; fwd=uri-miss; stored; detail=default")
}

func TestCacheStatusOfABypassRuleAndAnUnsafeMethod(t *testing.T) {
	f := newFixture(t, csRules, cacheFor("max-age=60", "hi"))
	expectCS(t, f.get("/pass/a"), "tiercache; fwd=bypass; detail=nocache")
	expectCS(t, f.do(http.MethodPost, "/static/a"), "tiercache; fwd=method; detail=static")
}

func TestCacheStatusOfAResponseThatIsNotStoredAndTheHitForMissAfterIt(t *testing.T) {
	f := newFixture(t, csRules, cacheFor("no-store", "hi"))
	expectCS(t, f.get("/a"), "tiercache; fwd=uri-miss; detail=default")
	expectCS(t, f.get("/a"), "tiercache; fwd=miss; detail=default")
}

func TestCacheStatusOfARevalidationNamesTheOrigins304(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "hi")
	})
	f.get("/a")
	f.clock.Advance(time.Minute)
	r := f.get("/a")
	expect(t, r, http.StatusOK, "REVALIDATED")
	got := r.header.Get("Cache-Status")
	if !strings.HasPrefix(got, "tiercache; fwd=stale; fwd-status=304; ttl=") || !strings.HasSuffix(got, "; stored; detail=default") {
		t.Fatalf("Cache-Status = %q, want fwd=stale; fwd-status=304; ttl=<n>; stored", got)
	}
}

func TestCacheStatusOfAStaleEntryFetchedAgain(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=10", "hi"))
	f.get("/a")
	f.clock.Advance(time.Minute)
	expectCS(t, f.get("/a"), "tiercache; fwd=stale; stored; detail=default")
}

func TestCacheStatusOfAStaleEntryServedForAnOrigin5xx(t *testing.T) {
	var fail atomic.Bool
	f := newFixture(t, "defaults: {staleIfError: 1h}", func(w http.ResponseWriter, r *http.Request) {
		if fail.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Cache-Control", "max-age=10")
		_, _ = io.WriteString(w, "hi")
	})
	f.get("/a")
	fail.Store(true)
	f.clock.Advance(time.Minute)
	r := f.get("/a")
	if r.status != http.StatusOK || !strings.HasPrefix(r.xcache(), "STALE") {
		t.Fatalf("got %d %q, want a stale 200", r.status, r.xcache())
	}
	got := r.header.Get("Cache-Status")
	if !strings.HasPrefix(got, "tiercache; fwd=stale; fwd-status=503; ttl=-") || !strings.HasSuffix(got, "; detail=default") {
		t.Fatalf("Cache-Status = %q, want fwd=stale; fwd-status=503 and a negative ttl", got)
	}
}

func TestCacheStatusOfAVaryMiss(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		_, _ = io.WriteString(w, r.Header.Get("Accept-Language"))
	})
	expectCS(t, f.get("/a", "Accept-Language", "en"), "tiercache; fwd=uri-miss; stored; detail=default")
	expectCS(t, f.get("/a", "Accept-Language", "fr"), "tiercache; fwd=vary-miss; stored; detail=default")
	hitTTL(t, f.get("/a", "Accept-Language", "fr"), "default")
}

func TestCacheStatusOfARequestWhoseDirectivesRefuseTheStoredResponse(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "hi"))
	f.get("/a")
	expectCS(t, f.get("/a", "Cache-Control", "no-cache"), "tiercache; fwd=request; stored; detail=default")
	expectCS(t, f.get("/a", "Cache-Control", "max-age=0"), "tiercache; fwd=request; stored; detail=default")
}

func TestCacheStatusComesAfterTheOriginsOwnMembers(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Add("Cache-Status", "origin-cdn; hit")
		w.Header().Add("Cache-Status", `"app cache"; fwd=uri-miss`)
		_, _ = io.WriteString(w, "hi")
	})
	expectCS(t, f.get("/a"), "origin-cdn; hit", `"app cache"; fwd=uri-miss`, "tiercache; fwd=uri-miss; stored; detail=default")
	r := f.get("/a")
	got := r.header.Values("Cache-Status")
	if len(got) != 3 || got[0] != "origin-cdn; hit" || !strings.HasPrefix(got[2], "tiercache; hit; ttl=") {
		t.Fatalf("a hit's Cache-Status = %q, want the origin's two members, then this cache's hit", got)
	}
}

func TestCacheStatusCanBeTurnedOff(t *testing.T) {
	f := newFixture(t, "defaults: {cacheStatus: false}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Cache-Status", "origin-cdn; hit")
		_, _ = io.WriteString(w, "hi")
	})
	r := f.get("/a")
	expect(t, r, http.StatusOK, "MISS")
	expectCS(t, r, "origin-cdn; hit")
	r = f.get("/a")
	expect(t, r, http.StatusOK, "HIT; layer=l1")
	expectCS(t, r, "origin-cdn; hit")
}

func TestCacheStatusOfAnOriginThatCannotBeReached(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "hi"))
	f.origin.Close()
	r := f.get("/a")
	if r.status != http.StatusBadGateway {
		t.Fatalf("status %d, want 502", r.status)
	}
	expectCS(t, r, "tiercache; fwd=uri-miss; detail=default")
}

func TestCacheStatusOfAStoredPartAndTheResponseCompletedFromIt(t *testing.T) {
	content := strings.Repeat("0123456789", 10)
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(content))
	})
	r := f.get("/a", "Range", "bytes=0-9")
	if r.status != http.StatusPartialContent {
		t.Fatalf("status %d, want 206", r.status)
	}
	expectCS(t, r, "tiercache; fwd=uri-miss; stored; detail=default")
	r = f.get("/a", "Range", "bytes=0-9")
	if got := r.header.Get("Cache-Status"); !strings.HasPrefix(got, "tiercache; hit; ttl=") {
		t.Fatalf("the stored part's Cache-Status %q, want a hit", got)
	}
	r = f.get("/a")
	if r.status != http.StatusOK || r.body != content {
		t.Fatalf("got %d %q, want the whole representation", r.status, r.body)
	}
	expectCS(t, r, "tiercache; fwd=partial; fwd-status=206; stored; detail=default")
}
