package inject

import (
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Service meshes inject init containers of their own: one that redirects
// the pod's traffic with iptables (or, with a CNI plugin, one that checks
// the redirection), and, as a native sidecar, the mesh proxy. The
// Tiercache sidecar goes right after the last of them, so that every
// connection it makes (Redis, the control plane) is made after the
// redirection exists and, with a native proxy, once the proxy is up:
// none escapes the mesh, and a Redis that requires the mesh's mTLS is
// reached through it. Without a mesh the sidecar goes first, before the
// pod's own init containers.
var meshInitContainers = map[string]bool{
	// Istio (pkg/kube/inject): iptables, the CNI plugin's check, the
	// optional core dump set-up, and the proxy when it is a native
	// sidecar.
	"istio-init":       true,
	"istio-validation": true,
	"enable-core-dump": true,
	"istio-proxy":      true,
	// Linkerd: iptables, the CNI plugin's check, the native proxy.
	"linkerd-init":              true,
	"linkerd-network-validator": true,
	"linkerd-proxy":             true,
}

// sidecarIndex is where the sidecar goes among the pod's init containers:
// after the last mesh init container, else first.
func sidecarIndex(inits []corev1.Container) int {
	at := 0
	for i, c := range inits {
		if meshInitContainers[c.Name] {
			at = i + 1
		}
	}
	return at
}

// Istio's pod annotations.
const (
	// istioStatus marks a pod Istio's injector has injected.
	istioStatus = "sidecar.istio.io/status"
	// IstioExcludeInboundPorts lists ports Istio does not redirect to its
	// proxy; the injector adds the sidecar's admin port to it.
	IstioExcludeInboundPorts = "traffic.sidecar.istio.io/excludeInboundPorts"
)

// istioInjected reports whether Istio has injected the pod.
func istioInjected(pod *corev1.Pod) bool {
	if _, ok := pod.Annotations[istioStatus]; ok {
		return true
	}
	for _, c := range allContainers(&pod.Spec) {
		if c.Name == "istio-proxy" {
			return true
		}
	}
	return false
}

// excludeInboundPort adds port to the comma-separated list value, unless
// it is there already.
func excludeInboundPort(value string, port int32) string {
	p := strconv.Itoa(int(port))
	var ports []string
	for _, s := range strings.Split(value, ",") {
		if s = strings.TrimSpace(s); s != "" {
			ports = append(ports, s)
		}
	}
	if slices.Contains(ports, p) {
		return strings.Join(ports, ",")
	}
	return strings.Join(append(ports, p), ",")
}
