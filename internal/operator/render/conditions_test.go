package render

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// A bypass rule's header and cookie conditions reach the sidecar's config
// as they are, and a tier without conditions pushes no trace of them.
func TestMatchConditionsAreCarried(t *testing.T) {
	spec := v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{
		{Name: "logged-in", Bypass: true, Match: v1alpha1.Match{
			PathPrefix: "/",
			Headers: []v1alpha1.HeaderMatch{
				{Name: "X-Preview", Present: true}, {Name: "X-Edge", Absent: true},
				{Name: "X-Env", Exact: "beta"}, {Name: "X-Tenant", Prefix: "acme-"}, {Name: "User-Agent", Regex: "(?i)bot"},
			},
			Cookies: []v1alpha1.CookieMatch{
				{Name: "session", Present: true}, {Name: "consent", Absent: true},
				{Name: "beta", Exact: "1"}, {Name: "ab", Regex: "^b$"},
			},
		}},
		{Name: "all", Match: v1alpha1.Match{PathPrefix: "/"}, TTL: "1m"},
	}}
	c, err := Redacted(tier(spec))
	if err != nil {
		t.Fatal(err)
	}
	want := tierconfig.Match{
		PathPrefix: "/",
		Headers: []tierconfig.HeaderMatch{
			{Name: "X-Preview", Present: true}, {Name: "X-Edge", Absent: true},
			{Name: "X-Env", Exact: "beta"}, {Name: "X-Tenant", Prefix: "acme-"}, {Name: "User-Agent", Regex: "(?i)bot"},
		},
		Cookies: []tierconfig.CookieMatch{
			{Name: "session", Present: true}, {Name: "consent", Absent: true},
			{Name: "beta", Exact: "1"}, {Name: "ab", Regex: "^b$"},
		},
	}
	if got := c.Rules[0].Match; !reflect.DeepEqual(got, want) {
		t.Fatalf("rendered match %+v\nwant %+v", got, want)
	}
	if got := c.Rules[1].Match; got.Headers != nil || got.Cookies != nil {
		t.Fatalf("a rule without conditions rendered %+v", got)
	}

	c, err = Redacted(tier(v1alpha1.CacheTierSpec{Rules: spec.Rules[1:]}))
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), `"cookies"`) || strings.Contains(string(js), `"headers"`) {
		t.Errorf("the pushed config of a tier without conditions names them:\n%s", js)
	}
}

// A condition on a caching rule is refused when the tier is rendered (the
// admission webhook runs the same Validate), naming the field.
func TestMatchConditionsOnACachingRuleAreRefused(t *testing.T) {
	_, err := Redacted(tier(v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{
		{Name: "api", Match: v1alpha1.Match{PathPrefix: "/api/", Cookies: []v1alpha1.CookieMatch{{Name: "session", Present: true}}}, TTL: "1m"},
	}}))
	if err == nil || !strings.Contains(err.Error(), "rules[0].match.cookies: allowed only on a bypass rule") {
		t.Fatalf("Redacted = %v, want the rule refused naming rules[0].match.cookies", err)
	}
}
