package proxy

import (
	"fmt"
	"io"
	"net/http"
	"path"
	"strings"
	"testing"
)

// poisonConfig is the tier every poisoning case runs under: a forced-TTL
// rule for static files and for CSS anywhere (web cache deception bait),
// query shaping, a tenant-keyed path.
const poisonConfig = `
rules:
- name: static
  match: {pathPrefix: /static/}
  ttl: 1h
- name: css
  match: {regex: '\.css$'}
  ttl: 1h
- name: shaped
  match: {pathPrefix: /q}
  cacheKey: {queryExclude: ["utm_*"]}
- name: sorted
  match: {pathPrefix: /sorted}
  cacheKey: {sortQuery: true}
- name: tenant
  match: {pathPrefix: /tenant/}
  cacheKey: {headers: [X-Tenant]}
`

// schemeOverrides are request headers frameworks read the client-facing
// scheme from (Rack, Tornado, ASP.NET, ...), in the order the origin below
// trusts them.
var schemeOverrides = []string{
	"X-Forwarded-Scheme", "X-Url-Scheme", "X-Forwarded-Protocol", "X-Scheme", "X-Original-Proto",
}

// routeOverrides are request headers frameworks and gateways route on
// instead of the request line's path. (X-Original-URL and X-Rewrite-URL,
// withheld since before this suite, are covered by
// TestUnkeyedHeadersCannotPoisonTheCache.)
var routeOverrides = []string{
	"X-Forwarded-Uri", "X-Forwarded-Path", "X-Envoy-Original-Path", "X-Original-Uri",
}

// reflectingOrigin behaves like an application that trusts forwarding
// headers, routes on the cleaned path, reads queries split on '&' and ';',
// and puts what it read into its answer: every input that reaches it shows
// in the status, the Location or the body.
func reflectingOrigin(w http.ResponseWriter, r *http.Request) {
	route := r.URL.Path
	for _, h := range routeOverrides {
		if v := r.Header.Get(h); v != "" {
			route = v
		}
	}
	route = path.Clean(route)
	scheme := r.Header.Get("X-Forwarded-Proto")
	for _, h := range schemeOverrides {
		if v := r.Header.Get(h); v != "" {
			scheme = v
		}
	}
	if strings.EqualFold(r.Header.Get("X-Forwarded-Ssl"), "on") || strings.EqualFold(r.Header.Get("Front-End-Https"), "on") {
		scheme = "https"
	}
	if scheme == "http" && r.Header.Get("X-Forwarded-Proto") == "https" {
		// Rack's force_ssl: a request it believes is plain goes to https.
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Location", "https://"+r.Host+route)
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	if route == "/account" || strings.HasPrefix(route, "/account/") {
		// A personal page: no Cache-Control, as many apps send it.
		user := "anonymous"
		if c, err := r.Cookie("session"); err == nil {
			user = c.Value
		}
		fmt.Fprintf(w, "account of %s", user)
		return
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Cache-Control", "max-age=600")
	w.Header().Set("Vary", "Accept-Language")
	fmt.Fprintf(w, "route=%s scheme=%s host=%s xfh=%s lang=%s tenant=%s callback=%s a=%s debug=%s body=%s",
		route, scheme, r.Host, r.Header.Get("X-Forwarded-Host"), r.Header.Get("Accept-Language"),
		r.Header.Get("X-Tenant"), firstParam(r.URL.RawQuery, "callback"), firstParam(r.URL.RawQuery, "a"),
		r.Header.Get("X-Debug"), body)
}

// firstParam returns the first value of name in a query split on '&' and
// ';' (as Rack and many PHP and Java setups read it), undecoded.
func firstParam(rawQuery, name string) string {
	for _, part := range strings.FieldsFunc(rawQuery, func(c rune) bool { return c == '&' || c == ';' }) {
		if n, v, _ := strings.Cut(part, "="); n == name {
			return v
		}
	}
	return ""
}

// poisonRequest describes one request of a poisoning case.
type poisonRequest struct {
	target string   // path?query, sent as is
	host   string   // Host; empty: example.com
	header []string // name, value pairs
	body   string   // sent with Content-Length
	chunk  bool     // send the body chunked instead
}

func (f *fixture) sendPoison(pr poisonRequest) response {
	f.t.Helper()
	var body io.Reader
	if pr.body != "" {
		body = strings.NewReader(pr.body)
		if pr.chunk {
			body = io.MultiReader(body) // hides the length: chunked
		}
	}
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+pr.target, body)
	if err != nil {
		f.t.Fatal(err)
	}
	req.Host = "example.com"
	if pr.host != "" {
		req.Host = pr.host
	}
	for i := 0; i+1 < len(pr.header); i += 2 {
		req.Header.Add(pr.header[i], pr.header[i+1])
	}
	return f.send(req)
}

// TestPoisoningAttacksLeaveCleanRequestsUntouched sends each attack, then
// a clean request, and checks the clean request gets exactly what it gets
// from a cache that never saw the attack.
func TestPoisoningAttacksLeaveCleanRequestsUntouched(t *testing.T) {
	type poisonCase struct {
		config string
		// prime: the clean request is cached before the attack (the attack
		// then tries to replace a hot entry).
		prime         bool
		attack, clean poisonRequest
	}
	cases := map[string]poisonCase{
		"a GET body the origin reads is not stored for requests without it": {
			attack: poisonRequest{target: "/search", body: "EVIL"},
			clean:  poisonRequest{target: "/search"},
		},
		"a chunked GET body the origin reads is not stored for requests without it": {
			attack: poisonRequest{target: "/search", body: "EVIL", chunk: true},
			clean:  poisonRequest{target: "/search"},
		},
		"a Vary header named in Connection cannot fill another language's variant": {
			attack: poisonRequest{target: "/page", header: []string{"Accept-Language", "fr", "Connection", "Accept-Language"}},
			clean:  poisonRequest{target: "/page", header: []string{"Accept-Language", "fr"}},
		},
		"a keyed tenant header named in Connection cannot fill that tenant's entry": {
			attack: poisonRequest{target: "/tenant/home", header: []string{"X-Tenant", "acme", "Connection", "X-Tenant"}},
			clean:  poisonRequest{target: "/tenant/home", header: []string{"X-Tenant", "acme"}},
		},
		"a dot-dot with an encoded slash does not store a personal page under a ttl rule": {
			attack: poisonRequest{target: "/static/..%2faccount", header: []string{"Cookie", "session=victim"}},
			clean:  poisonRequest{target: "/static/..%2faccount"},
		},
		"an encoded dot-dot does not store a personal page under a ttl rule": {
			attack: poisonRequest{target: "/static/%2e%2e/account", header: []string{"Cookie", "session=victim"}},
			clean:  poisonRequest{target: "/static/%2e%2e/account"},
		},
		"a css suffix on a personal page with a cookie is not stored by a ttl rule": {
			attack: poisonRequest{target: "/account/x.css", header: []string{"Cookie", "session=victim"}},
			clean:  poisonRequest{target: "/account/x.css"},
		},
		"an excluded parameter cannot cloak another behind a semicolon": {
			attack: poisonRequest{target: "/q?id=1&utm_x=1;callback=EVIL"},
			clean:  poisonRequest{target: "/q?id=1"},
		},
		"reordered duplicate parameters are not merged by sorting": {
			attack: poisonRequest{target: "/sorted?a=2&a=1"},
			clean:  poisonRequest{target: "/sorted?a=1&a=2"},
		},
		"the host's case cannot change what the origin is told": {
			attack: poisonRequest{target: "/page", host: "EXAMPLE.com"},
			clean:  poisonRequest{target: "/page", host: "example.com"},
		},
		"a default port cannot change what the origin is told": {
			attack: poisonRequest{target: "/page", host: "example.com:80"},
			clean:  poisonRequest{target: "/page", host: "example.com"},
		},
		"an unlisted header cannot reach the origin of a strict tier": {
			config: "requestHeaders: {mode: strict}",
			attack: poisonRequest{target: "/page", header: []string{"X-Debug", "EVIL"}},
			clean:  poisonRequest{target: "/page"},
		},
		"a scheme header on a no-cache request cannot replace a hot entry with a redirect": {
			prime:  true,
			attack: poisonRequest{target: "/page", header: []string{"Cache-Control", "no-cache", "X-Forwarded-Proto", "https", "X-Forwarded-Scheme", "http"}},
			clean:  poisonRequest{target: "/page", header: []string{"X-Forwarded-Proto", "https"}},
		},
		"X-Forwarded-Ssl cannot change the scheme of the stored page": {
			attack: poisonRequest{target: "/page", header: []string{"X-Forwarded-Ssl", "on"}},
			clean:  poisonRequest{target: "/page"},
		},
		"Front-End-Https cannot change the scheme of the stored page": {
			attack: poisonRequest{target: "/page", header: []string{"Front-End-Https", "on"}},
			clean:  poisonRequest{target: "/page"},
		},
	}
	for _, h := range schemeOverrides {
		cases[h+" cannot store a redirect loop"] = poisonCase{
			attack: poisonRequest{target: "/page", header: []string{"X-Forwarded-Proto", "https", h, "http"}},
			clean:  poisonRequest{target: "/page", header: []string{"X-Forwarded-Proto", "https"}},
		}
	}
	for _, h := range routeOverrides {
		cases[h+" cannot store another route's page"] = poisonCase{
			attack: poisonRequest{target: "/page", header: []string{h, "/admin"}},
			clean:  poisonRequest{target: "/page"},
		}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := poisonConfig
			if c.config != "" {
				cfg += c.config + "\n"
			}
			untouched := newFixture(t, cfg, reflectingOrigin).sendPoison(c.clean)

			f := newFixture(t, cfg, reflectingOrigin)
			if c.prime {
				f.sendPoison(c.clean)
			}
			f.sendPoison(c.attack)
			got := f.sendPoison(c.clean)
			if got.status != untouched.status || got.body != untouched.body ||
				got.header.Get("Location") != untouched.header.Get("Location") {
				t.Fatalf("after the attack the clean request got %d %q (Location %q, X-Cache %q),\nwithout it %d %q (Location %q)",
					got.status, got.body, got.header.Get("Location"), got.xcache(),
					untouched.status, untouched.body, untouched.header.Get("Location"))
			}
		})
	}
}

func TestAGetOrHeadWithABodyBypassesTheCache(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "x"))
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		req, err := http.NewRequest(method, f.srv.URL+"/b", strings.NewReader("q=1"))
		if err != nil {
			t.Fatal(err)
		}
		expect(t, f.send(req), 200, "BYPASS")
	}
	expect(t, f.get("/b"), 200, "MISS")
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/b", strings.NewReader("q=1"))
	expect(t, f.send(req), 200, "BYPASS") // never served from the cache either
	if n := f.origin.count(); n != 4 {
		t.Fatalf("origin saw %d requests, want 4", n)
	}
}

func TestRulesMatchThePathTheOriginRoutes(t *testing.T) {
	cfg := `
rules:
- name: private
  match: {pathPrefix: /private/}
  bypass: true
`
	f := newFixture(t, cfg, cacheFor("max-age=60", "x"))
	for _, target := range []string{"/public/..%2fprivate/x", "/public/%2e%2e/private/x", "//private/x", "/public/..;/private/x"} {
		expect(t, f.get(target), 200, "BYPASS")
		if got := f.origin.last().URL.EscapedPath(); got != target {
			t.Fatalf("the origin got path %q, want %q as received", got, target)
		}
	}
}

func TestTheOriginGetsTheHostTheKeyHolds(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "x"))
	expect(t, f.get("/h", "Host", "Shop.Example.COM.:80"), 200, "MISS")
	got := f.origin.last()
	if got.Host != "shop.example.com" || got.Header.Get("X-Forwarded-Host") != "shop.example.com" {
		t.Fatalf("origin got Host %q, X-Forwarded-Host %q; want shop.example.com for both", got.Host, got.Header.Get("X-Forwarded-Host"))
	}
	expect(t, f.get("/h", "Host", "shop.example.com"), 200, "HIT; layer=l1")
}

func TestARuleTTLDoesNotOverrideNoCache(t *testing.T) {
	cfg := `
rules:
- name: pinned
  match: {path: /p}
  ttl: 1h
`
	f := newFixture(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "x")
	})
	expect(t, f.get("/p"), 200, "MISS")
	expect(t, f.get("/p"), 200, "REVALIDATED")
}

func TestARuleTTLAppliesToCredentialedRequestsOnlyWhenTheRuleOptsIn(t *testing.T) {
	for _, optIn := range []bool{false, true} {
		cfg := fmt.Sprintf(`
rules:
- name: assets
  match: {pathPrefix: /assets/}
  ttl: 1h
  ttlWithCredentials: %t
`, optIn)
		f := newFixture(t, cfg, cacheFor("", "x"))
		for _, h := range [][]string{{"Cookie", "session=1"}, {"Authorization", "Bearer t"}} {
			target := "/assets/" + h[0]
			expect(t, f.get(target, h...), 200, "MISS")
			want := "MISS"
			if optIn && h[0] == "Cookie" {
				// Authorization still needs public, s-maxage or
				// must-revalidate from the origin (RFC 9111 §3.5).
				want = "HIT; layer=l1"
			}
			expect(t, f.get(target), 200, want)
		}
	}
}

func TestStrictRequestHeadersForwardOnlyTheAllowlistOnFills(t *testing.T) {
	cfg := `
requestHeaders: {mode: strict, allow: [Accept, X-Allowed, X-Forwarded-Scheme]}
rules:
- name: tenant
  match: {pathPrefix: /t/}
  cacheKey: {headers: [X-Tenant]}
- name: pass
  match: {pathPrefix: /pass/}
  bypass: true
`
	f := newFixture(t, cfg, cacheFor("max-age=60", "x"))
	hdr := []string{"Accept", "text/html", "X-Allowed", "1", "X-Tenant", "acme", "X-Other", "1",
		"Cookie", "s=1", "X-Forwarded-Scheme", "http", "X-Forwarded-For", "10.0.0.1"}
	expect(t, f.get("/t/a", hdr...), 200, "MISS")
	got := f.origin.last().Header
	for _, k := range []string{"Accept", "X-Allowed", "X-Tenant"} {
		if got.Get(k) == "" {
			t.Errorf("%s (allowed or keyed) did not reach the origin", k)
		}
	}
	for _, k := range []string{"X-Other", "Cookie", "X-Forwarded-Scheme"} {
		if got.Get(k) != "" {
			t.Errorf("%s reached the origin of a strict fill", k)
		}
	}
	if xff := got.Get("X-Forwarded-For"); xff != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q, want only the peer", xff)
	}
	expect(t, f.get("/pass/a", hdr...), 200, "BYPASS")
	if f.origin.last().Header.Get("X-Other") == "" {
		t.Error("a request that is never stored lost its headers")
	}
}

func TestStrictFillsForwardTheVaryHeadersOnceTheMarkerNamesThem(t *testing.T) {
	f := newFixture(t, "requestHeaders: {mode: strict}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "X-Variant")
		fmt.Fprintf(w, "variant=%s", r.Header.Get("X-Variant"))
	})
	// The first fill does not know the Vary yet: X-Variant is withheld, so
	// the answer is stored as the variant without it.
	expect(t, f.get("/v", "X-Variant", "a"), 200, "MISS")
	if r := f.get("/v"); r.xcache() != "HIT; layer=l1" || r.body != "variant=" {
		t.Fatalf("without X-Variant: %q %q, want a hit of variant=", r.xcache(), r.body)
	}
	// Now the marker names it: it is forwarded and keyed.
	if r := f.get("/v", "X-Variant", "a"); r.xcache() != "MISS" || r.body != "variant=a" {
		t.Fatalf("X-Variant a: %q %q, want a miss of variant=a", r.xcache(), r.body)
	}
	if r := f.get("/v", "X-Variant", "a"); r.xcache() != "HIT; layer=l1" || r.body != "variant=a" {
		t.Fatalf("X-Variant a again: %q %q, want a hit of variant=a", r.xcache(), r.body)
	}
}
