package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// cookieEcho answers with the Cookie field it received and no freshness
// of its own, as a page that personalises on whatever cookie it is sent
// and leaves the lifetime to the cache's rule would.
func cookieEcho(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain")
	_, _ = io.WriteString(w, "cookies="+strings.Join(r.Header.Values("Cookie"), "|"))
}

const ignoreAnalytics = `
defaults:
  ignoreCookies: ["@analytics", "consent_*"]
rules:
  - name: logged-in
    match: {pathPrefix: /account, cookies: [{name: session, present: true}]}
    bypass: true
  - name: lang
    match: {pathPrefix: /i18n/}
    ttl: 5m
    cacheKey: {cookies: [_lang]}
  - name: consent
    match: {pathPrefix: /consent/}
    cacheKey: {cookies: [consent_level]}
  - name: pages
    match: {pathPrefix: /}
    ttl: 5m
`

// originCookies is the Cookie field lines the origin received last.
func (f *fixture) originCookies() string {
	f.t.Helper()
	r := f.origin.last()
	if r == nil {
		f.t.Fatal("the origin was never asked")
	}
	return strings.Join(r.Header.Values("Cookie"), "|")
}

// Analytics cookies no longer make a request credentialed: the rule's ttl
// applies, and one stored copy serves every client whatever its analytics
// cookies; without the setting, the same requests are never stored.
func TestAnIgnoredCookieDoesNotDefeatCaching(t *testing.T) {
	for _, tc := range []struct {
		name, cfg       string
		second          string
		originRequests  int
		originSawCookie string
	}{
		{"ignored", ignoreAnalytics, "HIT; layer=l1", 1, ""},
		{"not ignored", "rules: [{name: pages, match: {pathPrefix: /}, ttl: 5m}]", "MISS", 2, "_gid=2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.cfg, cookieEcho)
			first := f.get("/page", "Cookie", "_ga=GA1.1.111.222; _gid=1")
			second := f.get("/page", "Cookie", "_ga=GA1.1.333.444; _gid=2; _fbp=fb.1.2.3")
			if first.xcache() != "MISS" || second.xcache() != tc.second || f.origin.count() != tc.originRequests {
				t.Fatalf("got %q then %q with %d origin requests, want MISS then %q with %d",
					first.xcache(), second.xcache(), f.origin.count(), tc.second, tc.originRequests)
			}
			if got := f.origin.last().Header.Get("Cookie"); !strings.Contains(got, tc.originSawCookie) || (tc.originSawCookie == "" && got != "") {
				t.Fatalf("the origin saw Cookie %q, want %q", got, tc.originSawCookie)
			}
		})
	}
}

// On a cacheable request the origin receives only the cookies the cache
// kept, in one line, whatever the spelling of the client's Cookie field;
// a kept cookie still makes the request credentialed (no rule ttl).
func TestAnOriginNeverSeesAnIgnoredCookieOnACacheableRequest(t *testing.T) {
	f := newFixture(t, ignoreAnalytics, cookieEcho)
	for _, tc := range []struct {
		name   string
		hdr    []string
		origin string // the Cookie lines the origin saw
		xcache string
	}{
		{"two Cookie lines", []string{"Cookie", "_ga=1; theme=dark", "Cookie", "_gid=2; lang=fr"}, "theme=dark; lang=fr", "MISS"},
		{"spaces, tabs and empty pairs", []string{"Cookie", " ;_ga=1 ;; \ttheme=dark ; ;"}, "theme=dark", "MISS"},
		{"a quoted value", []string{"Cookie", `_ga="GA1.1.1"; theme="dark"`}, `theme="dark"`, "MISS"},
		{"a glob of the tier", []string{"Cookie", "consent_v2=yes; _hjSession_123=x"}, "", "MISS"},
		{"only empty pairs and ignored cookies", []string{"Cookie", "; _ga=1;;"}, "", "HIT; layer=l1"},
		// A ',' is no separator here: the pair named _ga goes whole, so
		// what an origin that splits at ',' would read is not sent.
		{"a comma inside an ignored pair", []string{"Cookie", "_ga=1,session=alice"}, "", "HIT; layer=l1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.get("/p", tc.hdr...)
			if r.xcache() != tc.xcache || f.originCookies() != tc.origin || r.body != "cookies="+tc.origin {
				t.Fatalf("got %q, body %q, origin saw %q; want %q, origin seeing %q", r.xcache(), r.body, f.originCookies(), tc.xcache, tc.origin)
			}
		})
	}
	// The header name's case is the client's: "cookie" is the same field.
	status, body := rawGet(t, f.srv.Listener.Addr().String(), "GET /p2 HTTP/1.1\r\nHost: x\r\ncookie: _ga=1; theme=dark\r\nConnection: close\r\n\r\n")
	if status != 200 || f.originCookies() != "theme=dark" || !strings.HasSuffix(body, "cookies=theme=dark") {
		t.Fatalf("lower-case cookie field: %d %q, origin saw %q", status, body, f.originCookies())
	}
}

// Session cookies keep their protection beside ignored ones: a bypass
// condition still sees the session (and the passed request keeps every
// cookie, analytics too, for the origin), and a session cookie on a
// cached path still makes the request credentialed, so the personalised
// answer is never stored for others.
func TestASessionCookieStillProtectsBesideIgnoredOnes(t *testing.T) {
	f := newFixture(t, ignoreAnalytics, cookieEcho)
	r := f.get("/account/me", "Cookie", "_ga=1; session=alice")
	if r.xcache() != "BYPASS" || f.originCookies() != "_ga=1; session=alice" {
		t.Fatalf("a bypassed session: %q, origin saw %q; want BYPASS with every cookie", r.xcache(), f.originCookies())
	}
	r = f.get("/home", "Cookie", "_ga=1; session=alice")
	if r.xcache() != "MISS" || r.body != "cookies=session=alice" {
		t.Fatalf("a session on a cached path: %q %q", r.xcache(), r.body)
	}
	r = f.get("/home", "Cookie", "_ga=2")
	if r.xcache() != "MISS" || r.body != "cookies=" {
		t.Fatalf("an anonymous client after a session: %q %q, want MISS with the anonymous page", r.xcache(), r.body)
	}
	// As before ignoreCookies: a stored page may serve a request with a
	// session (the bypass rule is what keeps sessions off stored pages);
	// what is stored is never a session's.
	r = f.get("/home", "Cookie", "_ga=2; session=bob")
	if r.body != "cookies=" {
		t.Fatalf("another session after the anonymous page was stored: %q %q", r.xcache(), r.body)
	}
	// Authorization too.
	// Authorization too: its answer is not stored under the rule's ttl.
	for range 2 {
		r = f.get("/auth", "Authorization", "Bearer x", "Cookie", "_ga=3")
		if r.xcache() != "MISS" || f.origin.last().Header.Get("Authorization") != "Bearer x" {
			t.Fatalf("Authorization beside an ignored cookie: %q", r.xcache())
		}
	}
}

// Requests the cache never looks up keep their cookies: an unsafe method
// and a GET with a precondition reach the origin as the client sent them.
func TestPassedRequestsKeepIgnoredCookies(t *testing.T) {
	f := newFixture(t, ignoreAnalytics, cookieEcho)
	for _, tc := range []struct {
		method string
		hdr    []string
	}{
		{"POST", []string{"Cookie", "_ga=1; theme=dark"}},
		{"DELETE", []string{"Cookie", "_ga=1; theme=dark"}},
		{"GET", []string{"Cookie", "_ga=1; theme=dark", "If-Match", `"x"`}},
	} {
		f.do(tc.method, "/form", tc.hdr...)
		if got := f.originCookies(); got != "_ga=1; theme=dark" {
			t.Fatalf("%s %v: the origin saw %q, want every cookie", tc.method, tc.hdr, got)
		}
	}
}

// A cookie a rule keys is never ignored, even where a glob of the tier
// covers it (the preset's "_ga_*" is not asked to cover "_lang", but
// "consent_*" would cover a keyed "consent_level"): the key and the
// origin keep it. And an attacker's cookie named like an analytics cookie
// is removed whatever it carries, so an origin that reads it never sees it.
func TestKeyedCookiesStayAndLookalikesGo(t *testing.T) {
	f := newFixture(t, ignoreAnalytics, cookieEcho)
	fr := f.get("/i18n/x", "Cookie", "_ga=1; _lang=fr")
	de := f.get("/i18n/x", "Cookie", "_ga=2; _lang=de")
	if fr.body != "cookies=_lang=fr" || de.body != "cookies=_lang=de" || de.xcache() != "MISS" {
		t.Fatalf("keyed _lang: %q, %q (%s)", fr.body, de.body, de.xcache())
	}
	if again := f.get("/i18n/x", "Cookie", "_lang=fr; _gid=9"); again.body != "cookies=_lang=fr" {
		t.Fatalf("keyed _lang again: %q", again.body)
	}
	f.get("/consent/x", "Cookie", "consent_level=all; consent_other=1")
	if got := f.originCookies(); got != "consent_level=all" {
		t.Fatalf("a keyed cookie under an ignored glob: the origin saw %q, want consent_level only", got)
	}
	// The attacker's "_ga" carries a session value: the origin never
	// reads it, and the stored page is the anonymous one.
	f.get("/account/x", "Cookie", "_ga=session-of-alice")
	if got := f.originCookies(); got != "" {
		t.Fatalf("a lookalike analytics cookie reached the origin on a cacheable request: %q", got)
	}
}
