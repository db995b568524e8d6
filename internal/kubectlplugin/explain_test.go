package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// shopTier has rules of every kind: a bypass, a regex with a TTL and a
// query it shapes, a later rule that also matches CSS, keyed headers and
// cookies with their own lifetimes, an include list.
func shopTier() v1alpha1.CacheTierSpec {
	d := func(s string) *v1alpha1.Duration { v := v1alpha1.Duration(s); return &v }
	return v1alpha1.CacheTierSpec{
		Defaults: v1alpha1.DefaultsSpec{StaleIfError: "1h", NegativeTTL: "10s", FallbackTTL: "5m",
			StatusTTLs:    []v1alpha1.StatusTTLSpec{{Statuses: []int32{301, 302}, TTL: "1h"}},
			IgnoreCookies: []string{"_ga", "_gid"}},
		Rules: []v1alpha1.Rule{
			{Name: "api", Match: v1alpha1.Match{PathPrefix: "/api/"}, Bypass: true},
			{Name: "static", Match: v1alpha1.Match{Regex: `^/static/.*\.(css|js)$`}, TTL: "24h",
				CacheKey: v1alpha1.CacheKey{QueryExclude: []string{"utm_*"}, SortQuery: true}},
			{Name: "css", Match: v1alpha1.Match{Regex: `\.css$`}, TTL: "1h"},
			{Name: "home", Match: v1alpha1.Match{Path: "/home"}, MaxTTL: "1h", StaleWhileRevalidate: d("30s"),
				CacheKey: v1alpha1.CacheKey{Headers: []string{"Accept-Language"}, Cookies: []string{"session"}}},
			{Name: "products", Match: v1alpha1.Match{PathPrefix: "/products/"}, TTL: "10m", TTLWithCredentials: true,
				CacheKey: v1alpha1.CacheKey{QueryInclude: []string{"id", "page"}}},
		},
	}
}

func explainJSON(t *testing.T, r result) explanation {
	t.Helper()
	if r.err != nil {
		t.Fatalf("explain: %v (printed %s)", r.err, r.out)
	}
	var e explanation
	if err := json.Unmarshal([]byte(r.out), &e); err != nil {
		t.Fatalf("explain -o json printed %q: %v", r.out, err)
	}
	return e
}

func matching(e explanation) []string {
	var out []string
	for _, r := range e.Rules {
		if r.Matches {
			out = append(out, r.Name)
		}
	}
	return out
}

func TestExplainUsesTheSidecarsRulesAndKey(t *testing.T) {
	ns := namespace(t)
	createTier(t, ns, "shop", shopTier())

	cases := []struct {
		name    string
		url     string
		headers []string
		check   func(t *testing.T, e explanation)
	}{
		{
			name: "a path under a bypass rule bypasses the cache",
			url:  "https://shop.example/api/cart",
			check: func(t *testing.T, e explanation) {
				if e.Rule != "api" || !e.Bypass || !strings.Contains(e.Why, "rule api bypasses the cache") {
					t.Fatalf("rule %q bypass %v (%s), want api, bypassed", e.Rule, e.Bypass, e.Why)
				}
			},
		},
		{
			name:    "excluded parameters leave the key and the rest is sorted",
			url:     "https://shop.example/static/app.css?v=3&utm_source=mail&a=1",
			headers: []string{"X-Forwarded-Proto: https"},
			check: func(t *testing.T, e explanation) {
				k := e.Key
				if e.Rule != "static" || e.Bypass || k.KeyedQuery != "a=1&v=3" || k.Primary != "GET https://shop.example/static/app.css?a=1&v=3" ||
					!slices.Equal(k.Exclude, []string{"utm_*"}) || !k.Sorted || k.Query != "v=3&utm_source=mail&a=1" {
					t.Fatalf("rule %q key %+v, want static with the query a=1&v=3", e.Rule, k)
				}
				if e.Lifetimes.TTL != "24h0m0s" || e.Lifetimes.StaleIfError != "1h0m0s" || e.Lifetimes.From["staleIfError"] != "tier" {
					t.Fatalf("lifetimes %+v, want the rule's 24h and the tier's staleIfError", e.Lifetimes)
				}
			},
		},
		{
			name: "the first matching rule wins over a later one",
			url:  "http://shop.example/static/site.css",
			check: func(t *testing.T, e explanation) {
				if e.Rule != "static" || !slices.Equal(matching(e), []string{"static", "css"}) {
					t.Fatalf("rule %q, matching %v; want static, with static and css matching", e.Rule, matching(e))
				}
			},
		},
		{
			name: "a path is matched cleaned but keyed as received",
			url:  "http://shop.example/static//a/../site.css",
			check: func(t *testing.T, e explanation) {
				if e.MatchedPath != "/static/site.css" || e.Rule != "static" || e.Key.Path != "/static//a/../site.css" {
					t.Fatalf("matched %q under %q, keyed path %q; want /static/site.css, static, the path as received", e.MatchedPath, e.Rule, e.Key.Path)
				}
			},
		},
		{
			name: "a percent-encoded path whose readings select other rules is named by its decoded rule and bypassed",
			url:  "http://shop.example/%61pi/cart",
			check: func(t *testing.T, e explanation) {
				if e.MatchedPath != "/api/cart" || e.Rule != "api" || !e.Bypass || e.Key.Path != "/%61pi/cart" || !strings.Contains(e.Why, "select different rules") {
					t.Fatalf("matched %q under %q (bypass %v), keyed path %q; want /api/cart under api, bypassed, keyed as received", e.MatchedPath, e.Rule, e.Bypass, e.Key.Path)
				}
			},
		},
		{
			name:    "keyed header and cookie values join the key",
			url:     "/home",
			headers: []string{"Host: Shop.Example:80", "Accept-Language: fr", "Accept-Language: de", "Cookie: theme=dark; session=abc"},
			check: func(t *testing.T, e explanation) {
				k := e.Key
				if e.Rule != "home" || k.Host != "shop.example" || k.Primary != "GET http://shop.example/home" ||
					len(k.Headers) != 1 || k.Headers[0] != (keyPart{Name: "accept-language", Value: "fr,de"}) ||
					len(k.Cookies) != 1 || k.Cookies[0] != (keyPart{Name: "session", Value: "abc"}) {
					t.Fatalf("rule %q key %+v, want home keyed on accept-language fr,de and session abc", e.Rule, k)
				}
				l := e.Lifetimes
				if l.MaxTTL != "1h0m0s" || l.StaleWhileRevalidate != "30s" || l.From["staleWhileRevalidate"] != "rule" || l.TTL != "" {
					t.Fatalf("lifetimes %+v, want the rule's maxTTL and staleWhileRevalidate", l)
				}
			},
		},
		{
			name:    "an absent keyed cookie is keyed as absent",
			url:     "http://shop.example/home",
			headers: []string{"Accept-Language: fr"},
			check: func(t *testing.T, e explanation) {
				if len(e.Key.Cookies) != 1 || e.Key.Cookies[0] != (keyPart{Name: "session", Absent: true}) || e.Bypass {
					t.Fatalf("cookies %+v bypass %v, want session absent, not bypassed", e.Key.Cookies, e.Bypass)
				}
			},
		},
		{
			name:    "a keyed cookie sent twice bypasses the cache",
			url:     "http://shop.example/home",
			headers: []string{"Cookie: session=a; session=b"},
			check: func(t *testing.T, e explanation) {
				if !e.Bypass || !strings.Contains(e.Why, "keyed cookie") {
					t.Fatalf("bypass %v (%s), want bypassed for an ambiguous cookie", e.Bypass, e.Why)
				}
			},
		},
		{
			name:    "only included parameters are keyed, and the rule's ttl applies with credentials",
			url:     "http://shop.example/products/9?ref=mail&id=9&page=2",
			headers: []string{"Authorization: Bearer x"},
			check: func(t *testing.T, e explanation) {
				if e.Rule != "products" || e.Key.KeyedQuery != "id=9&page=2" || !e.Lifetimes.TTLWithCredentials ||
					!slices.Equal(e.Key.Include, []string{"id", "page"}) || hasNote(e, "ttl does not apply") || !hasNote(e, "with Authorization") {
					t.Fatalf("rule %q key %+v lifetimes %+v notes %q", e.Rule, e.Key, e.Lifetimes, e.Notes)
				}
			},
		},
		{
			name:    "ignored cookies are removed before the credentials check",
			url:     "https://shop.example/static/app.js",
			headers: []string{"Cookie: _ga=GA1.1.2; _gid=3"},
			check: func(t *testing.T, e explanation) {
				if hasNote(e, "ttl does not apply") || !hasNote(e, `the origin receives Cookie ""`) {
					t.Fatalf("notes %q, want the ignored-cookies note and no ttl note", e.Notes)
				}
			},
		},
		{
			name:    "the rule's ttl does not apply to a request with a cookie",
			url:     "https://shop.example/static/app.js",
			headers: []string{"Cookie: theme=dark"},
			check: func(t *testing.T, e explanation) {
				if !hasNote(e, "rule static's ttl does not apply to it") || !hasNote(e, "X-Forwarded-Proto: https") || e.Key.Scheme != "https" {
					t.Fatalf("notes %q scheme %q, want the ttl and scheme notes", e.Notes, e.Key.Scheme)
				}
			},
		},
		{
			name: "a path no rule matches falls under the default rule and the tier's defaults",
			url:  "http://shop.example/about?x=1",
			check: func(t *testing.T, e explanation) {
				l := e.Lifetimes
				if e.Rule != "default" || len(matching(e)) != 0 || len(e.Rules) != 5 || e.Key.KeyedQuery != "x=1" ||
					l.TTL != "" || l.FallbackTTL != "5m0s" || l.NegativeTTL != "10s" || l.StaleIfError != "1h0m0s" || l.HeuristicPercent != 10 ||
					!slices.Equal(l.TargetedFields, []string{"CDN-Cache-Control"}) || l.StatusTTLs["302"] != "1h0m0s" {
					t.Fatalf("rule %q rules %+v key %+v lifetimes %+v, want default with the tier's lifetimes", e.Rule, e.Rules, e.Key, l)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"explain", "shop", c.url, "-n", ns, "-o", "json"}
			for _, h := range c.headers {
				args = append(args, "-H", h)
			}
			e := explainJSON(t, run(t, Options{}, args...))
			if e.Tier != ns+"/shop" || e.URL != c.url {
				t.Fatalf("explained %s for %s, want %s/shop and %s", e.URL, e.Tier, ns, c.url)
			}
			c.check(t, e)
		})
	}

	t.Run("the text names the rule, the key and the lifetimes", func(t *testing.T) {
		r := run(t, Options{}, "explain", "shop", "https://shop.example/static/app.css?v=3&utm_source=mail", "-n", ns)
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("kubectl tiercache explain:\n%s", r.out)
		for _, want := range []string{
			`(?m)^  rules\[0\] api +pathPrefix /api/ +no match$`,
			`(?m)^  rules\[1\] static +regex .+ +matches$`,
			`(?m)^  rules\[2\] css +regex .+ +matches, but an earlier rule wins$`,
			`(?m)^Rule: +static$`,
			`(?m)^Bypass: +no$`,
			`(?m)^Key: +GET https://shop\.example/static/app\.css\?v=3$`,
			`(?m)^  query +v=3&utm_source=mail → "v=3" \(drops utm_\*; sorted by name\)$`,
			`(?m)^  ttl +24h0m0s \(replaces the origin's freshness; not for requests with Authorization or Cookie\)$`,
			`(?m)^  staleIfError +1h0m0s \(tier\)$`,
			`(?m)^  targeted fields +CDN-Cache-Control \(the first a response carries decides instead of Cache-Control and Expires\)$`,
		} {
			if !regexp.MustCompile(want).MatchString(r.out) {
				t.Errorf("explain printed:\n%s\nno line matches %s", r.out, want)
			}
		}
	})
}

func hasNote(e explanation, s string) bool {
	return slices.ContainsFunc(e.Notes, func(n string) bool { return strings.Contains(n, s) })
}

func TestExplainRefusesWhatItCannotExplain(t *testing.T) {
	ns := namespace(t)
	// Stored without the admission webhook, which would refuse it: the
	// regex does not compile.
	createTier(t, ns, "broken", v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{
		{Name: "ok", Match: v1alpha1.Match{PathPrefix: "/a/"}},
		{Name: "bad", Match: v1alpha1.Match{Regex: "(unclosed"}},
	}})
	createTier(t, ns, "shop", shopTier())
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a tier that does not exist", []string{"nope", "/a"}, 1, `CacheTier "nope" not found in namespace "` + ns + `"`},
		{"a tier its sidecars would refuse", []string{"broken", "/a"}, 1, "spec.rules[1].match.regex"},
		{"a URL of another scheme", []string{"shop", "ftp://shop.example/a"}, 2, "URL: must be absolute (https://host/path?query) or origin-form"},
		{"a relative URL", []string{"shop", "a/b"}, 2, "URL: must be absolute"},
		{"a header without a colon", []string{"shop", "/a", "-H", "Accept-Language fr"}, 2, `--header: must be "Name: value"`},
		{"a header name with a space", []string{"shop", "/a", "-H", "Accept Language: fr"}, 2, `--header: must be "Name: value"`},
		{"no URL", []string{"shop"}, 2, "explain takes 2 argument(s), [TIER URL] (got 1)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, Options{}, append([]string{"explain", "-n", ns}, c.args...)...)
			if r.code() != c.code || !strings.Contains(fmt.Sprint(r.err), c.want) {
				t.Fatalf("explain %v: exit %d, err %v; want %d and %q", c.args, r.code(), r.err, c.code, c.want)
			}
		})
	}
}
