package inject

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
)

// portRef locates a port: spec.containers[container].ports[port].
type portRef struct{ container, port int }

// frontedPort picks the application port the sidecar fronts: the one named
// or numbered by AnnotationPort, else the TCP port named PreferredPortName,
// else the first TCP port of the first container that has one. Only regular
// containers are searched, in order.
func frontedPort(pod *corev1.Pod) (portRef, error) {
	containers := pod.Spec.Containers
	if want := pod.Annotations[AnnotationPort]; want != "" {
		// IANA port names contain a letter, so a number is never a name.
		number, numeric := strconv.Atoi(want)
		for ci := range containers {
			for pi, cp := range containers[ci].Ports {
				if (numeric == nil && int(cp.ContainerPort) == number) || (numeric != nil && cp.Name == want) {
					if !isTCP(cp) {
						return portRef{}, fmt.Errorf("annotation %s: port %q of container %q is %s; only TCP can be fronted", AnnotationPort, want, containers[ci].Name, cp.Protocol)
					}
					return portRef{ci, pi}, nil
				}
			}
		}
		return portRef{}, fmt.Errorf("annotation %s: no container port named or numbered %q", AnnotationPort, want)
	}

	first, found := portRef{}, false
	for ci := range containers {
		for pi, cp := range containers[ci].Ports {
			if !isTCP(cp) {
				continue
			}
			if cp.Name == PreferredPortName {
				return portRef{ci, pi}, nil
			}
			if !found {
				first, found = portRef{ci, pi}, true
			}
		}
	}
	if !found {
		return portRef{}, fmt.Errorf("no TCP container port to front: declare the app's port in containers[].ports or name it with annotation %s", AnnotationPort)
	}
	return first, nil
}

// isTCP treats an empty protocol as TCP, its default.
func isTCP(cp corev1.ContainerPort) bool {
	return cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP
}
