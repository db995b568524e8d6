package inject

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// portRef locates a port: spec.containers[container].ports[port].
type portRef struct{ container, port int }

// frontedPort picks the application port the sidecar fronts: the TCP port
// named or numbered by AnnotationPort, else the TCP port named
// PreferredPortName. Only regular containers are searched, in order.
//
// There is no guess beyond that. A pod's first port is as likely to be
// metrics, gRPC or an admin endpoint as its HTTP API, and a wrong guess
// does not fail loudly: the sidecar would cache whatever answers there.
// So a pod that names no port is refused with a message saying how to
// name one, even when it declares a single port.
func frontedPort(pod *corev1.Pod) (portRef, error) {
	containers := pod.Spec.Containers
	if want := pod.Annotations[AnnotationPort]; want != "" {
		// IANA port names contain a letter, so a number is never a name.
		number, numeric := strconv.Atoi(want)
		var nonTCP *corev1.ContainerPort
		var nonTCPIn string
		for ci := range containers {
			for pi, cp := range containers[ci].Ports {
				if (numeric == nil && int(cp.ContainerPort) == number) || (numeric != nil && cp.Name == want) {
					// The same number may be declared for UDP and TCP (HTTP/3
					// next to HTTP/1); the TCP one is meant.
					if isTCP(cp) {
						if proto := http2Name(cp.Name); proto != "" {
							return portRef{}, fmt.Errorf("annotation %s: port %q of container %q is named for %s, which the sidecar does not serve (it speaks HTTP/1.1 and answers HTTP/2 with 505); front the app's HTTP/1.1 port, and let %s traffic reach the app directly", AnnotationPort, describePort(cp), containers[ci].Name, proto, proto)
						}
						return portRef{ci, pi}, nil
					}
					if nonTCP == nil {
						nonTCP, nonTCPIn = &containers[ci].Ports[pi], containers[ci].Name
					}
				}
			}
		}
		if nonTCP != nil {
			return portRef{}, fmt.Errorf("annotation %s: port %q of container %q is %s; only TCP can be fronted", AnnotationPort, want, nonTCPIn, nonTCP.Protocol)
		}
		return portRef{}, fmt.Errorf("annotation %s: no container port named or numbered %q", AnnotationPort, want)
	}

	var candidates []string
	for ci := range containers {
		for pi, cp := range containers[ci].Ports {
			if !isTCP(cp) {
				continue
			}
			if cp.Name == PreferredPortName {
				return portRef{ci, pi}, nil
			}
			candidates = append(candidates, describePort(cp))
		}
	}
	if len(candidates) == 0 {
		return portRef{}, fmt.Errorf("no TCP container port to front: declare the app's HTTP port in containers[].ports and name it %q, or set annotation %s: <name|number>", PreferredPortName, AnnotationPort)
	}
	return portRef{}, fmt.Errorf("no container port named %q to front (TCP ports: %s): name the app's HTTP port %q, or set annotation %s: <name|number>; the first port is not guessed, since it may be metrics or gRPC",
		PreferredPortName, strings.Join(candidates, ", "), PreferredPortName, AnnotationPort)
}

// http2Name returns the protocol a port's name declares when it is one
// the sidecar cannot front ("gRPC" or "HTTP/2"), by the prefixes Istio
// reads protocols from (grpc, grpc-web excepted; http2; h2c), else "".
func http2Name(name string) string {
	n := strings.ToLower(name)
	is := func(p string) bool { return n == p || strings.HasPrefix(n, p+"-") }
	switch {
	case is("grpc-web"):
		return "" // gRPC-Web runs over HTTP/1.1
	case is("grpc"):
		return "gRPC"
	case is("http2"), is("h2c"):
		return "HTTP/2"
	}
	return ""
}

// describePort is how an error message lists a candidate port: "api
// (9000)", or the bare number when the port has no name.
func describePort(cp corev1.ContainerPort) string {
	n := strconv.Itoa(int(cp.ContainerPort))
	if cp.Name == "" {
		return n
	}
	return cp.Name + " (" + n + ")"
}

// isTCP treats an empty protocol as TCP, its default.
func isTCP(cp corev1.ContainerPort) bool {
	return cp.Protocol == "" || cp.Protocol == corev1.ProtocolTCP
}
