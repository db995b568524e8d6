package operator

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// The sidecar takes over the application port's name: a Service whose
// targetPort names the port reaches the sidecar, one whose targetPort is
// the application's port number goes straight to the application, and
// nothing is cached, without an error anywhere. The controller looks
// for such Services among those that select the tier's pods and says so
// in the tier's ServicesRouted condition and in a Warning Event on each
// Service (what `kubectl describe svc` shows).
//
// The same goes for a Service that declares the port the sidecar fronts
// HTTP/2 or gRPC by its appProtocol while the tier does not set
// spec.sidecar.frontHTTP2: the injection webhook leaves such pods
// without the sidecar, but the Service may come after the pods.

// serviceBypass is one Service port that targets the application's port
// of a tier's pods by number.
type serviceBypass struct {
	Service *corev1.Service
	// Port is the Service port (its name, else its number).
	Port string
	// AppPort is the application's port number the Service targets.
	AppPort int32
	// Name is the port name the Service should target instead: the
	// sidecar's serving port ("" when the pod does not say).
	Name string
	// AppProtocol is set when the Service port does not go around the
	// sidecar but declares the port it fronts HTTP/2 or gRPC: the
	// appProtocol it has. AppPort is then the sidecar's port.
	AppProtocol string
}

// reason is the ServicesRouted reason and the Event reason of b.
func (b serviceBypass) reason() string {
	if b.AppProtocol != "" {
		return v1alpha1.ReasonServiceDeclaresHTTP2
	}
	return v1alpha1.ReasonServiceTargetsAppPort
}

func (b serviceBypass) String() string {
	if b.AppProtocol != "" {
		return fmt.Sprintf("Service %s port %s declares appProtocol %s for the port the sidecar fronts (%s), and the tier does not set spec.sidecar.frontHTTP2: its HTTP/2 and gRPC traffic passes through uncached, and pods created from now on are admitted without the sidecar; set spec.sidecar.frontHTTP2: true to keep fronting the port, or drop the appProtocol if the port serves HTTP/1.1", b.Service.Name, b.Port, b.AppProtocol, cmp.Or(b.Name, strconv.Itoa(int(b.AppPort))))
	}
	fix := "target the sidecar's port by name"
	if b.Name != "" {
		fix = fmt.Sprintf("set targetPort: %s (the port's name, which the sidecar took over)", b.Name)
	}
	return fmt.Sprintf("Service %s port %s targets the application's port %d by number, around the sidecar: nothing it serves is cached; %s", b.Service.Name, b.Port, b.AppPort, fix)
}

// servicesBypassing lists the ports of svcs that target an injected
// pod's application port by number, by Service and port. A port that
// leaves targetPort out targets its own number.
func servicesBypassing(svcs []corev1.Service, pods []*corev1.Pod) []serviceBypass {
	return selectedPorts(svcs, pods, func(svc *corev1.Service, p *corev1.Pod, sp corev1.ServicePort) (serviceBypass, bool) {
		app, err := strconv.ParseInt(p.Annotations[inject.AnnotationUpstreamPort], 10, 32)
		if err != nil || sp.TargetPort.Type == intstr.String {
			return serviceBypass{}, false
		}
		n := cmp.Or(sp.TargetPort.IntVal, sp.Port)
		return serviceBypass{Service: svc, AppPort: n, Name: sidecarPortName(p)}, n == int32(app)
	})
}

// servicesDeclaringHTTP2 lists the ports of svcs that target the
// serving port of an injected pod's sidecar (by name or number) and
// declare it HTTP/2 or gRPC by their appProtocol, by Service and port.
func servicesDeclaringHTTP2(svcs []corev1.Service, pods []*corev1.Pod) []serviceBypass {
	return selectedPorts(svcs, pods, func(svc *corev1.Service, p *corev1.Pod, sp corev1.ServicePort) (serviceBypass, bool) {
		serving, ok := sidecarServingPort(p)
		if !ok || inject.AppProtocolHTTP2(sp.AppProtocol) == "" || !inject.Targets(sp, serving) {
			return serviceBypass{}, false
		}
		return serviceBypass{Service: svc, AppPort: serving.ContainerPort, Name: serving.Name, AppProtocol: *sp.AppProtocol}, true
	})
}

// selectedPorts lists, by Service and port, the TCP ports of svcs for
// which match holds with an injected pod the Service selects; each port
// once (the first pod's finding), its Port set to the port's name or
// number.
func selectedPorts(svcs []corev1.Service, pods []*corev1.Pod,
	match func(svc *corev1.Service, p *corev1.Pod, sp corev1.ServicePort) (serviceBypass, bool)) []serviceBypass {
	var out []serviceBypass
	for i := range svcs {
		svc := &svcs[i]
		if len(svc.Spec.Selector) == 0 || svc.Spec.Type == corev1.ServiceTypeExternalName {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		seen := map[string]bool{}
		for _, p := range pods {
			if p.Annotations[inject.AnnotationInjected] != "true" || !sel.Matches(labels.Set(p.Labels)) {
				continue
			}
			for _, sp := range svc.Spec.Ports {
				if sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP {
					continue
				}
				port := cmp.Or(sp.Name, strconv.Itoa(int(sp.Port)))
				if seen[port] {
					continue
				}
				if b, ok := match(svc, p, sp); ok {
					seen[port] = true
					b.Port = port
					out = append(out, b)
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b serviceBypass) int {
		return cmp.Or(strings.Compare(a.Service.Name, b.Service.Name), strings.Compare(a.Port, b.Port))
	})
	return out
}

// sidecarServingPort is the injected sidecar's serving port.
func sidecarServingPort(p *corev1.Pod) (corev1.ContainerPort, bool) {
	for _, c := range p.Spec.InitContainers {
		if c.Name != inject.ContainerName {
			continue
		}
		for _, cp := range c.Ports {
			if cp.Name != inject.AdminPortName {
				return cp, true
			}
		}
	}
	return corev1.ContainerPort{}, false
}

// sidecarPortName is the name of the injected sidecar's serving port.
func sidecarPortName(p *corev1.Pod) string {
	cp, _ := sidecarServingPort(p)
	return cp.Name
}

// maxBypassesNamed bounds the Service ports the condition names.
const maxBypassesNamed = 5

// servicesRouted is the ServicesRouted condition of the tier's Services.
func servicesRouted(bypass []serviceBypass) (st bool, reason, msg string) {
	if len(bypass) == 0 {
		return true, v1alpha1.ReasonThroughSidecar, "no Service that selects the tier's pods targets their application port by number"
	}
	reason = v1alpha1.ReasonServiceDeclaresHTTP2
	for _, b := range bypass {
		if b.reason() == v1alpha1.ReasonServiceTargetsAppPort {
			reason = v1alpha1.ReasonServiceTargetsAppPort // the one that loses cache hits first
		}
	}
	parts := make([]string, 0, min(len(bypass), maxBypassesNamed))
	for i, b := range bypass {
		if i == maxBypassesNamed {
			break
		}
		parts = append(parts, b.String())
	}
	msg = strings.Join(parts, "; ")
	if more := len(bypass) - len(parts); more > 0 {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return false, reason, msg
}
