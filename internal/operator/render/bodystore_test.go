package render

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestBodyVolume(t *testing.T) {
	memLimit := func(s string) v1alpha1.SidecarSpec {
		return v1alpha1.SidecarSpec{Resources: &corev1.ResourceRequirements{
			Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(s)},
		}}
	}
	tests := map[string]struct {
		spec v1alpha1.CacheTierSpec
		want Volume
	}{
		"no body store means no volume": {},
		"a threshold without a size means no volume": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Threshold: qty("128Ki")}},
		},
		"a size alone is a disk volume": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("2Gi")}},
			want: Volume{Size: 2 << 30},
		},
		"medium Disk is a disk volume": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("64Mi"), Medium: v1alpha1.BodyStoreDisk}},
			want: Volume{Size: 64 << 20},
		},
		"medium Memory is a tmpfs": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1G"), Medium: v1alpha1.BodyStoreMemory}},
			want: Volume{Size: 1e9, Memory: true},
		},
		"a memory limit with room for the files and 64Mi is enough": {
			spec: v1alpha1.CacheTierSpec{
				BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Medium: v1alpha1.BodyStoreMemory},
				Sidecar:   memLimit("1088Mi"),
			},
			want: Volume{Size: 1 << 30, Memory: true},
		},
		"a memory limit does not bound a disk volume": {
			spec: v1alpha1.CacheTierSpec{
				BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("8Gi")},
				Sidecar:   memLimit("256Mi"),
			},
			want: Volume{Size: 8 << 30},
		},
		"a largest object equal to the size is allowed": {
			spec: v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), MaxObjectSize: qty("1Gi")}},
			want: Volume{Size: 1 << 30},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := BodyVolume(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("BodyVolume = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestBodyVolumeSizeAndMediumStayOutOfTheConfig(t *testing.T) {
	// Pod-level settings roll pods, not configs: two tiers that differ
	// only in size and medium push the same config.
	a, err := Redacted(tier(v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Threshold: qty("128Ki")}}))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Redacted(tier(v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("4Gi"), Medium: v1alpha1.BodyStoreMemory, Threshold: qty("128Ki")}}))
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash() != b.Hash() {
		t.Fatal("size or medium changed the rendered config")
	}
	if a.BodyStore.Threshold != 128<<10 {
		t.Fatalf("threshold %s, want 128Ki", a.BodyStore.Threshold)
	}
	// And a tier without a body store renders as it did before.
	c, err := Redacted(tier(v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi")}}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Hash() != tierconfig.Default().Hash() {
		t.Fatal("a body store with only a size changed the rendered config")
	}
}
