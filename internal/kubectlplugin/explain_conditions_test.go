package kubectlplugin

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// loggedInTier bypasses clients with a session cookie, and previews, before
// a caching rule for everything.
func loggedInTier() v1alpha1.CacheTierSpec {
	return v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{
		{Name: "logged-in", Bypass: true, Match: v1alpha1.Match{PathPrefix: "/", Cookies: []v1alpha1.CookieMatch{{Name: "session", Present: true}}}},
		{Name: "preview", Bypass: true, Match: v1alpha1.Match{PathPrefix: "/",
			Headers: []v1alpha1.HeaderMatch{{Name: "X-Preview", Exact: "1"}},
			Cookies: []v1alpha1.CookieMatch{{Name: "editor", Regex: "^(yes|true)$"}}}},
		{Name: "all", Match: v1alpha1.Match{PathPrefix: "/"}, TTL: "1m"},
	}}
}

func TestExplainShowsWhichConditionMatched(t *testing.T) {
	ns := namespace(t)
	createTier(t, ns, "web", loggedInTier())

	cases := []struct {
		name    string
		headers []string
		check   func(t *testing.T, e explanation)
	}{
		{
			name:    "a session cookie meets the logged-in rule's condition",
			headers: []string{"Cookie: theme=dark; session=abc"},
			check: func(t *testing.T, e explanation) {
				r := e.Rules[0]
				if e.Rule != "logged-in" || !e.Bypass || !strings.Contains(e.Why, "rule logged-in bypasses the cache for this request (cookie session present)") ||
					!r.PathMatches || !r.Matches || len(r.Conditions) != 1 ||
					r.Conditions[0] != (conditionCheck{Field: "match.cookies[0]", Condition: "cookie session present", Met: true}) {
					t.Fatalf("rule %q bypass %v (%s), rules[0] %+v; want logged-in, bypassed by its cookie condition", e.Rule, e.Bypass, e.Why, r)
				}
			},
		},
		{
			name:    "without a session cookie the request falls through to the caching rule",
			headers: []string{"Cookie: theme=dark"},
			check: func(t *testing.T, e explanation) {
				r := e.Rules[0]
				if e.Rule != "all" || e.Bypass || !r.PathMatches || r.Matches || r.Conditions[0].Met || !slices.Equal(matching(e), []string{"all"}) {
					t.Fatalf("rule %q bypass %v, rules %+v; want all, not bypassed, logged-in's path matching and its condition not", e.Rule, e.Bypass, e.Rules)
				}
			},
		},
		{
			name:    "a session cookie in capitals meets the condition as ambiguous",
			headers: []string{"Cookie: SESSION=abc"},
			check: func(t *testing.T, e explanation) {
				c := e.Rules[0].Conditions[0]
				if e.Rule != "logged-in" || !e.Bypass || !c.Met || !c.Ambiguous {
					t.Fatalf("rule %q bypass %v, condition %+v; want logged-in, met as ambiguous", e.Rule, e.Bypass, c)
				}
			},
		},
		{
			name:    "every condition of a rule must hold",
			headers: []string{"X-Preview: 1", "Cookie: editor=no"},
			check: func(t *testing.T, e explanation) {
				r := e.Rules[1]
				want := []conditionCheck{
					{Field: "match.headers[0]", Condition: `header X-Preview exact "1"`, Met: true},
					{Field: "match.cookies[0]", Condition: "cookie editor regex ^(yes|true)$", Met: false},
				}
				if e.Rule != "all" || r.Matches || !slices.Equal(r.Conditions, want) {
					t.Fatalf("rule %q, rules[1] %+v; want all, preview's header condition met and its cookie condition not", e.Rule, r)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"explain", "web", "http://shop.example/account", "-n", ns, "-o", "json"}
			for _, h := range c.headers {
				args = append(args, "-H", h)
			}
			c.check(t, explainJSON(t, run(t, Options{}, args...)))
		})
	}

	t.Run("the text shows each condition and whether it is met", func(t *testing.T) {
		r := run(t, Options{}, "explain", "web", "http://shop.example/account", "-n", ns, "-H", "X-Preview: 1", "-H", "Cookie: editor=yes")
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("kubectl tiercache explain:\n%s", r.out)
		for _, want := range []string{
			`(?m)^  rules\[0\] logged-in +pathPrefix / +path matches, a condition does not$`,
			`(?m)^ +and cookie session present +not met$`,
			`(?m)^  rules\[1\] preview +pathPrefix / +matches$`,
			`(?m)^ +and header X-Preview exact "1" +met$`,
			`(?m)^ +and cookie editor regex \^\(yes\|true\)\$ +met$`,
			`(?m)^  rules\[2\] all +pathPrefix / +matches, but an earlier rule wins$`,
			`(?m)^Rule: +preview$`,
			`(?m)^Bypass: +yes: rule preview bypasses the cache for this request \(header X-Preview exact "1" and cookie editor regex \^\(yes\|true\)\$\)`,
		} {
			if !regexp.MustCompile(want).MatchString(r.out) {
				t.Errorf("explain printed:\n%s\nno line matches %s", r.out, want)
			}
		}
	})
}
