package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

func qty(s string) *resource.Quantity { q := resource.MustParse(s); return &q }

func secretRef(name, key string) *corev1.SecretKeySelector {
	return &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
}

func newTier(ns, name string, spec v1alpha1.CacheTierSpec) *v1alpha1.CacheTier {
	return &v1alpha1.CacheTier{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

// TestTheAPIServerRefusesInvalidCacheTiers creates each tier through the
// API server: the schema, its CEL rules and the validating webhook (the
// sidecar's own Validate) must each refuse their cases with a message
// naming the field.
func TestTheAPIServerRefusesInvalidCacheTiers(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	valid := newTier(ns, "valid", v1alpha1.CacheTierSpec{
		L1: v1alpha1.L1Spec{MaxSize: qty("64Mi"), Shards: 64},
		L2: &v1alpha1.L2Spec{Addresses: []string{"redis.shop.svc:6379"}, Timeout: "80ms", PasswordSecretRef: secretRef("redis", "password")},
		Defaults: v1alpha1.DefaultsSpec{
			FallbackTTL: "1m", StaleWhileRevalidate: "30s", StaleIfError: "1d", NegativeTTL: "10s", HeuristicPercent: 10,
			IgnoreCookies: []string{"@analytics", "consent_*"},
			StatusTTLs:    []v1alpha1.StatusTTLSpec{{Statuses: []int32{301, 302}, TTL: "1h"}},
		},
		Rules: []v1alpha1.Rule{
			{Name: "api", Match: v1alpha1.Match{PathPrefix: "/api/", Hosts: []string{"shop.example.com", "*.tenants.example.com"}}, Bypass: true},
			{Name: "static", Match: v1alpha1.Match{Regex: `^/static/.*\.(css|js)$`}, TTL: "7d",
				CacheKey: v1alpha1.CacheKey{QueryExclude: []string{"utm_*"}, SortQuery: true, Headers: []string{"Accept-Language"}, Cookies: []string{"currency"}}},
		},
		Coalescing:     v1alpha1.CoalescingSpec{Timeout: "5s"},
		Purge:          v1alpha1.PurgeSpec{TokenSecretRef: secretRef("purge", "token")},
		RequestHeaders: v1alpha1.RequestHeadersSpec{Mode: v1alpha1.RequestHeadersStrict, Allow: []string{"Accept", "X-Request-Id"}},
		Sidecar:        v1alpha1.SidecarSpec{Port: 8300, AdminPort: 8301, Image: "example.test/approved/tiercache:2"},
	})
	if err := c.Create(ctx, valid); err != nil {
		t.Fatalf("a valid tier was refused: %v", err)
	}

	cases := map[string]struct {
		spec v1alpha1.CacheTierSpec
		name string
		want []string // substrings of the error
	}{
		"a shard count that is not a power of two is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{Shards: 3}},
			want: []string{"spec.l1.shards", "Unsupported value"},
		},
		"a duration that is not a duration is refused by the schema, with the units": {
			spec: v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{Timeout: "5 minutes"}},
			want: []string{"spec.origin.timeout", "must be a duration such as 30s, 1h30m or 7d (units ns, us, ms, s, m, h, d = 24h, w = 7d, y = 365d), or 0"},
		},
		"sentinel mode without a master name is refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"s:26379"}, Mode: v1alpha1.L2Sentinel}},
			want: []string{"spec.l2.masterName", "masterName is required when mode is sentinel"},
		},
		"two addresses in standalone mode are refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"a:6379", "b:6379"}}},
			want: []string{"spec.l2.addresses", "standalone mode takes exactly one address"},
		},
		"a match with two selectors is refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{Path: "/a", PathPrefix: "/b"}}}},
			want: []string{"spec.rules[0].match", "exactly one of path, pathPrefix, regex must be set"},
		},
		"a rule named default is refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "default", Match: v1alpha1.Match{Path: "/a"}}}},
			want: []string{"spec.rules[0].name", "reserved"},
		},
		"queryInclude with queryExclude is refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{Path: "/a"},
				CacheKey: v1alpha1.CacheKey{QueryInclude: []string{"q"}, QueryExclude: []string{"utm_*"}}}}},
			want: []string{"spec.rules[0].cacheKey", "mutually exclusive"},
		},
		"a request header allowlist without strict mode is refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{Allow: []string{"Accept"}}},
			want: []string{"spec.requestHeaders.allow", "allow is used only when mode is strict"},
		},
		"an ignored cookie that is not a cookie name is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{IgnoreCookies: []string{"a b"}}},
			want: []string{"spec.defaults.ignoreCookies[0]", "should match"},
		},
		"a cookie both ignored and keyed is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{IgnoreCookies: []string{"lang"}},
				Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{PathPrefix: "/"}, CacheKey: v1alpha1.CacheKey{Cookies: []string{"lang"}}}}},
			want: []string{"admission webhook", "spec.defaults.ignoreCookies[0]", "both ignored and keyed"},
		},
		"a status lifetime for a status not stored so is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{StatusTTLs: []v1alpha1.StatusTTLSpec{{Statuses: []int32{500}, TTL: "1m"}}}},
			want: []string{"spec.defaults.statusTTLs[0].statuses[0]", "Unsupported value"},
		},
		"a status given two lifetimes is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{PathPrefix: "/"},
				StatusTTLs: []v1alpha1.StatusTTLSpec{{Statuses: []int32{301}, TTL: "1m"}, {Statuses: []int32{301}, TTL: "1h"}}}}},
			want: []string{"admission webhook", "spec.rules[0].statusTTLs[1].statuses[0]", "give each status one lifetime"},
		},
		"a host with a port is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{PathPrefix: "/", Hosts: []string{"shop.example.com:8080"}}}}},
			want: []string{"spec.rules[0].match.hosts[0]", "should match"},
		},
		"an unknown request header mode is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{Mode: "paranoid"}},
			want: []string{"spec.requestHeaders.mode", "Unsupported value"},
		},
		"an allowed header that is not a header name is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{Mode: v1alpha1.RequestHeadersStrict, Allow: []string{"X Y"}}},
			want: []string{"spec.requestHeaders.allow[0]", "should match"},
		},
		"an allowed hop-by-hop header is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{Mode: v1alpha1.RequestHeadersStrict, Allow: []string{"Upgrade"}}},
			want: []string{"admission webhook", "spec.requestHeaders.allow[0]", "hop-by-hop"},
		},
		"a sidecar image the operator does not allow is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Sidecar: v1alpha1.SidecarSpec{Image: "evil.example/miner:1"}},
			want: []string{"admission webhook", "spec.sidecar.image", "not allowed", "example.test/tiercache-sidecar:test"},
		},
		"equal sidecar ports are refused by a CEL rule": {
			spec: v1alpha1.CacheTierSpec{Sidecar: v1alpha1.SidecarSpec{Port: 9000, AdminPort: 9000}},
			want: []string{"spec.sidecar", "port and adminPort must differ"},
		},
		"a name longer than a label value is refused by a CEL rule": {
			name: strings.Repeat("n", 64),
			want: []string{"metadata.name: must be at most 63 characters"},
		},
		"an L1 below 1Mi is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("512Ki")}},
			want: []string{"admission webhook", "spec.l1.maxSize", "1Mi"},
		},
		"an entry size above a shard is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{L1: v1alpha1.L1Spec{MaxSize: qty("16Mi"), MaxEntrySize: qty("2Mi")}},
			want: []string{"admission webhook", "spec.l1.maxEntrySize", "l1.maxSize/l1.shards"},
		},
		"a regex that does not compile is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{Regex: "(("}}}},
			want: []string{"admission webhook", "spec.rules[0].match.regex"},
		},
		"an origin timeout over 10m is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{Timeout: "11m"}},
			want: []string{"admission webhook", "spec.origin.timeout", "10m"},
		},
		"a body store below 64Mi is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("32Mi")}},
			want: []string{"admission webhook", "spec.bodyStore.size", "must be >= 64Mi (got 32Mi)"},
		},
		"an unknown body store medium is refused by the schema": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Medium: "SSD"}},
			want: []string{"spec.bodyStore.medium", "Unsupported value"},
		},
		"a body threshold above the entry limit is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Threshold: qty("4Mi")}},
			want: []string{"admission webhook", "spec.bodyStore.threshold", "l1.maxEntrySize"},
		},
		"a memory body store that fills the sidecar's memory limit is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{
				BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Medium: v1alpha1.BodyStoreMemory},
				Sidecar: v1alpha1.SidecarSpec{Resources: &corev1.ResourceRequirements{
					Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				}},
			},
			want: []string{"admission webhook", "spec.bodyStore.size", "spec.sidecar.resources.limits.memory"},
		},
		"an L2 body size limit over 512Mi is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"r:6379"}, MaxBodySize: qty("1Gi")}},
			want: []string{"admission webhook", "spec.l2.maxBodySize", "512Mi"},
		},
		"a request buffer over 64Mi is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{RequestBuffer: qty("65Mi")}},
			want: []string{"admission webhook", "spec.origin.requestBuffer", "64Mi"},
		},
		"a negative request buffer is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{RequestBuffer: qty("-1Mi")}},
			want: []string{"admission webhook", "spec.origin.requestBuffer", "64Mi"},
		},
		"a hop-by-hop header in the cache key is refused by the webhook": {
			spec: v1alpha1.CacheTierSpec{Rules: []v1alpha1.Rule{{Name: "a", Match: v1alpha1.Match{Path: "/a"},
				CacheKey: v1alpha1.CacheKey{Headers: []string{"Connection"}}}}},
			want: []string{"admission webhook", "spec.rules[0].cacheKey.headers[0]"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			n := tc.name
			if n == "" {
				n = "invalid"
			}
			err := c.Create(ctx, newTier(ns, n, tc.spec))
			if err == nil {
				t.Fatal("the API server accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}

	// An update is validated too, and the stored tier is unchanged.
	var got v1alpha1.CacheTier
	if err := c.Get(ctx, client.ObjectKeyFromObject(valid), &got); err != nil {
		t.Fatal(err)
	}
	bad := got.DeepCopy()
	bad.Spec.L1.MaxSize = qty("512Ki")
	if err := c.Update(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.l1.maxSize") {
		t.Errorf("an invalid update: %v", err)
	}
}

// condition returns the tier's condition of type t, or nil.
func condition(tier *v1alpha1.CacheTier, t string) *metav1.Condition {
	return meta.FindStatusCondition(tier.Status.Conditions, t)
}

// TestStatusFollowsSpecAndSecrets: conditions converge, a missing or
// unlabelled Secret makes the tier not Valid (saying how to fix it) until
// it exists with the label, and a rotated Secret changes the rendered
// config hash, which holds only resourceVersions.
func TestStatusFollowsSpecAndSecrets(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	tier := newTier(ns, "pages", v1alpha1.CacheTierSpec{
		L2:    &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}, PasswordSecretRef: secretRef("redis", "password")},
		Purge: v1alpha1.PurgeSpec{TokenSecretRef: secretRef("purge", "token")},
	})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(tier)
	get := func() *v1alpha1.CacheTier {
		var got v1alpha1.CacheTier
		if err := c.Get(ctx, key, &got); err != nil {
			t.Fatal(err)
		}
		return &got
	}
	notValid := func(wants ...string) func() error {
		return func() error {
			got := get()
			v := condition(got, v1alpha1.ConditionValid)
			if v == nil || v.Status != metav1.ConditionFalse || v.Reason != v1alpha1.ReasonSecretMissing {
				return errorf("Valid = %+v", v)
			}
			r := condition(got, v1alpha1.ConditionReady)
			if r == nil || r.Status != metav1.ConditionFalse {
				return errorf("Ready = %+v", r)
			}
			for _, want := range wants {
				if !strings.Contains(v.Message, want) || !strings.Contains(r.Message, want) {
					return errorf("Valid %q or Ready %q lacks %q", v.Message, r.Message, want)
				}
			}
			return nil
		}
	}

	// Neither Secret exists: not Valid, with the field, the Secret and the
	// fix named.
	eventually(t, 30*time.Second, notValid("spec.l2.passwordSecretRef", `"redis"`, "kubectl label secret redis tiercache.io/allow-reference=true -n "+ns))

	// The password Secret exists without the label: it is as good as
	// missing.
	redis := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis"}, Data: map[string][]byte{"password": []byte("first-password")}}
	if err := c.Create(ctx, redis); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, labelledSecret(ns, "purge", map[string]string{"token": "0123456789abcdef-token"})); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		if err := notValid("kubectl label secret redis tiercache.io/allow-reference=true -n " + ns)(); err != nil {
			return err
		}
		if m := condition(get(), v1alpha1.ConditionValid).Message; strings.Contains(m, "spec.purge.tokenSecretRef") {
			return errorf("the labelled purge Secret is still reported missing: %q", m)
		}
		return nil
	})

	// Labelling it makes the tier Ready.
	redis.Labels = map[string]string{inject.LabelAllowReference: "true"}
	if err := c.Update(ctx, redis); err != nil {
		t.Fatal(err)
	}
	var firstHash string
	eventually(t, 30*time.Second, func() error {
		got := get()
		for _, ct := range []string{v1alpha1.ConditionValid, v1alpha1.ConditionReady} {
			if cond := condition(got, ct); cond == nil || cond.Status != metav1.ConditionTrue || cond.ObservedGeneration != got.Generation {
				return errorf("%s = %+v", ct, cond)
			}
		}
		if got.Status.ObservedGeneration != got.Generation || got.Status.ConfigHash == "" || got.Status.L2Mode != "standalone" {
			return errorf("status %+v", got.Status)
		}
		firstHash = got.Status.ConfigHash
		return nil
	})

	// Rotating the password changes the rendered config; the hash is the
	// one of the config without values and with the resourceVersions.
	redis.Data["password"] = []byte("second-password")
	if err := c.Update(ctx, redis); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := get()
		if got.Status.ConfigHash == firstHash {
			return errorf("config hash still %s after the Secret rotated", firstHash)
		}
		if want := valuelessHash(t, c, got); got.Status.ConfigHash != want {
			return errorf("config hash %s, the config rendered from resourceVersions alone hashes %s", got.Status.ConfigHash, want)
		}
		return nil
	})

	// A spec change bumps observedGeneration.
	cur := get()
	cur.Spec.Purge.TokenSecretRef = nil
	if err := c.Update(ctx, cur); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		got := get()
		v := condition(got, v1alpha1.ConditionValid)
		if got.Status.ObservedGeneration != got.Generation || v == nil || v.Status != metav1.ConditionTrue {
			return errorf("generation %d, status %+v", got.Generation, got.Status)
		}
		return nil
	})
}
