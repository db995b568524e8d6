package inject

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
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
//
// A port AnnotationPort picks whose name declares HTTP/2 or gRPC is
// refused unless allowHTTP2 (the tier's spec.sidecar.frontHTTP2).
func frontedPort(pod *corev1.Pod, allowHTTP2 bool) (portRef, error) {
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
						if proto := http2Name(cp.Name); proto != "" && !allowHTTP2 {
							return portRef{}, fmt.Errorf("annotation %s: port %q of container %q is named for %s, which the sidecar does not cache (it passes HTTP/2 through to the app); front the app's HTTP/1.1 port and let %s traffic reach the app directly, or set spec.sidecar.frontHTTP2: true on the CacheTier to front this port anyway", AnnotationPort, describePort(cp), containers[ci].Name, proto, proto)
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

// AppProtocolHTTP2 returns the protocol a Service port's appProtocol
// declares when it is HTTP/2 or gRPC ("gRPC" or "HTTP/2"), else "". The
// values are Istio's (grpc, http2) and Kubernetes' (kubernetes.io/h2c),
// with h2c, as names compare: case-insensitively.
func AppProtocolHTTP2(ap *string) string {
	if ap == nil {
		return ""
	}
	switch strings.ToLower(*ap) {
	case "grpc":
		return "gRPC"
	case "http2", "h2c", "kubernetes.io/h2c":
		return "HTTP/2"
	}
	return ""
}

// DeclaredHTTP2 says how a Service of svcs declares the port the sidecar
// would front in pod HTTP/2 or gRPC: a port of a Service that selects
// the pod, targets that port (by name or number) and has such an
// appProtocol. "" when none does, or when the pod has no port to front
// (Inject then says why). The first such Service port, by the order of
// svcs, is named.
func DeclaredHTTP2(pod *corev1.Pod, svcs []corev1.Service) string {
	ref, err := frontedPort(pod, true)
	if err != nil {
		return ""
	}
	cp := pod.Spec.Containers[ref.container].Ports[ref.port]
	for i := range svcs {
		svc := &svcs[i]
		if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName || !selects(svc.Spec.Selector, pod.Labels) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			proto := AppProtocolHTTP2(sp.AppProtocol)
			if proto == "" || (sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP) {
				continue
			}
			if Targets(sp, cp) {
				return fmt.Sprintf("Service %s port %s declares appProtocol %s (%s) for the pod's port %s", svc.Name, servicePortName(sp), *sp.AppProtocol, proto, describePort(cp))
			}
		}
	}
	return ""
}

// selects reports whether a Service selector matches a pod's labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// servicePortName is a Service port's name, else its number.
func servicePortName(sp corev1.ServicePort) string {
	if sp.Name != "" {
		return sp.Name
	}
	return strconv.Itoa(int(sp.Port))
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

// Targets reports whether a Service port sends its traffic to the
// container port cp: by cp's name, or by its number (a targetPort left
// out targets the Service port's own number).
func Targets(sp corev1.ServicePort, cp corev1.ContainerPort) bool {
	tp := sp.TargetPort
	switch {
	case tp.Type == intstr.String:
		return tp.StrVal != "" && tp.StrVal == cp.Name
	case tp.IntVal == 0:
		return sp.Port == cp.ContainerPort
	}
	return tp.IntVal == cp.ContainerPort
}
