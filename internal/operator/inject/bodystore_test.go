package inject

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// injectBodyStore injects errorPod with errorParams and the given body
// store and returns the pod.
func injectBodyStore(t *testing.T, edit func(*Params)) *corev1.Pod {
	t.Helper()
	pod := errorPod()
	p := errorParams()
	p.ConfigHash = "0123abcd"
	edit(&p)
	if err := Inject(pod, p); err != nil {
		t.Fatalf("Inject: %v", err)
	}
	return pod
}

func sidecarOf(pod *corev1.Pod) corev1.Container { return pod.Spec.InitContainers[0] }

func TestAMemoryBodyStoreRaisesTheDerivedMemory(t *testing.T) {
	tests := map[string]struct {
		size   int64
		medium corev1.StorageMedium
		want   string // memory request and limit
	}{
		"no body store: L1 × 1.25 + 128Mi":                   {want: "208Mi"},
		"a disk body store leaves the memory as it is":       {size: 4 << 30, want: "208Mi"},
		"a memory body store adds its size":                  {size: 1 << 30, medium: corev1.StorageMediumMemory, want: "1232Mi"},
		"a memory body store adds its size rounded up to Mi": {size: 100_000_000, medium: corev1.StorageMediumMemory, want: "304Mi"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pod := injectBodyStore(t, func(p *Params) { p.BodyStoreSize, p.BodyStoreMedium = tt.size, tt.medium })
			res := sidecarOf(pod).Resources
			want := resource.MustParse(tt.want)
			if req, limit := res.Requests[corev1.ResourceMemory], res.Limits[corev1.ResourceMemory]; req.Cmp(want) != 0 || limit.Cmp(want) != 0 {
				t.Fatalf("memory request %s, limit %s; want both %s", req.String(), limit.String(), tt.want)
			}
		})
	}
}

func TestAMemoryBodyStoreLowersTheGoLimitUnderAGivenMemoryLimit(t *testing.T) {
	tests := map[string]struct {
		medium corev1.StorageMedium
		want   string
	}{
		"on disk the Go limit is 90% of the container's": {want: "--memory-limit=1843Mi"},
		"in memory it is 90% of what the tmpfs leaves":   {medium: corev1.StorageMediumMemory, want: "--memory-limit=921Mi"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pod := injectBodyStore(t, func(p *Params) {
				p.BodyStoreSize, p.BodyStoreMedium = 1<<30, tt.medium
				p.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
			})
			c := sidecarOf(pod)
			if !slices.Contains(c.Args, tt.want) {
				t.Fatalf("args %q lack %s", c.Args, tt.want)
			}
			if limit := c.Resources.Limits[corev1.ResourceMemory]; limit.String() != "2Gi" {
				t.Fatalf("the tier's memory limit became %s", limit.String())
			}
		})
	}
}

func TestTheBodyStoreVolumeMountAndFlags(t *testing.T) {
	pod := injectBodyStore(t, func(p *Params) { p.BodyStoreSize, p.BodyStoreMedium = 1_000_000_000, corev1.StorageMediumMemory })
	c := sidecarOf(pod)
	for _, want := range []string{"--body-dir=" + BodyDir, "--body-dir-size=1000000000"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %q lack %s", c.Args, want)
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == BodiesVolumeName && m.MountPath == BodyDir && !m.ReadOnly
	}) {
		t.Errorf("no writable mount of %s at %s: %+v", BodiesVolumeName, BodyDir, c.VolumeMounts)
	}
	i := slices.IndexFunc(pod.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == BodiesVolumeName })
	if i < 0 || pod.Spec.Volumes[i].EmptyDir == nil {
		t.Fatalf("no emptyDir %s: %+v", BodiesVolumeName, pod.Spec.Volumes)
	}
	ed := pod.Spec.Volumes[i].EmptyDir
	if ed.Medium != corev1.StorageMediumMemory || ed.SizeLimit == nil || ed.SizeLimit.Value() != 1_125_000_000 {
		t.Fatalf("emptyDir %+v, want medium Memory and sizeLimit size + size/8 = 1125000000", ed)
	}

	// Without a body store: none of it.
	plain := injectBodyStore(t, func(*Params) {})
	if slices.ContainsFunc(sidecarOf(plain).Args, func(a string) bool { return strings.HasPrefix(a, "--body-dir") }) ||
		slices.ContainsFunc(plain.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == BodiesVolumeName }) {
		t.Fatal("a tier without a body store got its flags or volume")
	}
}

func TestTheConfigHashAnnotationFollowsTheBodyStore(t *testing.T) {
	hash := func(size int64, medium corev1.StorageMedium) string {
		return injectBodyStore(t, func(p *Params) { p.BodyStoreSize, p.BodyStoreMedium = size, medium }).Annotations[AnnotationConfigHash]
	}
	plain := hash(0, "")
	if plain != "0123abcd" {
		t.Fatalf("without a body store the annotation is %q, want the config hash", plain)
	}
	seen := map[string]string{plain: "no body store"}
	for _, c := range []struct {
		name   string
		size   int64
		medium corev1.StorageMedium
	}{
		{"a 1Gi disk body store", 1 << 30, ""},
		{"a 2Gi disk body store", 2 << 30, ""},
		{"a 1Gi memory body store", 1 << 30, corev1.StorageMediumMemory},
	} {
		h := hash(c.size, c.medium)
		if other, dup := seen[h]; dup {
			t.Errorf("%s and %s give the pod the same %s", c.name, other, AnnotationConfigHash)
		}
		seen[h] = c.name
		if hash(c.size, c.medium) != h {
			t.Errorf("%s: the annotation is not a function of the params", c.name)
		}
	}
}

func TestBodyStoreParamsAreChecked(t *testing.T) {
	tests := map[string]struct {
		edit func(*Params)
		want string
	}{
		"a negative size is refused": {
			func(p *Params) { p.BodyStoreSize = -1 }, "spec.bodyStore.size: -1 bytes is out of range",
		},
		"a size over 1Ti is refused": {
			func(p *Params) { p.BodyStoreSize = 1<<40 + 1 }, "spec.bodyStore.size",
		},
		"an unknown medium is refused": {
			func(p *Params) { p.BodyStoreSize, p.BodyStoreMedium = 1<<30, "HugePages" }, `medium "HugePages"`,
		},
		"a medium without a size is refused": {
			func(p *Params) { p.BodyStoreMedium = corev1.StorageMediumMemory }, "a body store medium without a size",
		},
		"a pod volume named like the body volume is refused": {
			func(*Params) {}, `volume name "tiercache-bodies" is reserved`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			pod := errorPod()
			if strings.Contains(name, "pod volume") {
				pod.Spec.Volumes = []corev1.Volume{{Name: BodiesVolumeName}}
			}
			p := errorParams()
			tt.edit(&p)
			before := pod.DeepCopy()
			err := Inject(pod, p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Inject: %v, want an error containing %q", err, tt.want)
			}
			if pod.Spec.InitContainers != nil || len(pod.Spec.Volumes) != len(before.Spec.Volumes) {
				t.Fatal("a refused pod was changed")
			}
		})
	}
}
