package operator

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/render"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testkube"
)

// TestMatchConditionsThroughTheAPIServer: spec.rules[].match.headers and
// cookies on a bypass rule survive the real API server's schema (not
// pruned), reach the rendered config, and kubectl explain documents them;
// the schema, its CEL rules and the validating webhook refuse what the
// sidecar would, naming the field.
func TestMatchConditionsThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	match := v1alpha1.Match{
		PathPrefix: "/",
		Headers:    []v1alpha1.HeaderMatch{{Name: "X-Preview", Exact: "1"}, {Name: "X-Edge", Absent: true}},
		Cookies:    []v1alpha1.CookieMatch{{Name: "session", Present: true}, {Name: "ab", Regex: "^b$"}},
	}
	tier := newTier(ns, "conditions", v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{
		{Name: "logged-in", Match: match, Bypass: true},
		{Name: "all", Match: v1alpha1.Match{PathPrefix: "/"}, TTL: "1m"},
	}})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatalf("a bypass rule with conditions was refused: %v", err)
	}
	var got v1alpha1.CacheTier
	if err := c.Get(ctx, client.ObjectKeyFromObject(tier), &got); err != nil {
		t.Fatal(err)
	}
	if m := got.Spec.Rules[0].Match; !reflect.DeepEqual(m, match) {
		t.Fatalf("the API server gave back %+v\nwant %+v", m, match)
	}
	rendered, err := render.Redacted(&got)
	if err != nil {
		t.Fatal(err)
	}
	if m := rendered.Rules[0].Match; len(m.Headers) != 2 || m.Headers[0] != (tierconfig.HeaderMatch{Name: "X-Preview", Exact: "1"}) ||
		len(m.Cookies) != 2 || m.Cookies[0] != (tierconfig.CookieMatch{Name: "session", Present: true}) {
		t.Fatalf("the sidecars would get %+v", m)
	}

	bypassWith := func(m v1alpha1.Match) v1alpha1.CacheTierSpec {
		m.PathPrefix = "/"
		return v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: m, Bypass: true}}}
	}
	var nine []v1alpha1.HeaderMatch
	for i := range 9 {
		nine = append(nine, v1alpha1.HeaderMatch{Name: fmt.Sprintf("X-H%d", i), Present: true})
	}
	cases := map[string]struct {
		spec v1alpha1.CacheTierSpec
		want []string
	}{
		"a cookie condition on a caching rule is refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", TTL: "1m",
				Match: v1alpha1.Match{PathPrefix: "/", Cookies: []v1alpha1.CookieMatch{{Name: "session", Present: true}}}}}},
			want: []string{"spec.rules[0].match", "allowed only on a bypass rule"},
		},
		"a header condition with two tests is refused by a CEL rule": {
			spec: bypassWith(v1alpha1.Match{Headers: []v1alpha1.HeaderMatch{{Name: "X-A", Present: true, Exact: "1"}}}),
			want: []string{"spec.rules[0].match.headers[0]", "exactly one of present, absent, exact, prefix, regex must be set"},
		},
		"a cookie condition with no test is refused by a CEL rule": {
			spec: bypassWith(v1alpha1.Match{Cookies: []v1alpha1.CookieMatch{{Name: "a"}}}),
			want: []string{"spec.rules[0].match.cookies[0]", "exactly one of present, absent, exact, regex must be set"},
		},
		"a cookie name that is not a token is refused by the schema": {
			spec: bypassWith(v1alpha1.Match{Cookies: []v1alpha1.CookieMatch{{Name: "a b", Present: true}}}),
			want: []string{"spec.rules[0].match.cookies[0].name", "should match"},
		},
		"a header named twice is refused by the schema": {
			spec: bypassWith(v1alpha1.Match{Headers: []v1alpha1.HeaderMatch{{Name: "X-A", Present: true}, {Name: "X-A", Exact: "1"}}}),
			want: []string{"spec.rules[0].match.headers[1]", "Duplicate value"},
		},
		"nine header conditions are refused by the schema": {
			spec: bypassWith(v1alpha1.Match{Headers: nine}),
			want: []string{"spec.rules[0].match.headers", "must have at most 8 items"},
		},
		"a condition regex over 256 bytes is refused by the schema": {
			spec: bypassWith(v1alpha1.Match{Cookies: []v1alpha1.CookieMatch{{Name: "a", Regex: strings.Repeat("a", 257)}}}),
			want: []string{"spec.rules[0].match.cookies[0].regex", "256"},
		},
		"a condition on Host is refused by the webhook": {
			spec: bypassWith(v1alpha1.Match{Headers: []v1alpha1.HeaderMatch{{Name: "Host", Exact: "a.example"}}}),
			want: []string{"admission webhook", "spec.rules[0].match.headers[0].name", "host"},
		},
		"a header named twice in another case is refused by the webhook": {
			spec: bypassWith(v1alpha1.Match{Headers: []v1alpha1.HeaderMatch{{Name: "X-A", Present: true}, {Name: "x-a", Exact: "1"}}}),
			want: []string{"admission webhook", "spec.rules[0].match.headers[1].name", "case-insensitive"},
		},
		"a condition regex that does not compile is refused by the webhook": {
			spec: bypassWith(v1alpha1.Match{Headers: []v1alpha1.HeaderMatch{{Name: "X-A", Regex: "(("}}}),
			want: []string{"admission webhook", "spec.rules[0].match.headers[0].regex", "RE2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.Create(ctx, newTier(ns, "invalid", tc.spec))
			if err == nil {
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			// The schema refuses before the webhook is asked.
			if !slices.Contains(tc.want, "admission webhook") && strings.Contains(err.Error(), "admission webhook") {
				t.Errorf("refused by the webhook, not by the schema: %v", err)
			}
		})
	}

	kubectl, path := kubectlPath(t), testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	for field, want := range map[string]string{
		"ct.spec.rules.match.cookies":         "{name: session, present: true}",
		"ct.spec.rules.match.headers":         "Only on a bypass rule",
		"ct.spec.rules.match.headers.prefix":  "starts with this",
		"ct.spec.rules.match.cookies.present": "whatever its value",
	} {
		out, err := explain(kubectl, path, field)
		if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("kubectl explain %s (%v) does not mention %q:\n%s", field, err, want, out)
		}
	}
}
