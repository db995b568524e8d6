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
}

func (b serviceBypass) String() string {
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
			app, err := strconv.ParseInt(p.Annotations[inject.AnnotationUpstreamPort], 10, 32)
			if err != nil {
				continue
			}
			for _, sp := range svc.Spec.Ports {
				tp := sp.TargetPort
				if tp.Type == intstr.String || (sp.Protocol != "" && sp.Protocol != corev1.ProtocolTCP) {
					continue
				}
				n := tp.IntVal
				if n == 0 {
					n = sp.Port
				}
				port := cmp.Or(sp.Name, strconv.Itoa(int(sp.Port)))
				if n != int32(app) || seen[port] {
					continue
				}
				seen[port] = true
				out = append(out, serviceBypass{Service: svc, Port: port, AppPort: n, Name: sidecarPortName(p)})
			}
		}
	}
	slices.SortFunc(out, func(a, b serviceBypass) int {
		return cmp.Or(strings.Compare(a.Service.Name, b.Service.Name), strings.Compare(a.Port, b.Port))
	})
	return out
}

// sidecarPortName is the name of the injected sidecar's serving port.
func sidecarPortName(p *corev1.Pod) string {
	for _, c := range p.Spec.InitContainers {
		if c.Name != inject.ContainerName {
			continue
		}
		for _, cp := range c.Ports {
			if cp.Name != inject.AdminPortName {
				return cp.Name
			}
		}
	}
	return ""
}

// maxBypassesNamed bounds the Service ports the condition names.
const maxBypassesNamed = 5

// servicesRouted is the ServicesRouted condition of the tier's Services.
func servicesRouted(bypass []serviceBypass) (st bool, reason, msg string) {
	if len(bypass) == 0 {
		return true, v1alpha1.ReasonThroughSidecar, "no Service that selects the tier's pods targets their application port by number"
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
	return false, v1alpha1.ReasonServiceTargetsAppPort, msg
}
