package render

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// secretMetas is the Secrets seam for pure tests: "<ns>/<name>" → the
// Secret's metadata. It cannot hold a value: render never sees one. The
// controller's envtest tests look up real Secrets.
type secretMetas map[string]*metav1.ObjectMeta

func (m secretMetas) SecretMeta(_ context.Context, ns, name string) (metav1.Object, error) {
	v, ok := m[ns+"/"+name]
	if !ok {
		return nil, fmt.Errorf("secret %s/%s: %w", ns, name, ErrNotFound)
	}
	return v, nil
}

// allowed is a labelled Secret at resourceVersion rv.
func allowed(rv string) *metav1.ObjectMeta {
	return &metav1.ObjectMeta{ResourceVersion: rv, Labels: map[string]string{inject.LabelAllowReference: "true"}}
}

// webUID is the UID of the test's tier shop/web.
const webUID = "uid-of-web"

// generated is the tier web's generated Secret at resourceVersion rv.
func generated(rv string) *metav1.ObjectMeta {
	m := allowed(rv)
	m.Labels[inject.LabelGeneratedFor] = "web"
	m.OwnerReferences = []metav1.OwnerReference{{APIVersion: "tiercache.io/v1alpha1", Kind: "CacheTier", Name: "web", UID: webUID}}
	return m
}

func tier(spec v1alpha1.CacheTierSpec) *v1alpha1.CacheTier {
	return &v1alpha1.CacheTier{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: webUID}, Spec: spec}
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
			MaxBodySize:       qty("32Mi"),
		},
		BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("2Gi"), Medium: v1alpha1.BodyStoreMemory, Threshold: qty("256Ki"), MaxObjectSize: qty("512Mi")},
		Defaults: v1alpha1.DefaultsSpec{FallbackTTL: "1m", HeuristicPercent: 20, StaleIfError: "1h",
			StaleIfUnreachable: ptr(v1alpha1.Duration("0")), NormalizeAcceptLanguage: true},
		Rules: []v1alpha1.Rule{{
			Name: "static", Match: v1alpha1.Match{PathPrefix: "/static/"}, TTL: "7d", TTLWithCredentials: true,
			StaleWhileRevalidate: ptr(v1alpha1.Duration("30s")),
			CacheKey:             v1alpha1.CacheKey{QueryExclude: []string{"utm_*"}, SortQuery: true},
		}},
		Origin:         v1alpha1.OriginSpec{IdleTimeout: "5m"},
		Purge:          v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token"), HTTPMethod: true},
		RequestHeaders: v1alpha1.RequestHeadersSpec{Mode: v1alpha1.RequestHeadersStrict, AllowUnderscoredNames: []string{"X_Api_Version"}},
	}
	secrets := secretMetas{
		"shop/redis":         allowed("11"),
		"shop/purge":         allowed("12"),
		"shop/web-tiercache": generated("13"),
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
		{"no Redis password is rendered", c.L2.Password, ""},
		{"no CA is rendered", c.L2.CACert, ""},
		{"TLS is on", c.L2.TLS, true},
		{"the L2 timeout is parsed", c.L2.Timeout, tierconfig.Duration(80 * time.Millisecond)},
		{"the heuristic percent becomes a fraction", c.Defaults.HeuristicFraction, 0.2},
		{"the fallback TTL is parsed", c.Defaults.FallbackTTL, tierconfig.Duration(time.Minute)},
		{"a staleIfUnreachable of 0 is carried as set", c.Defaults.StaleIfUnreachable != nil && *c.Defaults.StaleIfUnreachable == 0, true},
		{"normalizeAcceptLanguage is carried", c.Defaults.NormalizeAcceptLanguage, true},
		{"the rule TTL is parsed, days included", c.Rules[0].TTL, tierconfig.Duration(7 * 24 * time.Hour)},
		{"the rule's stale-while-revalidate override is kept", *c.Rules[0].StaleWhileRevalidate, tierconfig.Duration(30 * time.Second)},
		{"no purge token is rendered", c.Purge.Token, ""},
		{"the serving port's PURGE setting is carried", c.Purge.HTTPMethod, true},
		{"the password's version names Secret, key and resourceVersion", c.SecretVersions["redis-password"], "redis/password@11"},
		{"the CA's version is its Secret's", c.SecretVersions["redis-ca.crt"], "redis/ca.crt@11"},
		{"the purge token's version is the named Secret's", c.SecretVersions["purge-token"], "purge/token@12"},
		{"the invalidation key comes from the generated Secret", c.SecretVersions["invalidation-key"], "web-tiercache/invalidation-key@13"},
		{"there is nothing else in the versions", len(c.SecretVersions), 4},
		{"the origin timeout gets its default", c.Origin.Timeout, tierconfig.Duration(30 * time.Second)},
		{"the rule's ttlWithCredentials is carried", c.Rules[0].TTLWithCredentials, true},
		{"the request header mode is carried", c.RequestHeaders.Mode, tierconfig.RequestHeadersStrict},
		{"a strict tier gets the default allowlist", strings.Join(c.RequestHeaders.Allow, ","), "Accept,Accept-Encoding,Accept-Language,User-Agent"},
		{"the underscored names are carried", strings.Join(c.RequestHeaders.AllowUnderscoredNames, ","), "X_Api_Version"},
		{"the response header timeout gets its default", c.Origin.ResponseHeaderTimeout, tierconfig.Duration(time.Minute)},
		{"the idle timeout is parsed", c.Origin.IdleTimeout, tierconfig.Duration(5 * time.Minute)},
		{"the L2 body size limit is carried", c.L2.MaxBodySize, tierconfig.Size(32 << 20)},
		{"the body threshold is carried", c.BodyStore.Threshold, tierconfig.Size(256 << 10)},
		{"the largest body object is carried", c.BodyStore.MaxObjectSize, tierconfig.Size(512 << 20)},
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
	if red.SecretVersions != nil {
		t.Errorf("the redacted config carries secret versions: %v", red.SecretVersions)
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
			field: "spec.origin.timeout", substring: "a duration such as",
		},
		"a staleIfUnreachable over a day is refused on its field": {
			spec:  v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{StaleIfUnreachable: ptr(v1alpha1.Duration("25h"))}},
			field: "spec.defaults.staleIfUnreachable", substring: "24h",
		},
		"an unparsable staleIfUnreachable is refused on its field": {
			spec:  v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{StaleIfUnreachable: ptr(v1alpha1.Duration("ten minutes"))}},
			field: "spec.defaults.staleIfUnreachable", substring: "a duration such as",
		},
		"an origin timeout over 10m is refused": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{Timeout: "11m"}},
			field: "spec.origin.timeout", substring: "10m",
		},
		"an unparsable response header timeout is refused on its field": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{ResponseHeaderTimeout: "a minute"}},
			field: "spec.origin.responseHeaderTimeout", substring: "a duration such as",
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
		"a body threshold below 1Ki is refused on spec.bodyStore.threshold": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Threshold: qty("512")}},
			field: "spec.bodyStore.threshold", substring: ">= 1Ki",
		},
		"a body threshold above the entry limit is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Threshold: qty("2Mi")}},
			field: "spec.bodyStore.threshold", substring: "l1.maxEntrySize",
		},
		"a fractional body threshold is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Threshold: qty("1.5")}},
			field: "spec.bodyStore.threshold", substring: "whole number of bytes",
		},
		"a largest body object over 1Ti is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{MaxObjectSize: qty("2Ti")}},
			field: "spec.bodyStore.maxObjectSize", substring: "1Ti",
		},
		"a body store below 64Mi is refused on spec.bodyStore.size": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("32Mi")}},
			field: "spec.bodyStore.size", substring: "must be >= 64Mi (got 32Mi)",
		},
		"a body store above 1Ti is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("2Ti")}},
			field: "spec.bodyStore.size", substring: "must be <= 1Ti (got 2Ti)",
		},
		"a fractional body store size is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("100000000.5")}},
			field: "spec.bodyStore.size", substring: "whole number of bytes",
		},
		"an unknown medium is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Medium: "SSD"}},
			field: "spec.bodyStore.medium", substring: `must be Disk or Memory (got "SSD")`,
		},
		"a largest body object above the store's size is refused": {
			spec:  v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("256Mi"), MaxObjectSize: qty("512Mi")}},
			field: "spec.bodyStore.maxObjectSize", substring: "must be <= bodyStore.size = 256Mi",
		},
		"a memory body store that leaves the sidecar no memory is refused": {
			spec: v1alpha1.CacheTierSpec{
				BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Medium: v1alpha1.BodyStoreMemory},
				Sidecar: v1alpha1.SidecarSpec{Resources: &corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				}},
			},
			field: "spec.bodyStore.size", substring: "must be <= spec.sidecar.resources.limits.memory - 64Mi = 960Mi (got 1Gi)",
		},
		"an L2 body size limit over 512Mi is refused": {
			spec:  v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"r:6379"}, Mode: v1alpha1.L2Standalone, MaxBodySize: qty("1Gi")}},
			field: "spec.l2.maxBodySize", substring: "512Mi",
		},
		"a request buffer over 64Mi is refused on spec.origin.requestBuffer": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{RequestBuffer: qty("65Mi")}},
			field: "spec.origin.requestBuffer", substring: "64Mi (got 65Mi)",
		},
		"a negative request buffer is refused": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{RequestBuffer: qty("-1Ki")}},
			field: "spec.origin.requestBuffer", substring: "must be between 1 and 64Mi",
		},
		"a fractional request buffer is refused": {
			spec:  v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{RequestBuffer: qty("1.5")}},
			field: "spec.origin.requestBuffer", substring: "whole number of bytes",
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

func TestSecretReferences(t *testing.T) {
	unlabelled := &metav1.ObjectMeta{ResourceVersion: "5"}
	cases := map[string]struct {
		spec    v1alpha1.CacheTierSpec
		secrets secretMetas
		// versions expected, or the error: its file, sentinel and a
		// substring of its message.
		versions map[string]string
		file     string
		is       error
		message  string
	}{
		"a tier without references gets the generated purge token and invalidation key": {
			secrets:  secretMetas{"shop/web-tiercache": generated("9")},
			versions: map[string]string{"purge-token": "web-tiercache/purge-token@9", "invalidation-key": "web-tiercache/invalidation-key@9"},
		},
		"a named token Secret replaces the generated purge token": {
			spec:     v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")}},
			secrets:  secretMetas{"shop/purge": allowed("3"), "shop/web-tiercache": generated("9")},
			versions: map[string]string{"purge-token": "purge/token@3", "invalidation-key": "web-tiercache/invalidation-key@9"},
		},
		"a missing Secret says how to create and label it": {
			spec:    v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")}},
			secrets: secretMetas{"shop/web-tiercache": generated("9")},
			file:    "purge-token", is: ErrNotFound,
			message: `spec.purge.tokenSecretRef: Secret "purge" not found in namespace "shop", or not labelled tiercache.io/allow-reference=true; create it (key "token") and label it: kubectl label secret purge tiercache.io/allow-reference=true -n shop`,
		},
		"an unlabelled Secret is refused with the command that labels it": {
			spec:    v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}, PasswordSecretRef: ref("redis", "password")}},
			secrets: secretMetas{"shop/redis": unlabelled, "shop/web-tiercache": generated("9")},
			file:    "redis-password", is: ErrNotAllowed,
			message: `spec.l2.passwordSecretRef: Secret "redis" is not labelled tiercache.io/allow-reference=true, so CacheTiers may not use it; if this tier may use it: kubectl label secret redis tiercache.io/allow-reference=true -n shop`,
		},
		"a Secret labelled otherwise than true is not allowed": {
			spec: v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")}},
			secrets: secretMetas{"shop/purge": {Labels: map[string]string{inject.LabelAllowReference: "yes"}},
				"shop/web-tiercache": generated("9")},
			file: "purge-token", is: ErrNotAllowed, message: "kubectl label secret purge",
		},
		"an optional missing Secret is left out": {
			spec:     v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: optionalRef("purge", "token")}},
			secrets:  secretMetas{"shop/web-tiercache": generated("9")},
			versions: map[string]string{"invalidation-key": "web-tiercache/invalidation-key@9"},
		},
		"an optional unlabelled Secret is left out, never used": {
			spec:     v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: optionalRef("purge", "token")}},
			secrets:  secretMetas{"shop/purge": unlabelled, "shop/web-tiercache": generated("9")},
			versions: map[string]string{"invalidation-key": "web-tiercache/invalidation-key@9"},
		},
		"a Secret named like the generated one but not generated for the tier is not used": {
			secrets: secretMetas{"shop/web-tiercache": allowed("9")},
			file:    "invalidation-key", is: ErrNotGenerated,
			message: `Secret "web-tiercache" exists but was not generated for this CacheTier (it lacks the label tiercache.io/generated-for=web or the owner reference to this CacheTier); the operator leaves it alone: delete or rename it and the operator creates its own`,
		},
		"a Secret planted with the generated name and labels, but not owned by the tier, is not adopted": {
			secrets: secretMetas{"shop/web-tiercache": {Labels: map[string]string{inject.LabelAllowReference: "true", inject.LabelGeneratedFor: "web"}}},
			file:    "invalidation-key", is: ErrNotGenerated, message: "owner reference",
		},
		"another tier's generated Secret may not be referenced": {
			spec:    v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"evil:6379"}, PasswordSecretRef: ref("admin-tiercache", "purge-token")}},
			secrets: secretMetas{"shop/admin-tiercache": {ResourceVersion: "4", Labels: map[string]string{inject.LabelAllowReference: "true", inject.LabelGeneratedFor: "admin"}}, "shop/web-tiercache": generated("9")},
			file:    "redis-password", is: ErrOtherTiersSecret,
			message: `spec.l2.passwordSecretRef: Secret "admin-tiercache" was generated by the operator for a CacheTier`,
		},
		"the tier's own generated Secret may not be referenced either": {
			spec:    v1alpha1.CacheTierSpec{Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("web-tiercache", "purge-token")}},
			secrets: secretMetas{"shop/web-tiercache": generated("9")},
			file:    "purge-token", is: ErrOtherTiersSecret, message: "reference a Secret of your own",
		},
		"a generated Secret that lost its allow label says how to fix it": {
			secrets: secretMetas{"shop/web-tiercache": {Labels: map[string]string{inject.LabelGeneratedFor: "web"},
				OwnerReferences: []metav1.OwnerReference{{Kind: "CacheTier", Name: "web", UID: webUID}}}},
			file: "invalidation-key", is: ErrNotAllowed,
			message: `the generated Secret "web-tiercache" lost its label tiercache.io/allow-reference=true: put it back (kubectl label secret web-tiercache tiercache.io/allow-reference=true -n shop) or delete the Secret and the operator creates a new one`,
		},
		"a generated Secret not created yet says the operator creates it": {
			secrets: secretMetas{},
			file:    "invalidation-key", is: ErrNotFound,
			message: `the generated Secret "web-tiercache" does not exist yet; the operator creates it`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, err := Config(context.Background(), tier(tc.spec), tc.secrets)
			if tc.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(c.SecretVersions, tc.versions) {
					t.Fatalf("versions %v, want %v", c.SecretVersions, tc.versions)
				}
				return
			}
			ses := SecretErrors(err)
			for _, se := range ses {
				if se.File.File == tc.file && errors.Is(se, tc.is) {
					if !strings.Contains(se.Error(), tc.message) {
						t.Fatalf("message %q lacks %q", se.Error(), tc.message)
					}
					if Transient(err) {
						t.Error("a Secret's absence or labels count as transient")
					}
					return
				}
			}
			t.Fatalf("no %v error on %s in %v", tc.is, tc.file, err)
		})
	}
}

func TestALookupFailureIsTransient(t *testing.T) {
	_, err := Config(context.Background(), tier(v1alpha1.CacheTierSpec{}), failingSecrets{})
	if !Transient(err) {
		t.Fatalf("a failing lookup is not transient: %v", err)
	}
}

type failingSecrets struct{}

func (failingSecrets) SecretMeta(context.Context, string, string) (metav1.Object, error) {
	return nil, errors.New("connection refused")
}

// TestTheHashFollowsResourceVersionsNotValues: a tier's hash depends on
// which Secret keys it uses and their resourceVersions, nothing else of
// them (render has no way to see a value).
func TestTheHashFollowsResourceVersionsNotValues(t *testing.T) {
	spec := v1alpha1.CacheTierSpec{
		L2:    &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}, PasswordSecretRef: ref("redis", "password")},
		Purge: v1alpha1.PurgeSpec{TokenSecretRef: ref("purge", "token")},
	}
	hash := func(spec v1alpha1.CacheTierSpec, redisRV string) string {
		t.Helper()
		c, err := Config(context.Background(), tier(spec), secretMetas{
			"shop/redis": allowed(redisRV), "shop/purge": allowed("1"), "shop/web-tiercache": generated("2"),
		})
		if err != nil {
			t.Fatal(err)
		}
		return c.Hash()
	}
	base := hash(spec, "100")
	if hash(spec, "100") != base {
		t.Error("one resourceVersion hashes differently twice")
	}
	if hash(spec, "101") == base {
		t.Error("a rotated password (new resourceVersion) does not change the hash")
	}
	other := spec.DeepCopy()
	other.L2.PasswordSecretRef = ref("redis", "password2")
	if hash(*other, "100") == base {
		t.Error("another key of the same Secret does not change the hash")
	}
	red, err := Redacted(tier(spec))
	if err != nil {
		t.Fatal(err)
	}
	if red.Hash() == base {
		t.Error("the versions do not enter the hash")
	}
}

func optionalRef(name, key string) *corev1.SecretKeySelector {
	r := ref(name, key)
	r.Optional = ptr(true)
	return r
}

func ptr[T any](v T) *T { return &v }
