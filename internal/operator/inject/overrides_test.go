package inject

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// TestAnnotationErrors: a bad per-pod annotation refuses the pod with a
// message naming the annotation, and leaves the pod untouched; PodOverrides
// (what the webhook checks first) refuses what it can see alone.
func TestAnnotationErrors(t *testing.T) {
	tests := map[string]struct {
		annotations map[string]string
		pod         func(*corev1.Pod)
		params      func(*Params)
		want        string
		// alone: PodOverrides refuses it too, without the tier.
		alone bool
	}{
		"a memory limit that is not a quantity is refused": {
			annotations: map[string]string{AnnotationMemoryLimit: "lots"},
			want:        `annotation tiercache.io/sidecar-memory-limit: "lots" is not a quantity (e.g. 512Mi)`, alone: true,
		},
		"a cpu request that is not a quantity is refused": {
			annotations: map[string]string{AnnotationCPURequest: "1 core"},
			want:        `annotation tiercache.io/sidecar-cpu-request: "1 core" is not a quantity (e.g. 250m)`, alone: true,
		},
		"a zero cpu limit is refused": {
			annotations: map[string]string{AnnotationCPULimit: "0"},
			want:        `annotation tiercache.io/sidecar-cpu-limit: must be > 0 (got 0)`, alone: true,
		},
		"a negative memory request is refused": {
			annotations: map[string]string{AnnotationMemoryRequest: "-1Mi"},
			want:        `annotation tiercache.io/sidecar-memory-request: must be > 0 (got -1Mi)`, alone: true,
		},
		"a memory request above the annotated limit is refused naming both": {
			annotations: map[string]string{AnnotationMemoryRequest: "1Gi", AnnotationMemoryLimit: "512Mi"},
			want:        `annotation tiercache.io/sidecar-memory-request: 1Gi is above tiercache.io/sidecar-memory-limit: 512Mi`,
		},
		"a memory request above the derived limit is refused naming the limit's annotation": {
			annotations: map[string]string{AnnotationMemoryRequest: "2Gi"},
			want:        `annotation tiercache.io/sidecar-memory-request: 2Gi is above the sidecar's memory limit 208Mi; raise the limit with the annotation tiercache.io/sidecar-memory-limit`,
		},
		"a cpu request above the tier's cpu limit is refused": {
			annotations: map[string]string{AnnotationCPURequest: "2"},
			params: func(p *Params) {
				p.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m")}}
			},
			want: `annotation tiercache.io/sidecar-cpu-request: 2 is above the sidecar's cpu limit 500m; raise the limit with the annotation tiercache.io/sidecar-cpu-limit`,
		},
		"a memory limit too small for the Go runtime is refused": {
			annotations: map[string]string{AnnotationMemoryLimit: "64Mi"},
			want:        `annotation tiercache.io/sidecar-memory-limit: 64Mi leaves the sidecar's Go runtime 57Mi (90% of the limit less a Memory body store of 0), below its 64Mi minimum; raise the limit`,
		},
		"a memory limit that a Memory body store eats is refused": {
			annotations: map[string]string{AnnotationMemoryLimit: "256Mi"},
			params: func(p *Params) {
				p.BodyStoreSize, p.BodyStoreMedium = 200<<20, corev1.StorageMediumMemory
			},
			want: `annotation tiercache.io/sidecar-memory-limit: 256Mi leaves the sidecar's Go runtime 50Mi (90% of the limit less a Memory body store of 200Mi), below its 64Mi minimum; raise the limit`,
		},
		"a log level the sidecar does not know is refused": {
			annotations: map[string]string{AnnotationLogLevel: "trace"},
			want:        `annotation tiercache.io/sidecar-log-level: "trace" is not one of debug, info, warn, error`, alone: true,
		},
		"a log level in capitals is refused, as the sidecar would": {
			annotations: map[string]string{AnnotationLogLevel: "DEBUG"},
			want:        `annotation tiercache.io/sidecar-log-level: "DEBUG" is not one of debug, info, warn, error`, alone: true,
		},
		"a drain delay that is not a duration is refused": {
			annotations: map[string]string{AnnotationDrainDelay: "5"},
			want:        `annotation tiercache.io/sidecar-drain-delay: "5" is not a duration (e.g. 5s)`, alone: true,
		},
		"a drain delay longer than the sidecar allows is refused": {
			annotations: map[string]string{AnnotationDrainDelay: "6m"},
			want:        `annotation tiercache.io/sidecar-drain-delay: must be between 0s and 5m0s (got 6m)`, alone: true,
		},
		"a drain delay that does not fit the grace period is refused": {
			annotations: map[string]string{AnnotationDrainDelay: "30s"},
			want:        `annotation tiercache.io/sidecar-drain-delay: 30s does not fit in the pod's terminationGracePeriodSeconds (30s): the kubelet would kill the sidecar while it drains; lower the delay or raise the grace period`,
		},
		"a drain delay is checked against the pod's own grace period": {
			annotations: map[string]string{AnnotationDrainDelay: "10s"},
			pod:         func(p *corev1.Pod) { p.Spec.TerminationGracePeriodSeconds = ptr.To(int64(10)) },
			want:        `annotation tiercache.io/sidecar-drain-delay: 10s does not fit in the pod's terminationGracePeriodSeconds (10s): the kubelet would kill the sidecar while it drains; lower the delay or raise the grace period`,
		},
		"a uid of root is refused": {
			params: func(p *Params) { p.RunAsUser = ptr.To(int64(0)) },
			want:   `--sidecar-run-as-user: must be > 0, the sidecar runs as non-root (got 0)`,
		},
		"an operator drain delay out of range is refused": {
			params: func(p *Params) { p.DrainDelay = ptr.To(-time.Second) },
			want:   `--sidecar-drain-delay: must be between 0s and 5m0s (got -1s)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod, params := errorPod(), errorParams()
			for k, v := range tc.annotations {
				pod.Annotations[k] = v
			}
			if tc.pod != nil {
				tc.pod(pod)
			}
			if tc.params != nil {
				tc.params(&params)
			}
			_, aloneErr := PodOverrides(pod)
			switch {
			case tc.alone && (aloneErr == nil || aloneErr.Error() != tc.want):
				t.Errorf("PodOverrides error = %v\nwant %s", aloneErr, tc.want)
			case !tc.alone && aloneErr != nil:
				t.Errorf("PodOverrides error = %v, want none (only Inject can tell)", aloneErr)
			}
			before := pod.DeepCopy()
			err := Inject(pod, params)
			if err == nil || err.Error() != tc.want {
				t.Errorf("Inject error = %v\nwant %s", err, tc.want)
			}
			if !reflect.DeepEqual(pod, before) {
				t.Errorf("a failed Inject changed the pod")
			}
		})
	}
}

func TestShutdown(t *testing.T) {
	sec := func(n int) time.Duration { return time.Duration(n) * time.Second }
	tests := map[string]struct {
		grace, def     time.Duration
		annotated      *time.Duration
		drain, timeout time.Duration
	}{
		"the default grace period keeps the default drain delay and leaves 25s": {sec(30), sec(5), nil, sec(5), sec(25)},
		"a short grace period halves the default drain delay":                   {sec(6), sec(5), nil, sec(3), sec(3)},
		"a zero grace period drains for nothing and still gets 1s":              {0, sec(5), nil, 0, sec(1)},
		"a long grace period goes to in-flight requests":                        {sec(120), sec(5), nil, sec(5), sec(115)},
		"an annotated delay wins over the default":                              {sec(90), sec(5), ptr.To(sec(20)), sec(20), sec(70)},
		"an annotated zero turns the delay off":                                 {sec(30), sec(5), ptr.To(time.Duration(0)), 0, sec(30)},
		"an annotated zero fits even a zero grace period":                       {0, sec(5), ptr.To(time.Duration(0)), 0, sec(1)},
		"the operator's default is halved like the built-in one":                {sec(10), sec(8), nil, sec(5), sec(5)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			drain, timeout, err := shutdown(tc.grace, tc.def, tc.annotated)
			if err != nil || drain != tc.drain || timeout != tc.timeout {
				t.Errorf("shutdown = %s, %s, %v; want %s, %s", drain, timeout, err, tc.drain, tc.timeout)
			}
		})
	}
}

func TestSidecarIndex(t *testing.T) {
	names := func(ns ...string) []corev1.Container {
		var cs []corev1.Container
		for _, n := range ns {
			cs = append(cs, corev1.Container{Name: n})
		}
		return cs
	}
	tests := map[string]struct {
		inits []corev1.Container
		want  int
	}{
		"without init containers the sidecar is the only one":              {nil, 0},
		"without a mesh the sidecar goes before the pod's init containers": {names("migrate", "proxy"), 0},
		"after istio-init when Istio's proxy is a regular container":       {names("istio-init"), 1},
		"after Istio's native proxy, before the pod's init containers":     {names("istio-init", "istio-proxy", "migrate"), 2},
		"after the CNI plugin's validation container":                      {names("istio-validation", "istio-proxy", "migrate"), 2},
		"after istio-init placed last by Istio, behind the pod's own":      {names("migrate", "istio-init"), 2},
		"after Linkerd's init and native proxy":                            {names("linkerd-init", "linkerd-proxy", "migrate"), 2},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := sidecarIndex(tc.inits); got != tc.want {
				t.Errorf("sidecarIndex = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestExcludeInboundPort(t *testing.T) {
	tests := map[string]struct {
		value string
		want  string
	}{
		"an empty list gets the port":                {"", "15190"},
		"the port joins the ports already excluded":  {"9100, 9200", "9100,9200,15190"},
		"a port already excluded is not added twice": {"15190,9100", "15190,9100"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := excludeInboundPort(tc.value, 15190); got != tc.want {
				t.Errorf("excludeInboundPort(%q) = %q, want %q", tc.value, got, tc.want)
			}
		})
	}
}
