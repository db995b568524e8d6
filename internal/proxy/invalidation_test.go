package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/invalidate"
)

// gatedOrigin answers GET /slow only once its gate is opened (once per
// test), announcing on started that the fetch reached it; everything else
// at once. Bodies count the path's GETs ("v1", "v2", ...).
type gatedOrigin struct {
	*origin
	started chan struct{}
	gate    chan struct{}
	slowN   atomic.Int64
}

func newGatedOrigin(t *testing.T) *gatedOrigin {
	g := &gatedOrigin{started: make(chan struct{}, 16), gate: make(chan struct{})}
	g.origin = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			_, _ = io.WriteString(w, "changed")
			return
		}
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Surrogate-Key", "slow-tag")
		if r.URL.Path == "/slow" {
			n := g.slowN.Add(1)
			g.started <- struct{}{}
			select {
			case <-g.gate:
			case <-r.Context().Done():
				return
			}
			fmt.Fprintf(w, "v%d", n)
			return
		}
		_, _ = io.WriteString(w, "other")
	})
	return g
}

// startSlowFill sends GET /slow in the background and waits until the
// origin holds it; the returned channel delivers the answer.
func startSlowFill(t *testing.T, f *fixture, o *gatedOrigin, path string) <-chan response {
	t.Helper()
	done := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			done <- response{status: -1, body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- response{resp.StatusCode, resp.Header, string(b)}
	}()
	select {
	case <-o.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the fill did not reach the origin")
	}
	return done
}

func await(t *testing.T, c <-chan response) response {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no answer within 5s")
		return response{}
	}
}

func TestASlowFillIsStoredWhileAnotherURLIsWrittenEvery10ms(t *testing.T) {
	o := newGatedOrigin(t)
	f := newFixtureFor(t, "", o.origin)
	slow := startSlowFill(t, f, o, "/slow")
	// A 300 ms origin response, with a POST to an unrelated URL every
	// 10 ms meanwhile: each POST invalidates /other, and only /other.
	tick := time.NewTicker(10 * time.Millisecond)
	for range 30 {
		<-tick.C
		if r := f.do(http.MethodPost, "/other"); r.status != http.StatusOK || r.xcache() != "BYPASS" {
			t.Fatalf("POST /other: %d %q", r.status, r.xcache())
		}
	}
	tick.Stop()
	close(o.gate)
	if r := await(t, slow); r.status != 200 || r.xcache() != "MISS" || r.body != "v1" {
		t.Fatalf("the slow fill: %d %q %q, want 200 MISS v1", r.status, r.xcache(), r.body)
	}
	if r := f.get("/slow"); r.xcache() != "HIT; layer=l1" || r.body != "v1" {
		t.Fatalf("after the fill: %q %q; writes to another URL kept the slow response from being stored", r.xcache(), r.body)
	}
}

func TestAFillOvertakenByAnInvalidationOfItsURLIsServedButNotStored(t *testing.T) {
	cases := map[string]func(f *fixture){
		"a purge of the URL": func(f *fixture) {
			if _, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/slow"}}); err != nil {
				t.Fatal(err)
			}
		},
		"a purge of the response's tag": func(f *fixture) {
			if _, err := f.purger.Purge(context.Background(), invalidate.Request{Tags: []string{"slow-tag"}}); err != nil {
				t.Fatal(err)
			}
		},
		"a purge of a prefix covering the URL": func(f *fixture) {
			if _, err := f.purger.Purge(context.Background(), invalidate.Request{Prefix: "/sl"}); err != nil {
				t.Fatal(err)
			}
		},
		"a POST to the URL": func(f *fixture) {
			if r := f.do(http.MethodPost, "/slow"); r.status != http.StatusOK {
				t.Fatalf("POST /slow: %d", r.status)
			}
		},
	}
	for name, invalidateIt := range cases {
		t.Run(name, func(t *testing.T) {
			o := newGatedOrigin(t)
			f := newFixtureFor(t, "", o.origin)
			slow := startSlowFill(t, f, o, "/slow")
			invalidateIt(f)
			close(o.gate)
			if r := await(t, slow); r.status != 200 || r.body != "v1" {
				t.Fatalf("the overtaken fill: %d %q, want 200 v1 (served all the same)", r.status, r.body)
			}
			if r := f.get("/slow"); r.xcache() != "MISS" || r.body != "v2" {
				t.Fatalf("after the fill: %q %q, want MISS v2: a response overtaken by an invalidation was stored", r.xcache(), r.body)
			}
		})
	}
}

// tenantConfig keys /t/ on the X-Tenant request header.
const tenantConfig = `
rules:
- name: tenants
  match: {pathPrefix: /t/}
  cacheKey: {headers: [X-Tenant]}
`

func TestAnUnsafeRequestUnderAKeyedRuleRemovesEveryVariant(t *testing.T) {
	f := newFixture(t, tenantConfig, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = io.WriteString(w, r.Method+" for "+r.Header.Get("X-Tenant"))
	})
	for _, tenant := range []string{"a", "b"} {
		expect(t, f.get("/t/x", "X-Tenant", tenant), 200, "MISS")
	}
	for _, tenant := range []string{"a", "b"} {
		if r := f.get("/t/x", "X-Tenant", tenant); r.xcache() != "HIT; layer=l1" || r.body != "GET for "+tenant {
			t.Fatalf("tenant %s: %q %q, want its own entry", tenant, r.xcache(), r.body)
		}
	}
	expect(t, f.do(http.MethodPost, "/t/x", "X-Tenant", "a"), 200, "BYPASS")
	for _, tenant := range []string{"a", "b"} {
		expect(t, f.get("/t/x", "X-Tenant", tenant), 200, "MISS")
	}
}

func TestConcurrentMissesOfTwoTenantsAreNotCollapsed(t *testing.T) {
	o := newGatedOrigin(t)
	f := newFixtureFor(t, `
rules:
- name: tenants
  match: {pathPrefix: /}
  cacheKey: {headers: [X-Tenant]}
`, o.origin)
	answers := make(chan response, 2)
	for _, tenant := range []string{"a", "b"} {
		go func() {
			answers <- f.get("/slow", "X-Tenant", tenant)
		}()
	}
	// Both must reach the origin: the key differs, so neither may wait
	// for (and be served) the other's response.
	for range 2 {
		select {
		case <-o.started:
		case <-time.After(5 * time.Second):
			t.Fatal("the two tenants' misses were collapsed into one origin fetch")
		}
	}
	close(o.gate)
	for range 2 {
		if r := await(t, answers); r.xcache() != "MISS" {
			t.Fatalf("a tenant got %q, want its own MISS", r.xcache())
		}
	}
}

// BenchmarkUnsafeRequestUnderAKeyedRule is the cost of the invalidation a
// POST causes under a rule keyed on a request header, by L1 size: it must
// not grow with the number of entries.
func BenchmarkUnsafeRequestUnderAKeyedRule(b *testing.B) {
	for _, entries := range []int{1000, 20000} {
		b.Run(fmt.Sprintf("entries=%d", entries), func(b *testing.B) {
			f := newFixture(b, `
l1: {maxSize: 256Mi}
rules:
- name: tenants
  match: {pathPrefix: /}
  cacheKey: {headers: [X-Tenant]}
`, cacheFor("max-age=3600", "x"))
			for i := range entries {
				if r := f.get(fmt.Sprintf("/e/%d", i), "X-Tenant", "a"); r.status != 200 {
					b.Fatal(r.status)
				}
			}
			if n := f.cache.Stats().Entries; n < int64(entries) {
				b.Fatalf("L1 holds %d entries, want at least %d", n, entries)
			}
			u := f.srv.URL
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				f.px.invalidateAfter(httpRequest(b, http.MethodPost, u+fmt.Sprintf("/e/%d", i%entries)), &http.Response{StatusCode: 200, Header: http.Header{}})
			}
		})
	}
}

func httpRequest(b *testing.B, method, url string) *http.Request {
	r, err := http.NewRequest(method, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	return r
}
