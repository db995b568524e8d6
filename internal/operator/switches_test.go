package operator

import (
	"context"
	"strings"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/render"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testkube"
)

// TestChoiceSwitchesThroughTheAPIServer: spec.defaults.updateFromHead,
// forwardClientValidators and storePostResponses survive the real API
// server's schema (not pruned), reach the rendered config, and kubectl
// explain documents them.
func TestChoiceSwitchesThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	tier := newTier(ns, "choices", v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{
		UpdateFromHead: true, ForwardClientValidators: true, StorePostResponses: true,
	}})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.CacheTier
	if err := c.Get(ctx, client.ObjectKeyFromObject(tier), &got); err != nil {
		t.Fatal(err)
	}
	d := got.Spec.Defaults
	if !d.UpdateFromHead || !d.ForwardClientValidators || !d.StorePostResponses {
		t.Fatalf("the API server gave back %+v", d)
	}
	rendered, err := render.Redacted(&got)
	if err != nil {
		t.Fatal(err)
	}
	if rd := rendered.Defaults; !rd.UpdateFromHead || !rd.ForwardClientValidators || !rd.StorePostResponses {
		t.Fatalf("the sidecars would get %+v", rd)
	}

	kubectl, path := kubectlPath(t), testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	for field, want := range map[string]string{
		"ct.spec.defaults.updateFromHead":          "RFC 9111 §4.3.5",
		"ct.spec.defaults.forwardClientValidators": "304 is passed through",
		"ct.spec.defaults.storePostResponses":      "decide what every other client's GET receives",
	} {
		out, err := explain(kubectl, path, field)
		if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("kubectl explain %s (%v) does not mention %q:\n%s", field, err, want, out)
		}
	}
}

// TestRequestBufferingThroughTheAPIServer: spec.origin.requestBuffer and
// streamRequestBodies survive the real API server's schema (not pruned),
// reach the rendered config, and kubectl explain documents them.
func TestRequestBufferingThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	tier := newTier(ns, "buffering", v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{
		RequestBuffer: qty("256Ki"), StreamRequestBodies: true,
	}})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	var got v1alpha1.CacheTier
	if err := c.Get(ctx, client.ObjectKeyFromObject(tier), &got); err != nil {
		t.Fatal(err)
	}
	o := got.Spec.Origin
	if o.RequestBuffer == nil || o.RequestBuffer.String() != "256Ki" || !o.StreamRequestBodies {
		t.Fatalf("the API server gave back %+v", o)
	}
	rendered, err := render.Redacted(&got)
	if err != nil {
		t.Fatal(err)
	}
	if ro := rendered.Origin; ro.RequestBuffer != 256*tierconfig.Ki || !ro.StreamRequestBodies {
		t.Fatalf("the sidecars would get %+v", ro)
	}

	kubectl, path := kubectlPath(t), testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	for field, want := range map[string]string{
		"ct.spec.origin.requestBuffer":       "proxy_request_buffering",
		"ct.spec.origin.streamRequestBodies": "answers before its end",
	} {
		out, err := explain(kubectl, path, field)
		if err != nil || !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("kubectl explain %s (%v) does not mention %q:\n%s", field, err, want, out)
		}
	}
}
