package operator

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// TestCountColumnsShowZeroOnANewTier: a tier without pods shows 0, not a
// blank, in every count column of kubectl get ct (-o wide too), and the
// stored status holds the zeros: a status patch computed from Go structs
// drops a 0 that was 0 before, which a stored object without the field
// never gets.
func TestCountColumnsShowZeroOnANewTier(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	if err := c.Create(ctx, newTier(ns, "empty", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: ns, Name: "empty"}
	eventually(t, 30*time.Second, func() error {
		tier := tierOf(t, c, key)
		if tier.Status.ObservedGeneration != tier.Generation || condition(tier, v1alpha1.ConditionReady) == nil {
			return fmt.Errorf("status not written yet: %+v", tier.Status)
		}
		return nil
	})
	var raw unstructured.Unstructured
	raw.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("CacheTier"))
	if err := c.Get(ctx, key, &raw); err != nil {
		t.Fatal(err)
	}
	for _, path := range [][]string{
		{"status", "injectedPods"}, {"status", "connectedSidecars"},
		{"status", "sidecars", "current"}, {"status", "sidecars", "behind"}, {"status", "sidecars", "rejected"}, {"status", "sidecars", "total"},
	} {
		v, found, err := unstructured.NestedFieldNoCopy(raw.Object, path...)
		if err != nil || !found || fmt.Sprint(v) != "0" {
			t.Errorf("stored %v = %v (found %v, %v), want 0", path, v, found, err)
		}
	}
	zeros := map[string]string{"PODS": "0", "CURRENT": "0", "BEHIND": "0", "REJECTED": "0"}
	checkGetColumns(t, ns, "empty", zeros)
	zeros["CONNECTED"] = "0"
	checkGetColumns(t, ns, "empty", zeros, "-o", "wide")
}
