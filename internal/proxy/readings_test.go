package proxy

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// The cache decides on exactly what the origin will see. These tests run
// requests whose path or header names origins read in different ways
// through the sidecar, in front of origins modelled on each common way of
// reading them, and check that no request makes the cache give another
// client something other than what a cache that never saw it gives.

// pathReader is how one kind of origin reads a request path, written
// independently of package originview (which the sidecar uses), from the
// frameworks' documented behaviour.
type pathReader struct {
	name string
	read func(raw string) string
}

var pathReaders = []pathReader{
	// Express, the Rack/Rails router, catch-all routers: the raw path.
	{"raw", func(raw string) string { return raw }},
	// A router behind a server that decodes without cleaning.
	{"decoded", func(raw string) string { return unescapeOnce(raw) }},
	// nginx and Go's ServeMux: decoded, then dot-segments and repeated
	// slashes resolved.
	{"nginx", func(raw string) string { return cleanSlash(unescapeOnce(raw)) }},
	// IIS: decoded, '\' is '/', cleaned.
	{"iis", func(raw string) string { return cleanSlash(strings.ReplaceAll(unescapeOnce(raw), `\`, "/")) }},
	// Servlet containers: ";parameters" removed from each segment, then
	// decoded and cleaned.
	{"servlet", func(raw string) string {
		segs := strings.Split(raw, "/")
		for i, s := range segs {
			s, _, _ = strings.Cut(s, ";")
			segs[i] = s
		}
		return cleanSlash(unescapeOnce(strings.Join(segs, "/")))
	}},
	// An application that decodes a path its server already decoded.
	{"twice", func(raw string) string {
		return cleanSlash(strings.ReplaceAll(unescapeOnce(unescapeOnce(raw)), `\`, "/"))
	}},
}

func unescapeOnce(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}

// cleanSlash is path.Clean keeping a trailing slash.
func cleanSlash(p string) string {
	c := path.Clean("/" + p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c
}

// headerReader is how an origin reads a request header by its dashed
// name: Go and most servers by the exact (canonical) name; Rack, WSGI, PHP
// and CGI gateways by a name in which '-', '_' and '.' are one and case
// does not count, all such fields joined.
type headerReader func(h http.Header, name string) string

func exactHeader(h http.Header, name string) string { return strings.Join(h.Values(name), ", ") }

func rackHeader(h http.Header, name string) string {
	fold := func(s string) string {
		return strings.NewReplacer("-", "_", ".", "_").Replace(strings.ToUpper(s))
	}
	var vs []string
	for k, v := range h {
		if fold(k) == fold(name) {
			vs = append(vs, v...)
		}
	}
	slices.Sort(vs) // Go's map order is random: make the reading stable
	return strings.Join(vs, ", ")
}

// modelOrigin answers as an application that routes on its reading of
// the path and reads headers its way:
//   - a scheme override of "http" gets a cacheable redirect to https
//     (Rack's force_ssl);
//   - /account/ is a personal page without Cache-Control;
//   - /profile/ is a personal page the application marks max-age=60 (a
//     common mistake the logged-in bypass rule exists for);
//   - /t/ answers per X-Tenant;
//   - /static/ is a file without Cache-Control (the rule's ttl applies);
//   - anything else varies on Accept-Language.
func modelOrigin(pr pathReader, hr headerReader) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		raw, _, _ := strings.Cut(r.RequestURI, "?")
		route := pr.read(raw)
		user := "anonymous"
		if c, err := r.Cookie("session"); err == nil {
			user = c.Value
		}
		if hr(r.Header, "X-Forwarded-Scheme") == "http" {
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Location", "https://"+r.Host+route)
			w.WriteHeader(http.StatusMovedPermanently)
			return
		}
		switch {
		case strings.HasPrefix(route, "/account/"):
			fmt.Fprintf(w, "account of %s", user)
		case strings.HasPrefix(route, "/profile/"):
			w.Header().Set("Cache-Control", "max-age=60")
			fmt.Fprintf(w, "profile of %s", user)
		case strings.HasPrefix(route, "/t/"):
			w.Header().Set("Cache-Control", "max-age=600")
			fmt.Fprintf(w, "tenant %q", hr(r.Header, "X-Tenant"))
		case strings.HasPrefix(route, "/static/"):
			fmt.Fprintf(w, "file %s", route)
		default:
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Vary", "Accept-Language")
			fmt.Fprintf(w, "page %s lang %q", route, hr(r.Header, "Accept-Language"))
		}
	}
}

// readingTiers are the tiers the cases run under: docs/caching.md's
// example (a static rule with a ttl before a logged-in bypass), and the
// same with a static rule that stores credentialed requests
// (ttlWithCredentials), as the docs recommend for paths that never depend
// on who asks. Both bypass logged-in requests elsewhere, so that a
// personal page the origin marks cacheable (/profile/) is a leak only
// when a rule is chosen on a reading the origin does not share.
var readingTiers = map[string]string{
	"docs example":            readingTier(""),
	"static with credentials": readingTier("\n  ttlWithCredentials: true"),
}

// readingTier is the tier with extra added to the static rule.
func readingTier(extra string) string {
	return `
l1: {maxSize: 16Mi, shards: 4}
rules:
- name: static
  match: {pathPrefix: /static/}
  ttl: 24h` + extra + `
- name: logged-in
  match: {pathPrefix: /, cookies: [{name: session, present: true}]}
  bypass: true
- name: tenant
  match: {pathPrefix: /t/}
  cacheKey: {headers: [X-Tenant]}
`
}

// rawTarget sends "GET target HTTP/1.1" with the header lines given,
// byte for byte (a client library would clean or escape the target), and
// reads the answer.
func rawTarget(t *testing.T, addr, target string, lines []string) response {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n", target)
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	b.WriteString("\r\n")
	res, body := rawExchange(t, addr, b.String(), false)
	return response{res.StatusCode, res.Header, body}
}

// readingCase is one attack: a request (target and header lines), then
// the clean requests whose answers it must not change.
type readingCase struct {
	target string
	lines  []string
}

// cleanProbes are requests a victim sends after the attack (and, in one
// round, before it too, so that the attack meets hot entries).
var cleanProbes = []string{"/static/x.css", "/account/x.css", "/profile/x.css", "/t/x", "/page/x"}

// checkReadingCase runs c through a cache in front of the origin pr/hr
// under tier, and fails when a clean request (the attack's own target
// without its header lines, or a probe) gets another answer than from a
// cache that never saw the attack.
func checkReadingCase(t *testing.T, tier string, pr pathReader, hr headerReader, c readingCase) {
	t.Helper()
	probes := append([]string{c.target}, cleanProbes...)
	for _, prime := range []bool{false, true} {
		checkReadingCasePrimed(t, tier, pr, hr, c, probes, prime)
	}
}

// checkReadingCasePrimed is checkReadingCase with the probes sent once
// before the attack (prime: it meets hot entries) or not (it meets none).
func checkReadingCasePrimed(t *testing.T, tier string, pr pathReader, hr headerReader, c readingCase, probes []string, prime bool) {
	t.Helper()
	answers := func(attack bool) []response {
		f := newFixture(t, tier, modelOrigin(pr, hr))
		addr := f.srv.Listener.Addr().String()
		for _, p := range cleanProbes {
			if prime {
				rawTarget(t, addr, p, nil)
			}
		}
		if attack {
			rawTarget(t, addr, c.target, c.lines)
		}
		var out []response
		for _, p := range probes {
			out = append(out, rawTarget(t, addr, p, nil))
		}
		return out
	}
	untouched, got := answers(false), answers(true)
	for i, p := range probes {
		u, g := untouched[i], got[i]
		if g.status != u.status || g.body != u.body || g.header.Get("Location") != u.header.Get("Location") {
			t.Fatalf("origin %s (primed %v): after GET %s %q, the clean GET %s got %d %q (X-Cache %q);\na cache that never saw it gives %d %q",
				pr.name, prime, c.target, c.lines, p, g.status, g.body, g.xcache(), u.status, u.body)
		}
	}
}

// TestPathReadingsCannotChooseTheRule holds the attacks that were
// reproduced against the sidecar before it consulted every reading of a
// path: a rule chosen on the decoded, cleaned path stored a page that
// origins routing the raw path serve from /account/.
func TestPathReadingsCannotChooseTheRule(t *testing.T) {
	raw := pathReaders[0]
	cases := map[string]struct {
		tier   string
		target string
	}{
		"an encoded slash under the docs example":                {"docs example", "/profile/..%2fstatic/x.css"},
		"an encoded slash under ttlWithCredentials":              {"static with credentials", "/account/..%2fstatic/x.css"},
		"an encoded backslash under ttlWithCredentials":          {"static with credentials", "/account/..%5cstatic/x.css"},
		"encoded dots and slash under ttlWithCredentials":        {"static with credentials", "/account/%2e%2e%2fstatic/x.css"},
		"a parameter and encoded slash under ttlWithCredentials": {"static with credentials", "/account/;/..%2fstatic/x.css"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			checkReadingCase(t, readingTiers[tc.tier], raw, exactHeader, readingCase{tc.target, []string{"Cookie: session=victim"}})
		})
	}
}

// TestUnderscoredHeaderNamesCannotDecideASharedEntry holds the attacks
// through header names spelt with '_' that Rack-style gateways read as the
// dashed name.
func TestUnderscoredHeaderNamesCannotDecideASharedEntry(t *testing.T) {
	nginx := pathReaders[2]
	cases := map[string]readingCase{
		"a scheme override spelt with '_' on a no-cache request cannot store a redirect over a hot entry": {
			"/page/x", []string{"X_Forwarded_Scheme: http", "Cache-Control: no-cache"}},
		"a keyed header spelt with '_' cannot fill the entry of requests without it": {
			"/t/x", []string{"X_Tenant: EVIL"}},
		"a Vary header spelt with '_' cannot fill the variant of requests without it": {
			"/page/x", []string{"Accept_Language: EVIL"}},
		"a Vary header spelt with '.' cannot fill the variant of requests without it": {
			"/page/x", []string{"Accept.Language: EVIL"}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			checkReadingCase(t, readingTiers["docs example"], nginx, rackHeader, c)
		})
	}
}

func TestAnUnderscoredNameTheTierAllowsReachesTheOriginAndIsKeyed(t *testing.T) {
	cfg := "requestHeaders: {allowUnderscoredNames: [X_Api_Version]}"
	f := newFixture(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "v=%q other=%q", rackHeader(r.Header, "X-Api-Version"), rackHeader(r.Header, "X-Other"))
	})
	addr := f.srv.Listener.Addr().String()
	a := rawTarget(t, addr, "/v", []string{"X_Api_Version: 2", "X_Other: EVIL"})
	if a.body != `v="2" other=""` {
		t.Fatalf("first fill: %q, want the allowed name forwarded and the other dropped", a.body)
	}
	if b := rawTarget(t, addr, "/v", nil); b.body != `v="" other=""` || b.xcache() != "MISS" {
		t.Fatalf("without the allowed name: %q %q, want a miss of its own (the name is keyed)", b.xcache(), b.body)
	}
	if c := rawTarget(t, addr, "/v", []string{"X_Api_Version: 2"}); c.xcache() != "HIT; layer=l1" || c.body != a.body {
		t.Fatalf("the allowed name again: %q %q, want a hit of %q", c.xcache(), c.body, a.body)
	}
}

func TestAnAmbiguousPathBypassesAndSaysWhy(t *testing.T) {
	f := newFixture(t, readingTiers["docs example"], cacheFor("max-age=60", "x"))
	addr := f.srv.Listener.Addr().String()
	before := testCounter(f.px.m.Ambiguous.WithLabelValues("path"))
	for range 2 {
		r := rawTarget(t, addr, "/x/..%2fstatic/y.css", nil)
		if r.xcache() != "BYPASS" || !strings.Contains(r.header.Get("Cache-Status"), `detail=ambiguous-path`) {
			t.Fatalf("X-Cache %q, Cache-Status %q: want a bypass with detail ambiguous-path", r.xcache(), r.header.Get("Cache-Status"))
		}
		if got := f.origin.last().RequestURI; got != "/x/..%2fstatic/y.css" {
			t.Fatalf("the origin got %q, want the target untouched", got)
		}
	}
	if n := testCounter(f.px.m.Ambiguous.WithLabelValues("path")) - before; n != 2 {
		t.Fatalf("tiercache_ambiguous_requests_total{what=path} grew by %v, want 2", n)
	}
	// A canonical path and one whose readings agree are cached as before.
	for _, p := range []string{"/static/y.css", "/static/a%20b.css", "/static/a/../b.css"} {
		rawTarget(t, addr, p, nil)
		if r := rawTarget(t, addr, p, nil); r.xcache() != "HIT; layer=l1" {
			t.Fatalf("%s: X-Cache %q, want a hit", p, r.xcache())
		}
	}
}

// readingPieces are what generated attacks are made of: every way of
// writing a separator or a dot-segment that some origin reads differently,
// hosts of absolute-form targets, and header lines spelt as gateways fold
// them, repeated or with no-cache.
var (
	readingPrefixes = []string{"/static", "/account", "/profile", "/t", "/page", ""}
	readingSeps     = []string{"/", "%2f", "%2F", "%5c", "%5C", `\`, "//", "%252f", ";/", "/;x=1/"}
	readingDots     = []string{"..", ".", "%2e%2e", "%2E%2e", ".%2e", "%2e", "%252e%252e", "..;", "..;x=1", "x"}
	readingHosts    = []string{"http://example.com", "http://EXAMPLE.com", "http://example.com.:80", "http://Example.COM:80"}
	readingHeaders  = [][]string{
		{"Cookie: session=victim"},
		{"X_Tenant: EVIL"}, {"x.tenant: EVIL"}, {"X-Tenant: a", "X_Tenant: EVIL"},
		{"X_Forwarded_Scheme: http", "Cache-Control: no-cache"},
		{"X.Forwarded.Scheme: http", "Cache-Control: no-cache"},
		{"Accept_Language: EVIL"}, {"accept.language: EVIL"},
		{"Cache-Control: no-cache"},
		{"X-Forwarded-Scheme: http"},
	}
)

// generateReadingCase makes one attack from rng: prefix, separator, dot
// segment, separator, prefix, a file name, and some header lines.
func generateReadingCase(rng *rand.Rand) readingCase {
	pick := func(s []string) string { return s[rng.IntN(len(s))] }
	target := pick(readingPrefixes) + pick(readingSeps) + pick(readingDots) + pick(readingSeps) +
		strings.TrimPrefix(pick(readingPrefixes), "/") + pick(readingSeps) + "x.css"
	if !strings.HasPrefix(target, "/") {
		target = "/" + target
	}
	if rng.IntN(4) == 0 {
		// The absolute form, with the host spelt as clients may: its host
		// replaces the Host field, and the key and the origin get it
		// normalized.
		target = pick(readingHosts) + target
	}
	var lines []string
	if rng.IntN(2) == 0 {
		// A victim's request: what a path attack would leak.
		lines = append(lines, "Cookie: session=victim")
	}
	for range rng.IntN(3) {
		lines = append(lines, readingHeaders[rng.IntN(len(readingHeaders))]...)
	}
	return readingCase{target, lines}
}

// TestNoReadingOfARequestDecidesWhatAnotherClientGets is the differential
// test: seeded, generated attacks mixing every path and header-name
// ambiguity above, each through the sidecar in front of every origin model
// (path readers × header readers) under each tier, checked against a
// cache that never saw the attack. Bounded: a fixed number of cases, and
// it stops early (passing what it ran) past its time budget.
func TestNoReadingOfARequestDecidesWhatAnotherClientGets(t *testing.T) {
	const cases = 24
	deadline := time.Now().Add(60 * time.Second)
	rng := rand.New(rand.NewPCG(26, 1))
	headerReaders := map[string]headerReader{"exact": exactHeader, "rack": rackHeader}
	ran := 0
	for i := range cases {
		c := generateReadingCase(rng)
		for _, tierName := range []string{"docs example", "static with credentials"} {
			for _, pr := range pathReaders {
				for hrName, hr := range headerReaders {
					if time.Now().After(deadline) {
						t.Logf("time budget spent after %d runs", ran)
						return
					}
					t.Run(fmt.Sprintf("%d/%s/%s/%s", i, tierName, pr.name, hrName), func(t *testing.T) {
						checkReadingCase(t, readingTiers[tierName], pr, hr, c)
					})
					ran++
				}
			}
		}
	}
}

// FuzzReadingsAgreeWithEveryOrigin checks the rule choice itself, without
// a network: whenever the sidecar finds every reading of a target agreeing
// on a rule (Compiled.MatchRequest), each origin model's own reading of
// that target selects the same rule.
func FuzzReadingsAgreeWithEveryOrigin(f *testing.F) {
	rng := rand.New(rand.NewPCG(26, 2))
	for range 64 {
		f.Add(generateReadingCase(rng).target)
	}
	f.Add("/account/..%2fstatic/x.css")
	f.Add("/static/%252e%252e/account/x")
	cfg, err := tierconfig.Parse([]byte(readingTiers["static with credentials"]))
	if err != nil {
		f.Fatal(err)
	}
	cc, err := tierconfig.Compile(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, target string) {
		u, err := url.ParseRequestURI(target)
		if err != nil || u.Host != "" || !strings.HasPrefix(target, "/") || strings.ContainsAny(target, "?#") {
			return // net/http refuses it, or it is not a path
		}
		rule, agreed := cc.MatchRequest("", u.EscapedPath(), nil)
		if !agreed {
			return
		}
		for _, pr := range pathReaders {
			if got := cc.MatchReading("", pr.read(u.EscapedPath()), nil); got != rule {
				t.Fatalf("%q: every reading agreed on rule %s, but origin %s reads %q: rule %s",
					target, rule.Name, pr.name, pr.read(u.EscapedPath()), got.Name)
			}
		}
	})
}

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
