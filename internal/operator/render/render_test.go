package render

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// secretMap is the Secrets seam for pure tests: "<ns>/<name>/<key>" → value.
// The controller's envtest tests read real Secrets.
type secretMap map[string]string

func (m secretMap) SecretValue(_ context.Context, ns string, ref corev1.SecretKeySelector) (string, error) {
	v, ok := m[ns+"/"+ref.Name+"/"+ref.Key]
	if !ok {
		return "", fmt.Errorf("secret %s/%s: %w", ns, ref.Name, ErrNotFound)
	}
	return v, nil
}

func tier(spec v1alpha1.CacheTierSpec) *v1alpha1.CacheTier {
	return &v1alpha1.CacheTier{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: spec}
}

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func ref(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func TestRenderFillsTheModel(t *testing.T) {
	spec := v1alpha1.CacheTierSpec{
		L1: v1alpha1.L1Spec{MaxSize: qty("64Mi"), Shards: 64},
		L2: &v1alpha1.L2Spec{
			Addresses:         []string{"redis.shop:6379"},
			Mode:              v1alpha1.L2Standalone,
			PasswordSecretRef: ref("redis", "password"),
			TLS:               &v1alpha1.L2TLS{Enabled: true, CASecretRef: ref("redis", "ca.crt")},
			Timeout:           "80ms",
		},
		Defaults: v1alpha1.DefaultsSpec{FallbackTTL: "1m", HeuristicPercent: 20, StaleIfError: "1h"},
		Rules: []v1alpha1.Rule{{
			Name: "static", Match: v1alpha1.Match{PathPrefix: "/static/"}, TTL: "24h", TTLWithCredentials: true,
			StaleWhileRevalidate: ptr(v1alpha1.Duration("30s")),
			CacheKey:             v1alpha1.CacheKey{QueryExclude: []string{"utm_*"}, SortQuery: true},
		}},
		Origin:         v1alpha1.OriginSpec{IdleTimeout: "5m"},
		Purge:          v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")},
		RequestHeaders: v1alpha1.RequestHeadersSpec{Mode: v1alpha1.RequestHeadersStrict},
	}
	secrets := secretMap{
		"shop/redis/password": "hunter2",
		"shop/redis/ca.crt":   "PEM",
		"shop/purge/token":    "0123456789abcdef0123",
	}
	c, err := Config(context.Background(), tier(spec), secrets)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"l1.maxSize is the quantity in bytes", c.L1.MaxSize, tierconfig.Size(64 << 20)},
		{"l1.shards is carried", c.L1.Shards, 64},
		{"l1.maxEntrySize gets its default", c.L1.MaxEntrySize, tierconfig.Size(1 << 20)},
		{"the default key prefix names namespace and tier", c.L2.KeyPrefix, "tc:shop/web:"},
		{"the Redis password comes from its Secret", c.L2.Password, "hunter2"},
		{"the CA comes from its Secret", c.L2.CACert, "PEM"},
		{"TLS is on", c.L2.TLS, true},
		{"the L2 timeout is parsed", c.L2.Timeout, tierconfig.Duration(80 * time.Millisecond)},
		{"the heuristic percent becomes a fraction", c.Defaults.HeuristicFraction, 0.2},
		{"the fallback TTL is parsed", c.Defaults.FallbackTTL, tierconfig.Duration(time.Minute)},
		{"the rule TTL is parsed", c.Rules[0].TTL, tierconfig.Duration(24 * time.Hour)},
		{"the rule's stale-while-revalidate override is kept", *c.Rules[0].StaleWhileRevalidate, tierconfig.Duration(30 * time.Second)},
		{"the purge token comes from its Secret", c.Purge.Token, "0123456789abcdef0123"},
		{"the origin timeout gets its default", c.Origin.Timeout, tierconfig.Duration(30 * time.Second)},
		{"the rule's ttlWithCredentials is carried", c.Rules[0].TTLWithCredentials, true},
		{"the request header mode is carried", c.RequestHeaders.Mode, tierconfig.RequestHeadersStrict},
		{"a strict tier gets the default allowlist", strings.Join(c.RequestHeaders.Allow, ","), "Accept,Accept-Encoding,Accept-Language,User-Agent"},
		{"the response header timeout gets its default", c.Origin.ResponseHeaderTimeout, tierconfig.Duration(time.Minute)},
		{"the idle timeout is parsed", c.Origin.IdleTimeout, tierconfig.Duration(5 * time.Minute)},
	}
	for _, tc := range checks {
		if tc.got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}

	red, err := Redacted(tier(spec))
	if err != nil {
		t.Fatalf("redacted: %v", err)
	}
	if red.L2.Password != "" || red.L2.CACert != "" || red.Purge.Token != "" {
		t.Errorf("redacted config carries secrets: %+v %+v", red.L2, red.Purge)
	}
	if red.Hash() == c.Hash() {
		t.Error("redacted and full configs hash equal; a rotated Secret would not change the hash")
	}
}

func TestAnEmptySpecRendersTheBuiltInDefault(t *testing.T) {
	c, err := Redacted(tier(v1alpha1.CacheTierSpec{}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Hash(), tierconfig.Default().Hash(); got != want {
		t.Errorf("empty spec renders %s, the built-in default is %s", got, want)
	}
}

func TestInvalidSpecsNameTheCacheTierField(t *testing.T) {
	cases := map[string]struct {
		spec      v1alpha1.CacheTierSpec
		field     string
		substring string
	}{
		"an L1 below 1Mi is refused on spec.l1.maxSize": {
			spec:  v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("100Ki")}},
			field: "spec.l1.maxSize", substring: "1Mi",
		},
		"an entry larger than a shard is refused on spec.l1.maxEntrySize": {
			spec:  v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("16Mi"), Shards: 256, MaxEntrySize: qty("1Mi")}},
			field: "spec.l1.maxEntrySize", substring: "maxSize/l1.shards",
		},
		"a fractional size is refused": {
			spec:  v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("1.5")}},
			field: "spec.l1.maxSize", substring: "whole number of bytes",
		},
		"a bad regex names its rule": {
			spec:  v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{Regex: "(("}}}},
			field: "spec.rules[0].match.regex", substring: "",
		},
		"duplicate rule names are refused": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{
				{Name: "a", Match: v1alpha1.Match{Path: "/a"}}, {Name: "a", Match: v1alpha1.Match{Path: "/b"}},
			}},
			field: "spec.rules[1].name", substring: "duplicate",
		},
		"an unparsable duration is refused on its field": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{Timeout: "5 minutes"}},
			field: "spec.origin.timeout", substring: "Go duration",
		},
		"an origin timeout over 10m is refused": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{Timeout: "11m"}},
			field: "spec.origin.timeout", substring: "10m",
		},
		"an unparsable response header timeout is refused on its field": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{ResponseHeaderTimeout: "a minute"}},
			field: "spec.origin.responseHeaderTimeout", substring: "Go duration",
		},
		"an idle timeout over an hour is refused": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{IdleTimeout: "2h"}},
			field: "spec.origin.idleTimeout", substring: "1h",
		},
		"sentinel mode without a master name is refused": {
			spec:  v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"s:26379"}, Mode: v1alpha1.L2Sentinel}},
			field: "spec.l2.masterName", substring: "required",
		},
		"an allowlist without strict mode is refused on spec.requestHeaders.allow": {
			spec:  v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{Allow: []string{"Accept"}}},
			field: "spec.requestHeaders.allow", substring: "strict",
		},
		"an allowed hop-by-hop header is refused on its entry": {
			spec: v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{
				Mode: v1alpha1.RequestHeadersStrict, Allow: []string{"Accept", "TE"},
			}},
			field: "spec.requestHeaders.allow[1]", substring: "hop-by-hop",
		},
		"a hop-by-hop key header is refused": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{
				Name: "a", Match: v1alpha1.Match{Path: "/a"}, CacheKey: v1alpha1.CacheKey{Headers: []string{"Connection"}},
			}}},
			field: "spec.rules[0].cacheKey.headers[0]", substring: "",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Redacted(tier(tc.spec))
			if err == nil {
				t.Fatal("rendered without error")
			}
			errs := FieldErrors(err)
			var fields []string
			for _, e := range errs {
				fields = append(fields, e.Field)
				if e.Field == tc.field && strings.Contains(e.Error(), tc.substring) {
					return
				}
			}
			t.Errorf("no error on %s containing %q; got %v (%v)", tc.field, tc.substring, fields, errs.ToAggregate())
		})
	}
}

func TestAMissingSecretIsASecretError(t *testing.T) {
	spec := v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")}}
	_, err := Config(context.Background(), tier(spec), secretMap{})
	se, ok := err.(*SecretError)
	if !ok {
		t.Fatalf("got %T %v, want *SecretError", err, err)
	}
	if se.Field != "spec.purge.tokenSecretRef" {
		t.Errorf("field %q", se.Field)
	}
	if got := FieldErrors(err); len(got) != 1 || got[0].Field != "spec.purge.tokenSecretRef" {
		t.Errorf("field errors %v", got)
	}

	optional := true
	spec.Purge.TokenSecretRef.Optional = &optional
	c, err := Config(context.Background(), tier(spec), secretMap{})
	if err != nil || c.Purge.Token != "" {
		t.Errorf("an optional missing Secret: %v, token %q", err, c.Purge.Token)
	}
}

func TestAShortPurgeTokenInTheSecretIsInvalid(t *testing.T) {
	spec := v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")}}
	_, err := Config(context.Background(), tier(spec), secretMap{"shop/purge/token": "short"})
	errs := FieldErrors(err)
	if len(errs) == 0 || errs[0].Field != "spec.purge.tokenSecretRef" {
		t.Fatalf("got %v", errs)
	}
	if strings.Contains(errs.ToAggregate().Error(), "short") {
		t.Error("the message quotes the secret")
	}
}

func ptr[T any](v T) *T { return &v }
