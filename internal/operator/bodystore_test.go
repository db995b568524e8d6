package operator

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// TestABodyStoreTierIsInjectedThroughTheAPIServer: a tier with a Memory
// body store gives its pods the emptyDir, the mount, the flags and the
// memory for the tmpfs; the tier-level settings reach the config, the
// pod-level ones only the pod.
func TestABodyStoreTierIsInjectedThroughTheAPIServer(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()

	tier := newTier(ns, "media", v1alpha1.CacheTierSpec{
		L1: v1alpha1.L1Spec{MaxSize: qty("64Mi")},
		BodyStore: &v1alpha1.BodyStoreSpec{
			Size: qty("1Gi"), Medium: v1alpha1.BodyStoreMemory,
			Threshold: qty("128Ki"), MaxObjectSize: qty("512Mi"),
		},
	})
	if err := c.Create(ctx, tier); err != nil {
		t.Fatal(err)
	}
	pod := appPod(ns, "media-1", map[string]string{inject.AnnotationTier: "media"})
	eventually(t, 30*time.Second, func() error { return c.Create(ctx, pod) })
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &got); err != nil {
		t.Fatal(err)
	}
	sc := sidecarOf(&got)
	if sc == nil {
		t.Fatal("no sidecar")
	}
	for _, want := range []string{"--body-dir=" + inject.BodyDir, "--body-dir-size=1Gi"} {
		if !slices.Contains(sc.Args, want) {
			t.Errorf("args %q lack %s", sc.Args, want)
		}
	}
	i := slices.IndexFunc(got.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == inject.BodiesVolumeName })
	if i < 0 || got.Spec.Volumes[i].EmptyDir == nil {
		t.Fatalf("no emptyDir %s in %+v", inject.BodiesVolumeName, got.Spec.Volumes)
	}
	if ed := got.Spec.Volumes[i].EmptyDir; ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit.Cmp(resource.MustParse("1152Mi")) != 0 {
		t.Errorf("emptyDir medium %q sizeLimit %v, want Memory and 1152Mi", ed.Medium, ed.SizeLimit)
	}
	want := inject.DerivedMemory(64 << 20)
	want.Add(resource.MustParse("1Gi"))
	if mem := sc.Resources.Limits.Memory(); mem.Cmp(want) != 0 {
		t.Errorf("memory limit %s, want %s (L1's plus the tmpfs)", mem, want.String())
	}
	e, ok := envValue(sc, inject.EnvInitialConfig)
	if !ok {
		t.Fatal("no initial config")
	}
	cfg, err := tierconfig.Parse([]byte(e.Value))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BodyStore != (tierconfig.BodyStore{Threshold: 128 << 10, MaxObjectSize: 512 << 20}) {
		t.Errorf("the initial config's body store is %+v", cfg.BodyStore)
	}
	if got.Annotations[inject.AnnotationConfigHash] == cfg.Hash() {
		t.Error("the pod's config-hash does not cover the body store's size and medium")
	}
}
