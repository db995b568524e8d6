package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestGOMAXPROCSFollowsTheCPULimit: the sidecar gets GOMAXPROCS from its
// own CPU limit exactly when it ends up with one, whichever of the tier
// and the pod's annotations set it, and never twice.
func TestGOMAXPROCSFollowsTheCPULimit(t *testing.T) {
	tierResources := func(limits, requests corev1.ResourceList) func(*Params) {
		return func(p *Params) {
			p.Resources = &corev1.ResourceRequirements{Limits: limits, Requests: requests}
		}
	}
	cpu := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(q)}
	}
	tests := map[string]struct {
		params      func(*Params)
		annotations map[string]string
		want        bool
	}{
		"derived resources have no cpu limit and set no GOMAXPROCS": {},
		"a tier without a cpu limit sets no GOMAXPROCS": {
			params: tierResources(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}, cpu("250m")),
		},
		"a tier cpu limit of 500m sets GOMAXPROCS from the limit": {
			params: tierResources(cpu("500m"), nil), want: true,
		},
		"a tier cpu limit of 2 sets GOMAXPROCS from the limit": {
			params: tierResources(cpu("2"), cpu("1")), want: true,
		},
		"an annotated cpu limit sets GOMAXPROCS over derived resources": {
			annotations: map[string]string{AnnotationCPULimit: "1"}, want: true,
		},
		"an annotated cpu limit over the tier's sets GOMAXPROCS once": {
			params:      tierResources(cpu("500m"), nil),
			annotations: map[string]string{AnnotationCPULimit: "1500m"}, want: true,
		},
		"a tier cpu limit of 0, which Kubernetes reads as none, sets no GOMAXPROCS": {
			params: tierResources(cpu("0"), nil),
		},
		"an annotated cpu request alone sets no GOMAXPROCS": {
			annotations: map[string]string{AnnotationCPURequest: "200m"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, params := errorPod(), errorParams()
			for k, v := range tc.annotations {
				pod.Annotations[k] = v
			}
			if tc.params != nil {
				tc.params(&params)
			}
			if err := Inject(pod, params); err != nil {
				t.Fatalf("Inject: %v", err)
			}
			sc := sidecarOf(pod)
			var got []corev1.EnvVar
			for _, e := range sc.Env {
				if e.Name == EnvGOMAXPROCS {
					got = append(got, e)
				}
			}
			switch {
			case !tc.want && len(got) != 0:
				t.Errorf("GOMAXPROCS = %+v, want none (limits %v)", got, sc.Resources.Limits)
			case tc.want && len(got) != 1:
				t.Fatalf("%d GOMAXPROCS entries, want 1 (limits %v)", len(got), sc.Resources.Limits)
			case tc.want:
				want := corev1.EnvVar{Name: EnvGOMAXPROCS, ValueFrom: &corev1.EnvVarSource{
					ResourceFieldRef: &corev1.ResourceFieldSelector{
						ContainerName: sc.Name,
						Resource:      "limits.cpu",
						Divisor:       resource.MustParse("1"),
					},
				}}
				if !equality.Semantic.DeepEqual(got[0], want) {
					t.Errorf("GOMAXPROCS = %+v\nwant %+v", got[0].ValueFrom.ResourceFieldRef, want.ValueFrom.ResourceFieldRef)
				}
			}
		})
	}
}
