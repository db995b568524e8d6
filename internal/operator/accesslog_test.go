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

// TestAccessLogThroughTheAPIServer: spec.accessLog survives the real API
// server's schema (not pruned), reaches the rendered config, is refused
// with the field named when out of range, and kubectl explain documents
// it.
func TestAccessLogThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	off := false
	spec := v1alpha1.AccessLogSpec{Enabled: &off, SamplePercent: 25, ExcludePaths: []string{"/healthz", "/static/*"},
		QueryParams: []string{"page"}, TrustForwardedFor: true}
	tier := newTier(ns, "accesslog", v1alpha1.CacheTierSpec{AccessLog: spec})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.CacheTier
	if err := c.Get(ctx, client.ObjectKeyFromObject(tier), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec.AccessLog, spec) {
		t.Fatalf("the API server gave back %+v, want %+v", got.Spec.AccessLog, spec)
	}
	rendered, err := render.Redacted(&got)
	if err != nil {
		t.Fatal(err)
	}
	if a := rendered.AccessLog; a.Enabled == nil || *a.Enabled || a.SamplePercent != 25 || len(a.ExcludePaths) != 2 ||
		len(a.QueryParams) != 1 || !a.TrustForwardedFor {
		t.Fatalf("the sidecars would get %+v", a)
	}

	for name, bad := range map[string]struct {
		spec  v1alpha1.AccessLogSpec
		field string
	}{
		"a sample above 100":         {v1alpha1.AccessLogSpec{SamplePercent: 101}, "spec.accessLog.samplePercent"},
		"an exclusion without a '/'": {v1alpha1.AccessLogSpec{ExcludePaths: []string{"healthz"}}, "spec.accessLog.excludePaths[0]"},
		"a '*' inside an exclusion":  {v1alpha1.AccessLogSpec{ExcludePaths: []string{"/a*/b"}}, "spec.accessLog.excludePaths[0]"},
		"a '*' inside a query name":  {v1alpha1.AccessLogSpec{QueryParams: []string{"a*b"}}, "spec.accessLog.queryParams[0]"},
	} {
		t.Run(name+" is refused", func(t *testing.T) {
			err := c.Create(ctx, newTier(ns, "accesslog-bad", v1alpha1.CacheTierSpec{AccessLog: bad.spec}))
			if err == nil || !strings.Contains(err.Error(), bad.field) {
				t.Fatalf("created, or refused without naming %s: %v", bad.field, err)
			}
		})
	}

	kubectl, path := kubectlPath(t), testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	for field, want := range map[string]string{
		"ct.spec.accessLog":                   "one JSON line per request",
		"ct.spec.accessLog.samplePercent":     "answers with a 5xx status are always logged",
		"ct.spec.accessLog.queryParams":       "may be secrets",
		"ct.spec.accessLog.trustForwardedFor": "X-Forwarded-For",
	} {
		out, err := explain(kubectl, path, field)
		if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("kubectl explain %s (%v) does not mention %q:\n%s", field, err, want, out)
		}
	}
}
