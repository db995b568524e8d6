package inject

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
)

// InjectRequired decides whether pod gets the sidecar, and says why in a
// short sentence fit for a log line. namespace is used when the pod has no
// namespace of its own yet, as at admission of a pod created without one;
// excluded lists namespaces that are never touched (the caller passes the
// operator's own namespace and kube-system).
//
// A pod is injected when it carries a non-empty AnnotationTier, lives
// outside the excluded namespaces and has no ContainerName init container
// yet.
func InjectRequired(pod *corev1.Pod, namespace string, excluded []string) (bool, string) {
	if pod == nil {
		return false, "no pod to inject"
	}
	tier := pod.Annotations[AnnotationTier]
	if tier == "" {
		return false, fmt.Sprintf("pod has no %s annotation", AnnotationTier)
	}
	ns := pod.Namespace
	if ns == "" {
		ns = namespace
	}
	if slices.Contains(excluded, ns) {
		return false, fmt.Sprintf("namespace %q is excluded from injection", ns)
	}
	if injected(pod) {
		return false, fmt.Sprintf("pod already has the %s sidecar", ContainerName)
	}
	return true, fmt.Sprintf("pod requests tier %q", tier)
}

// injected reports whether pod already has the sidecar.
func injected(pod *corev1.Pod) bool {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == ContainerName {
			return true
		}
	}
	return false
}
