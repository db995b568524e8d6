package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/invalidate"
)

// whoAmI answers every request with a public, storable page that names the
// client's session cookie (or "anon"), as a site that personalizes for
// logged-in users but forgets to mark those pages private would.
func whoAmI(w http.ResponseWriter, r *http.Request) {
	who := "anon"
	if c, err := r.Cookie("session"); err == nil {
		who = c.Value
	}
	w.Header().Set("Cache-Control", "public, max-age=600")
	_, _ = io.WriteString(w, "hello "+who)
}

const sessionBypass = `
rules:
  - name: logged-in
    match: {pathPrefix: /, cookies: [{name: session, present: true}]}
    bypass: true
  - name: preview
    match: {pathPrefix: /, headers: [{name: X-Preview, exact: "1"}]}
    bypass: true
`

// A request with a session cookie reaches the origin every time and
// stores nothing; a request without one is cached as before, and never
// served to a client with a session.
func TestASessionCookieBypassesTheCache(t *testing.T) {
	f := newFixture(t, sessionBypass, whoAmI)
	step := func(name string, hdr []string, xcache, body string, originCount int) {
		t.Helper()
		r := f.get("/page", hdr...)
		if r.status != 200 || r.xcache() != xcache || r.body != body || f.origin.count() != originCount {
			t.Fatalf("%s: %d %q %q with %d origin requests; want 200 %q %q with %d",
				name, r.status, r.xcache(), r.body, f.origin.count(), xcache, body, originCount)
		}
	}
	step("a logged-in client", []string{"Cookie", "theme=dark; session=alice"}, "BYPASS", "hello alice", 1)
	step("the logged-in client again", []string{"Cookie", "session=alice"}, "BYPASS", "hello alice", 2)
	// Nothing was stored: the first anonymous request is a miss.
	step("an anonymous client", nil, "MISS", "hello anon", 3)
	step("an anonymous client again", nil, "HIT; layer=l1", "hello anon", 3)
	step("an anonymous client with other cookies", []string{"Cookie", "theme=dark"}, "HIT; layer=l1", "hello anon", 3)
	step("another logged-in client", []string{"Cookie", "session=bob"}, "BYPASS", "hello bob", 4)
	step("a client whose session cookie is on a second Cookie line", []string{"Cookie", "theme=dark", "Cookie", "session=carol"}, "BYPASS", "hello carol", 5)
	// The origin may read a cookie name in another case as session: the
	// condition counts as met.
	step("a client spelling its session cookie in capitals", []string{"Cookie", "SESSION=eve"}, "BYPASS", "hello anon", 6)
	step("a previewing client", []string{"X-Preview", "1"}, "BYPASS", "hello anon", 7)
	step("a client sending X-Preview on two lines", []string{"X-Preview", "0", "X-Preview", "1"}, "BYPASS", "hello anon", 8)
	step("a client with another X-Preview value", []string{"X-Preview", "0"}, "HIT; layer=l1", "hello anon", 8)

	// HEAD follows the same rule.
	r := f.do("HEAD", "/page", "Cookie", "session=alice")
	if r.xcache() != "BYPASS" || f.origin.count() != 9 {
		t.Fatalf("HEAD with a session: %q after %d origin requests, want BYPASS after 9", r.xcache(), f.origin.count())
	}
}

// Purges find the entries of a URL whose rule is preceded by a bypass
// rule with a condition a request without cookies meets: the entries were
// stored under the next rule's key shape (its sorted query), and the purge
// keys them the same way.
func TestAPurgeFindsEntriesStoredPastAConditionedRule(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: no-consent
    match: {pathPrefix: /, cookies: [{name: consent, absent: true}]}
    bypass: true
  - name: sorted
    match: {pathPrefix: /}
    cacheKey: {sortQuery: true}
`, cacheFor("public, max-age=600", "x"))
	expect(t, f.get("/p?b=1&a=2", "Cookie", "consent=yes"), 200, "MISS")
	expect(t, f.get("/p?a=2&b=1", "Cookie", "consent=yes"), 200, "HIT; layer=l1")
	expect(t, f.get("/p?a=2&b=1"), 200, "BYPASS")
	res, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/p?b=1&a=2"}})
	if err != nil || res.Purged != 1 {
		t.Fatalf("purge: %+v, %v; want 1 entry purged", res, err)
	}
	expect(t, f.get("/p?a=2&b=1", "Cookie", "consent=yes"), 200, "MISS")
}

// hitPathFixture primes one 1 KiB entry under cfgYAML and returns the
// fixture and a request for it carrying hdr.
func hitPathFixture(b *testing.B, cfgYAML string, hdr http.Header) (*fixture, *http.Request) {
	body := strings.Repeat("x", 1024)
	f := newFixture(b, cfgYAML, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		// A type the tier does not compress at store time: the hit path
		// measured is an identity entry served as stored (coding_test.go
		// measures compressed and decoded hits).
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"0123456789abcdef"`)
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		_, _ = io.WriteString(w, body)
	})
	req := httptest.NewRequest("GET", "http://bench.example/bench/item?id=42", nil)
	req.Host = f.srv.Listener.Addr().String()
	req.Header = hdr
	if r := f.get("/bench/item?id=42"); r.xcache() != "MISS" {
		b.Fatalf("priming: %q", r.xcache())
	}
	// The entry is stored before the client has the last byte, but wait
	// for it rather than depend on that here.
	deadline := time.Now().Add(5 * time.Second)
	for {
		kb := f.px.keys.Get().(*keyBuf)
		kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
		ok := f.px.lookup(context.Background(), kb, req).ok
		f.px.keys.Put(kb)
		if ok {
			return f, req
		}
		if time.Now().After(deadline) {
			b.Fatal("the primed entry never reached L1")
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkL1HitPathPathRules is BenchmarkL1HitPath under a tier of path
// rules only (an exact path, a prefix, a regex) that the request passes
// through to the default rule: what matching cost before header and
// cookie conditions existed.
func BenchmarkL1HitPathPathRules(b *testing.B) {
	benchHitPath(b, `
l1: {maxSize: 16Mi, shards: 16}
rules:
  - {name: health, match: {path: /healthz}, bypass: true}
  - {name: static, match: {pathPrefix: /static/}, ttl: 1h}
  - {name: api, match: {regex: '^/api/v[0-9]+/'}, maxTTL: 1m}
`, http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}, "Cookie": {"_ga=GA1.2.1234567890.1234567890; theme=dark; lang=fr; consent=yes"}})
}

// BenchmarkL1HitPathCookieBypassRule is BenchmarkL1HitPath under a tier
// whose first rule bypasses clients with a session cookie, for a client
// without one that sends other cookies: the condition is checked on every
// hit.
func BenchmarkL1HitPathCookieBypassRule(b *testing.B) {
	benchHitPath(b, `
l1: {maxSize: 16Mi, shards: 16}
rules:
  - name: logged-in
    match: {pathPrefix: /, cookies: [{name: session, present: true}]}
    bypass: true
`, http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}, "Cookie": {"_ga=GA1.2.1234567890.1234567890; theme=dark; lang=fr; consent=yes"}})
}

// benchHitPath runs BenchmarkL1HitPath's loop under cfgYAML for a request
// carrying hdr.
func benchHitPath(b *testing.B, cfgYAML string, hdr http.Header) {
	f, req := hitPathFixture(b, cfgYAML, hdr)
	hitPathLoop(b, f, req)
}

// rawGet sends one request as raw bytes on a new connection to addr and
// returns the answer's status and body.
func rawGet(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	res, body := rawExchange(t, addr, request, false)
	return res.StatusCode, body
}

// phpCookie reads cookie name as PHP's $_COOKIE does: in every cookie
// name, '+' and percent-escapes are decoded (urldecode) and then ' ', '.'
// and a lone '[' become '_' (PHP's "dots and spaces in variable names are
// converted to underscores").
func phpCookie(r *http.Request, name string) (string, bool) {
	for _, line := range r.Header.Values("Cookie") {
		for _, part := range strings.Split(line, ";") {
			n, v, ok := strings.Cut(strings.TrimLeft(part, " \t"), "=")
			if !ok {
				continue
			}
			n = strings.NewReplacer("+", "_", " ", "_", ".", "_", "[", "_").Replace(n)
			if n == name {
				return v, true
			}
		}
	}
	return "", false
}

// A bypass rule keeps logged-in pages out of the cache with a cookie
// condition on the PHP session cookie "session_id". PHP (and so WordPress,
// Drupal, Magento) reads the cookie "session.id", "session id",
// "session+id" or "session[id" as $_COOKIE["session_id"]. Unless the
// sidecar counts those names as the condition's (ambiguous, so met), it
// sees an anonymous request, the origin sees a session, and the personal
// page (max-age=60 for anonymous pages, as the origin sends it) is stored
// for every anonymous client of the URL.
func TestPHPMangledSessionCookieNamesBypassTheCache(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		if s, ok := phpCookie(r, "session_id"); ok {
			_, _ = io.WriteString(w, "hello "+s)
			return
		}
		_, _ = io.WriteString(w, "hello anon")
	})
	f := newFixtureFor(t, `
rules:
  - name: logged-in
    match: {pathPrefix: /, cookies: [{name: session_id, present: true}]}
    bypass: true
`, o)
	for i, spelled := range []string{"session.id=mallory", "session id=mallory", "session+id=mallory", "session[id=mallory"} {
		path := "/page" + string(rune('a'+i))
		if r := f.get(path, "Cookie", spelled); r.body != "hello mallory" {
			t.Fatalf("cookie %q: the origin answered %q, want the personal page (the test's origin must read the name as PHP does)", spelled, r.body)
		}
		if r := f.get(path); r.body != "hello anon" {
			t.Errorf("cookie %q: the next anonymous client got %q (%s): a personal page was stored for all", spelled, r.body, r.xcache())
		}
	}
}
