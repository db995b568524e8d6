package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestInjectRequired(t *testing.T) {
	excluded := []string{"tiercache-system", "kube-system"}
	pod := func(ns string, annotations map[string]string, init ...string) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Annotations: annotations}}
		for _, name := range init {
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: name})
		}
		return p
	}
	tier := map[string]string{AnnotationTier: "pages"}

	tests := map[string]struct {
		pod       *corev1.Pod
		namespace string
		want      bool
		reason    string
	}{
		"an annotated pod in an ordinary namespace is injected": {
			pod: pod("shop", tier), want: true, reason: `pod requests tier "pages"`,
		},
		"a pod without the tier annotation is left alone": {
			pod: pod("shop", nil), reason: "pod has no tiercache.io/tier annotation",
		},
		"an empty tier annotation does not request injection": {
			pod: pod("shop", map[string]string{AnnotationTier: ""}), reason: "pod has no tiercache.io/tier annotation",
		},
		"the port annotation alone does not request injection": {
			pod: pod("shop", map[string]string{AnnotationPort: "http"}), reason: "pod has no tiercache.io/tier annotation",
		},
		"pods in kube-system are never touched": {
			pod: pod("kube-system", tier), reason: `namespace "kube-system" is excluded from injection`,
		},
		"pods in the operator's namespace are never touched": {
			pod: pod("tiercache-system", tier), reason: `namespace "tiercache-system" is excluded from injection`,
		},
		"a pod without a namespace yet takes the request's namespace": {
			pod: pod("", tier), namespace: "kube-system", reason: `namespace "kube-system" is excluded from injection`,
		},
		"a pod without a namespace in an ordinary request namespace is injected": {
			pod: pod("", tier), namespace: "shop", want: true, reason: `pod requests tier "pages"`,
		},
		"the pod's own namespace wins over the request's": {
			pod: pod("shop", tier), namespace: "kube-system", want: true, reason: `pod requests tier "pages"`,
		},
		"an already injected pod is not injected again": {
			pod: pod("shop", tier, "migrate", ContainerName), reason: "pod already has the tiercache sidecar",
		},
		"an unrelated init container does not count as injected": {
			pod: pod("shop", tier, "migrate"), want: true, reason: `pod requests tier "pages"`,
		},
		"a nil pod is not injected": {
			pod: nil, reason: "no pod to inject",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, reason := InjectRequired(tc.pod, tc.namespace, excluded)
			if got != tc.want || reason != tc.reason {
				t.Errorf("InjectRequired = (%v, %q), want (%v, %q)", got, reason, tc.want, tc.reason)
			}
		})
	}
}
