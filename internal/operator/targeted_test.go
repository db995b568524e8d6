package operator

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/render"
	"github.com/tiercache/tiercache/test/testkube"
)

// TestTargetedCacheControlThroughTheAPIServer: spec.defaults.targetedCacheControl
// as a user writes it, through the real API server's schema and the
// validating webhook, and back.
func TestTargetedCacheControlThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	// Kept as written: an empty list (off) is not dropped or defaulted,
	// and order counts.
	for name, fields := range map[string][]string{
		"off":    {},
		"custom": {"Tiercache-Cache-Control", "CDN-Cache-Control"},
	} {
		tier := newTier(ns, name, v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{
			TargetedCacheControl: &v1alpha1.TargetedCacheControlSpec{Fields: fields, Strip: name == "custom"},
		}})
		if err := c.Create(ctx, tier); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKeyFromObject(tier), &got); err != nil {
			t.Fatal(err)
		}
		tc := got.Spec.Defaults.TargetedCacheControl
		if tc == nil || tc.Fields == nil || !reflect.DeepEqual(tc.Fields, fields) || tc.Strip != (name == "custom") {
			t.Fatalf("%s: the API server gave back %#v", name, tc)
		}
		rendered, err := render.Redacted(&got)
		if err != nil {
			t.Fatal(err)
		}
		if obeyed := rendered.Defaults.TargetedFields(); !reflect.DeepEqual(obeyed, fields) {
			t.Fatalf("%s: the sidecars would obey %q, want %q", name, obeyed, fields)
		}
	}

	cases := map[string]struct {
		fields []string
		want   []string // substrings of the error
	}{
		"a name that is not a header name is refused by the schema": {
			fields: []string{"CDN Cache Control"},
			want:   []string{"spec.defaults.targetedCacheControl.fields[0]", "should match"},
		},
		"nine names are refused by the schema": {
			fields: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"},
			want:   []string{"spec.defaults.targetedCacheControl.fields", "must have at most 8 items"},
		},
		"Cache-Control is refused by the webhook": {
			fields: []string{"Cache-Control"},
			want:   []string{"admission webhook", "spec.defaults.targetedCacheControl.fields[0]", "must not be Cache-Control"},
		},
		"a case-insensitive duplicate is refused by the webhook": {
			fields: []string{"CDN-Cache-Control", "cdn-cache-control"},
			want:   []string{"admission webhook", "spec.defaults.targetedCacheControl.fields[1]", "duplicates fields[0]"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := c.Create(ctx, newTier(ns, "invalid", v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{
				TargetedCacheControl: &v1alpha1.TargetedCacheControlSpec{Fields: tc.fields},
			}}))
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

	kubectl, path := kubectlPath(t), testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	for field, want := range map[string]string{
		"ct.spec.defaults.targetedCacheControl":        "RFC",
		"ct.spec.defaults.targetedCacheControl.fields": "An empty list turns targeted",
		"ct.spec.defaults.targetedCacheControl.strip":  "a CDN in front",
	} {
		out, err := explain(kubectl, path, field)
		if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("kubectl explain %s (%v) does not mention %q:\n%s", field, err, want, out)
		}
	}
}
