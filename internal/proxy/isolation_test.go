package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// One client never decides what another receives: each test sends, as an
// attacker would, a request the cache could read otherwise than the
// origin (a parameter or cookie the key drops or reads differently, an
// encoded delimiter, a credential, a forced revalidation, a request that
// overtakes a fill) and checks what the next client gets.

// A parameter the key drops still reaches the origin on a fill, so an
// origin that reflects the request URL (canonical/og:url links, analytics
// campaign tags, pagination) stores the attacker's value for everyone.
func TestAQueryParameterTheKeyDropsDoesNotReachTheOriginOnAFill(t *testing.T) {
	const cfg = `
rules:
- name: shaped
  match: {pathPrefix: /q}
  cacheKey: {queryExclude: ["utm_*"]}
`
	origin := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprintf(w, `<link rel="canonical" href="https://example.com%s">`, r.URL.RequestURI())
	}
	untouched := newFixture(t, cfg, origin).get("/q?id=1")
	f := newFixture(t, cfg, origin)
	f.get(`/q?id=1&utm_source="><script>alert(1)</script>`)
	got := f.get("/q?id=1")
	if got.body != untouched.body {
		t.Fatalf("clean /q?id=1 got %q (X-Cache %q), want %q", got.body, got.xcache(), untouched.body)
	}
}

// the cookie key part is read differently from how origins read the
// Cookie field (Go's net/http, Node's cookie, Django trim names; Django
// keeps the last duplicate).
func TestAKeyedCookieIsReadAsOriginsReadIt(t *testing.T) {
	const cfg = `
rules:
- name: lang
  match: {pathPrefix: /c/}
  cacheKey: {cookies: [lang]}
`
	goOrigin := func(w http.ResponseWriter, r *http.Request) { // first match, trimmed name
		w.Header().Set("Cache-Control", "max-age=600")
		v := "default"
		if c, err := r.Cookie("lang"); err == nil {
			v = c.Value
		}
		fmt.Fprintf(w, "lang=%s", v)
	}
	lastWins := func(w http.ResponseWriter, r *http.Request) { // Django parse_cookie
		w.Header().Set("Cache-Control", "max-age=600")
		v := "default"
		for _, part := range strings.Split(r.Header.Get("Cookie"), ";") {
			if n, val, ok := strings.Cut(part, "="); ok && strings.TrimSpace(n) == "lang" {
				v = strings.TrimSpace(val)
			}
		}
		fmt.Fprintf(w, "lang=%s", v)
	}
	cases := map[string]struct {
		origin http.HandlerFunc
		attack string
	}{
		"a space before '=' hides the first cookie from the key but not from a Go origin":        {goOrigin, "lang =fr; lang=en"},
		"a duplicate cookie is keyed by its first value but a last-wins origin reads the second": {lastWins, "lang=en; lang=fr"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, cfg, c.origin)
			f.get("/c/home", "Cookie", c.attack)
			if got := f.get("/c/home", "Cookie", "lang=en"); got.body != "lang=en" {
				t.Fatalf("victim with lang=en got %q (X-Cache %q)", got.body, got.xcache())
			}
		})
	}
}

// a request that joins a fill's flight after an invalidation of the
// URL (here the client's own POST) is handed the overtaken, pre-write
// response: the fill is not stored but is still shared with waiters, so
// read-your-writes (pass.go's promise) breaks.
func TestAWaiterArrivingAfterAnInvalidationDoesNotGetTheOvertakenFill(t *testing.T) {
	o := newGatedOrigin(t)
	f := newFixtureFor(t, "", o.origin)
	slow := startSlowFill(t, f, o, "/slow") // leader, held at the origin
	if r := f.do(http.MethodPost, "/slow"); r.status != http.StatusOK {
		t.Fatalf("POST: %d", r.status)
	}
	before := testCounter(f.px.m.Coalesced)
	after := make(chan response, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/slow", nil)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			after <- response{}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		after <- response{resp.StatusCode, resp.Header, string(b)}
	}()
	for deadline := time.Now().Add(5 * time.Second); testCounter(f.px.m.Coalesced) == before; {
		if time.Now().After(deadline) {
			t.Fatal("the read after the write never joined the flight")
		}
		time.Sleep(time.Millisecond)
	}
	close(o.gate)
	await(t, slow)
	if r := await(t, after); r.body == "v1" {
		t.Fatalf("GET after the POST got the pre-write fill %q (X-Cache %q)", r.body, r.xcache())
	}
}

// in strict mode the Cookie field is withheld even when the rule keys
// on a cookie, so every cookie variant is filled with the cookie-less page.
func TestStrictModeForwardsTheCookieARuleKeysOn(t *testing.T) {
	const cfg = `
requestHeaders: {mode: strict}
rules:
- name: lang
  match: {pathPrefix: /c/}
  cacheKey: {cookies: [lang]}
`
	f := newFixture(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		v := "default"
		if c, err := r.Cookie("lang"); err == nil {
			v = c.Value
		}
		fmt.Fprintf(w, "lang=%s", v)
	})
	if got := f.get("/c/home", "Cookie", "lang=fr"); got.body != "lang=fr" {
		t.Fatalf("keyed cookie lang=fr: origin answered %q", got.body)
	}
}

// defaults.fallbackTTL stores a personal page (Cookie on the request,
// no Cache-Control on the response) for everyone: the ttl-rule defence
// against credentials does not cover the tier default.
func TestFallbackTTLDoesNotStoreACredentialedPersonalPage(t *testing.T) {
	const cfg = "defaults: {fallbackTTL: 1h}\n"
	f := newFixture(t, cfg, reflectingOrigin)
	f.get("/account", "Cookie", "session=victim")
	if got := f.get("/account"); strings.Contains(got.body, "victim") {
		t.Fatalf("anonymous /account got %q (X-Cache %q)", got.body, got.xcache())
	}
}

// matrix parameters (';') on a non-dot segment are kept by CleanPath,
// so a suffix rule matches "/account;x.css", which Tomcat/Spring (and
// Jetty) route to /account. With ttlWithCredentials (needed for assets,
// since browsers send cookies with them) the personal page is stored.
func TestMatrixParametersDoNotSteerRuleMatching(t *testing.T) {
	const cfg = `
rules:
- name: assets
  match: {regex: '\.css$'}
  ttl: 1h
  ttlWithCredentials: true
`
	springLike := func(w http.ResponseWriter, r *http.Request) {
		segs := strings.Split(r.URL.Path, "/")
		for i, s := range segs {
			segs[i], _, _ = strings.Cut(s, ";")
		}
		r2 := r.Clone(r.Context())
		r2.URL.Path = strings.Join(segs, "/")
		reflectingOrigin(w, r2)
	}
	f := newFixture(t, cfg, springLike)
	f.get("/account;x.css", "Cookie", "session=victim")
	if got := f.get("/account;x.css"); strings.Contains(got.body, "victim") {
		t.Fatalf("anonymous /account;x.css got %q (X-Cache %q)", got.body, got.xcache())
	}
}

// one client turns a hot shared entry into a hit-for-miss marker:
// no-cache forces a fill, its Cookie makes the origin answer private, and
// uncacheable() overwrites the primary key. Everyone then misses, without
// coalescing, for defaults.hitForMissTTL (2 min), renewable at will.
func TestOneCredentialedNoCacheRequestDoesNotUncacheAHotEntry(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Cookie") != "" {
			w.Header().Set("Cache-Control", "private")
			_, _ = io.WriteString(w, "personal")
			return
		}
		w.Header().Set("Cache-Control", "max-age=600")
		_, _ = io.WriteString(w, "shared")
	})
	f.get("/hot")
	expect(t, f.get("/hot"), 200, "HIT; layer=l1")
	f.get("/hot", "Cookie", "session=attacker", "Cache-Control", "no-cache")
	expect(t, f.get("/hot"), 200, "HIT; layer=l1")
}

func TestAPathWithEncodedDelimitersOrControlsBypassesTheCache(t *testing.T) {
	f := newFixture(t, `
rules:
- name: assets
  match: {regex: '\.css$'}
  ttl: 1h
  ttlWithCredentials: true
`, reflectingOrigin)
	for _, path := range []string{"/account%3fx.css", "/account%23x.css", "/account%00x.css", "/account%0ax.css"} {
		f.get(path, "Cookie", "session=victim")
		if got := f.get(path); got.xcache() != "BYPASS" || strings.Contains(got.body, "victim") {
			t.Errorf("%s: %q %q, want BYPASS and nothing of the victim's", path, got.xcache(), got.body)
		}
	}
}

// A 304 answering a revalidation forced by one client (no-cache) is
// decided with that client's request header: Cookie (made-up lifetime),
// Authorization (no public/s-maxage) or no-store make Decide say "not
// stored", and revalidated() then deletes the shared entry. One cheap
// request (the origin answers 304) empties a hot entry on demand.
func TestARevalidationForcedByOneClientDoesNotEvictTheSharedEntry(t *testing.T) {
	cases := map[string]struct {
		cfg, cc string
		attack  []string
	}{
		"a Cookie on an entry whose lifetime is the tier's fallbackTTL": {"defaults: {fallbackTTL: 1h}\n", "", []string{"Cookie", "session=attacker", "Cache-Control", "no-cache"}},
		"an Authorization on an entry with max-age":                     {"", "max-age=600", []string{"Authorization", "Bearer x", "Cache-Control", "no-cache"}},
		"a request no-store": {"", "max-age=600", []string{"Cache-Control", "no-cache, no-store"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, c.cfg, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"v1"`)
				if c.cc != "" {
					w.Header().Set("Cache-Control", c.cc)
				}
				if r.Header.Get("If-None-Match") == `"v1"` {
					w.WriteHeader(http.StatusNotModified)
					return
				}
				_, _ = io.WriteString(w, "shared")
			})
			f.get("/hot")
			expect(t, f.get("/hot"), 200, "HIT; layer=l1")
			f.get("/hot", c.attack...)
			expect(t, f.get("/hot"), 200, "HIT; layer=l1")
		})
	}
}

// Cookie parsing differs between the key and common origins: Rack 2
// (parse_cookies_header splits on /[;,] */ and keeps the first) reads a
// keyed cookie hidden after a comma; a WSGI server joins two Cookie lines
// with "," and Django splits on ';' only, so it sees no keyed cookie at
// all. Either way the victim's variant gets another variant's answer.
func TestAKeyedCookieHiddenByCaseEncodingCommaOrASecondLineBypasses(t *testing.T) {
	const cfg = `
rules:
- name: lang
  match: {pathPrefix: /c/}
  cacheKey: {cookies: [lang]}
`
	rack2 := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		v := "default"
		all := strings.Join(r.Header.Values("Cookie"), "; ")
	outer:
		for _, part := range strings.FieldsFunc(all, func(c rune) bool { return c == ';' || c == ',' }) {
			if n, val, ok := strings.Cut(strings.TrimSpace(part), "="); ok && n == "lang" {
				v = val
				break outer
			}
		}
		fmt.Fprintf(w, "lang=%s", v)
	}
	wsgiDjango := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		v := "default"
		joined := strings.Join(r.Header.Values("Cookie"), ",") // gunicorn
		for _, part := range strings.Split(joined, ";") {      // django parse_cookie
			if n, val, ok := strings.Cut(part, "="); ok && strings.TrimSpace(n) == "lang" {
				v = strings.TrimSpace(val)
			}
		}
		fmt.Fprintf(w, "lang=%s", v)
	}
	firstWins := func(norm func(string) string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			v := "default"
			for _, part := range strings.Split(r.Header.Get("Cookie"), ";") {
				if n, val, ok := strings.Cut(strings.TrimSpace(part), "="); ok && norm(n) == "lang" {
					v = val
					break
				}
			}
			fmt.Fprintf(w, "lang=%s", v)
		}
	}
	t.Run("case-insensitive names, ASP.NET Core", func(t *testing.T) {
		f := newFixture(t, cfg, firstWins(strings.ToLower))
		f.get("/c/home", "Cookie", "LANG=evil; lang=fr")
		if got := f.get("/c/home", "Cookie", "lang=fr"); got.body != "lang=fr" {
			t.Fatalf("victim with lang=fr got %q (X-Cache %q)", got.body, got.xcache())
		}
	})
	t.Run("percent-decoded names, PHP and Rack", func(t *testing.T) {
		f := newFixture(t, cfg, firstWins(func(n string) string { u, _ := url.QueryUnescape(n); return u }))
		f.get("/c/home", "Cookie", "%6cang=evil; lang=fr")
		if got := f.get("/c/home", "Cookie", "lang=fr"); got.body != "lang=fr" {
			t.Fatalf("victim with lang=fr got %q (X-Cache %q)", got.body, got.xcache())
		}
	})
	t.Run("comma, Rack 2", func(t *testing.T) {
		f := newFixture(t, cfg, rack2)
		f.get("/c/home", "Cookie", "x=1,lang=evil; lang=fr")
		if got := f.get("/c/home", "Cookie", "lang=fr"); got.body != "lang=fr" {
			t.Fatalf("victim with lang=fr got %q (X-Cache %q)", got.body, got.xcache())
		}
	})
	t.Run("two Cookie lines, gunicorn+Django", func(t *testing.T) {
		f := newFixture(t, cfg, wsgiDjango)
		f.get("/c/home", "Cookie", "x=1", "Cookie", "lang=fr")
		if got := f.get("/c/home", "Cookie", "lang=fr"); got.body != "lang=fr" {
			t.Fatalf("victim with lang=fr got %q (X-Cache %q)", got.body, got.xcache())
		}
	})
}

// One POST (any client may send one) that overtakes a fill sends every
// request waiting on that fill to the origin on its own: the empty flight
// makes each waiter fill without coalescing. Waiters that were there
// before the write could share the overtaken answer (they are concurrent
// with the write); those after could re-coalesce.
func TestAPostDuringAFillDoesNotSendEveryWaiterToTheOrigin(t *testing.T) {
	o := newGatedOrigin(t)
	f := newFixtureFor(t, "", o.origin)
	slow := startSlowFill(t, f, o, "/slow")
	const waiters = 10
	before := testCounter(f.px.m.Coalesced)
	answers := make(chan response, waiters)
	for range waiters {
		go func() {
			resp, err := f.srv.Client().Get(f.srv.URL + "/slow")
			if err != nil {
				answers <- response{status: -1}
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			answers <- response{resp.StatusCode, resp.Header, string(b)}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); testCounter(f.px.m.Coalesced) < before+waiters; {
		if time.Now().After(deadline) {
			t.Fatal("waiters did not join")
		}
		time.Sleep(time.Millisecond)
	}
	if r := f.do(http.MethodPost, "/slow"); r.status != http.StatusOK {
		t.Fatalf("POST: %d", r.status)
	}
	close(o.gate)
	await(t, slow)
	for range waiters {
		await(t, answers)
	}
	if n := o.slowN.Load(); n > 2 {
		t.Fatalf("one POST turned one coalesced fill into %d origin GETs", n)
	}
}
