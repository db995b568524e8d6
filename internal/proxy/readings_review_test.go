package proxy

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Found by an attacker review of the issue 26 fix; each test failed
// before its fix.

// lenientUnescape decodes each valid %XX escape of p and keeps a '%' not
// followed by two hex digits as it is, as Python's urllib.parse.unquote
// and PHP's urldecode do (written here independently of originview).
func lenientUnescape(p string) string {
	hex := func(c byte) (byte, bool) {
		switch {
		case '0' <= c && c <= '9':
			return c - '0', true
		case 'a' <= c && c <= 'f':
			return c - 'a' + 10, true
		case 'A' <= c && c <= 'F':
			return c - 'A' + 10, true
		}
		return 0, false
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) {
			h, ok1 := hex(p[i+1])
			l, ok2 := hex(p[i+2])
			if ok1 && ok2 {
				b.WriteByte(h<<4 | l)
				i += 2
				continue
			}
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// An application that decodes again a path its server already decoded
// usually does it leniently (Python's unquote, PHP's urldecode): an
// invalid escape left by the first decoding ("%25zz" is "%zz") does not
// stop it from decoding the "%2f" next to it. The sidecar's second
// decoding was strict: one invalid escape dropped the whole twice-decoded
// reading, so "/static/x%25zz/..%252f..%252faccount/y" was agreed to be
// under /static/ while such an origin serves /account/y, and a victim's
// account page was stored under the static rule's ttlWithCredentials.
func TestAnInvalidEscapeCannotHideTheTwiceDecodedReading(t *testing.T) {
	lenientTwice := pathReader{"lenient twice", func(raw string) string {
		return cleanSlash(lenientUnescape(unescapeOnce(raw)))
	}}
	for _, target := range []string{
		"/static/x%25zz/..%252f..%252faccount/y",
		"/static/%25/..%252f..%252faccount/y",
		"/static/x/..%252f..%252faccount/y%25",
	} {
		t.Run(target, func(t *testing.T) {
			checkReadingCase(t, readingTiers["static with credentials"], lenientTwice, exactHeader,
				readingCase{target, []string{"Cookie: session=victim"}})
		})
	}
}

// An absolute-form target without a path ("GET http://example.com")
// reaches the origin as "/", but rules were matched on the empty path, so
// a rule written for "/..." (the docs example's logged-in bypass) did not
// apply: a victim's personal page that the origin marks max-age=60 was
// stored. And an opaque target ("GET http:x") has no path either: it was
// keyed as the empty path, so any client could read (or, before an
// origin that answers such a target, fill) that entry.
func TestAnAbsoluteFormTargetIsMatchedOnThePathTheOriginReceives(t *testing.T) {
	f := newFixture(t, readingTiers["docs example"], func(w http.ResponseWriter, r *http.Request) {
		user := "anonymous"
		if c, err := r.Cookie("session"); err == nil {
			user = c.Value
		}
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "home of %s at %s", user, r.RequestURI)
	})
	addr := f.srv.Listener.Addr().String()
	rawTarget(t, addr, "http://example.com", []string{"Cookie: session=victim"})
	for _, target := range []string{"http://example.com", "/", "http:x", "http:example.com"} {
		if r := rawTarget(t, addr, target, nil); strings.Contains(r.body, "victim") {
			t.Fatalf("GET %s without a cookie got %q (X-Cache %q): the victim's page", target, r.body, r.xcache())
		}
	}
	// The origin reads both as "/": one entry.
	rawTarget(t, addr, "http://example.com", nil)
	if r := rawTarget(t, addr, "/", nil); r.xcache() != "HIT; layer=l1" || r.body != "home of anonymous at /" {
		t.Fatalf("GET / after GET http://example.com: %q %q, want a hit of the same entry", r.xcache(), r.body)
	}
	// An opaque target is no path any rule describes: never cached.
	for range 2 {
		if r := rawTarget(t, addr, "http:x?a", nil); r.xcache() != "BYPASS" {
			t.Fatalf("GET http:x?a: X-Cache %q, want BYPASS", r.xcache())
		}
	}
}

// oddPath passes uncached a path whose decoding holds a control
// character, '?' or '#' (origins cut the path there), but it looked at the
// path decoded once only, while the readings assume origins that decode
// twice. "/account/x%253f.css" is "/account/x?.css" to such an origin,
// that is "/account/x": under a rule for "\.css$" that stores
// credentialed requests, a victim's account page was stored and served
// to anyone.
func TestATwiceEncodedCutCannotChooseTheRule(t *testing.T) {
	tier := `
l1: {maxSize: 16Mi, shards: 4}
rules:
- name: styles
  match: {regex: '\.css$'}
  ttl: 24h
  ttlWithCredentials: true
`
	cutTwice := pathReader{"twice, cut", func(raw string) string {
		p := unescapeOnce(unescapeOnce(raw))
		if i := strings.IndexAny(p, "?#\x00"); i >= 0 {
			p = p[:i]
		}
		return cleanSlash(p)
	}}
	for _, target := range []string{"/account/x%253f.css", "/account/x%2523.css", "/account/x%2500.css"} {
		t.Run(target, func(t *testing.T) {
			checkReadingCase(t, tier, cutTwice, exactHeader, readingCase{target, []string{"Cookie: session=victim"}})
		})
	}
}
