package inject

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func TestAPortNamedForGRPCIsFrontedWhenTheTierSaysSo(t *testing.T) {
	pod := errorPod()
	pod.Annotations[AnnotationPort] = "grpc-api"
	pod.Spec.Containers[0].Ports = append(pod.Spec.Containers[0].Ports, corev1.ContainerPort{Name: "grpc-api", ContainerPort: 9000})
	p := errorParams()
	p.FrontHTTP2 = true
	if err := Inject(pod, p); err != nil {
		t.Fatalf("Inject with FrontHTTP2: %v", err)
	}
	if got := pod.Annotations[AnnotationUpstreamPort]; got != "9000" {
		t.Fatalf("fronted port %q, want 9000 (grpc-api)", got)
	}
}

func TestDeclaredHTTP2(t *testing.T) {
	svc := func(name string, sp corev1.ServicePort, mut ...func(*corev1.Service)) corev1.Service {
		s := corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop"},
			Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "pages"}, Ports: []corev1.ServicePort{sp}},
		}
		for _, m := range mut {
			m(&s)
		}
		return s
	}
	byName := func(ap string) corev1.ServicePort {
		return corev1.ServicePort{Name: "api", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ptr.To(ap)}
	}
	tests := map[string]struct {
		svcs []corev1.Service
		want string
	}{
		"no Service: nothing declared": {},
		"a Service with appProtocol grpc targeting the port by name declares it": {
			svcs: []corev1.Service{svc("pages", byName("grpc"))},
			want: "Service pages port api declares appProtocol grpc (gRPC) for the pod's port http (8080)",
		},
		"kubernetes.io/h2c targeting the port by number declares HTTP/2": {
			svcs: []corev1.Service{svc("pages", corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080), AppProtocol: ptr.To("kubernetes.io/h2c")})},
			want: "Service pages port 80 declares appProtocol kubernetes.io/h2c (HTTP/2) for the pod's port http (8080)",
		},
		"a port without targetPort targets its own number": {
			svcs: []corev1.Service{svc("pages", corev1.ServicePort{Name: "h", Port: 8080, AppProtocol: ptr.To("HTTP2")})},
			want: "Service pages port h declares appProtocol HTTP2 (HTTP/2) for the pod's port http (8080)",
		},
		"appProtocol http is not HTTP/2": {
			svcs: []corev1.Service{svc("pages", byName("http"))},
		},
		"grpc-web is HTTP/1.1": {
			svcs: []corev1.Service{svc("pages", byName("grpc-web"))},
		},
		"a Service targeting another port does not count": {
			svcs: []corev1.Service{svc("pages", corev1.ServicePort{Port: 9000, TargetPort: intstr.FromString("grpc"), AppProtocol: ptr.To("grpc")})},
		},
		"a Service that selects other pods does not count": {
			svcs: []corev1.Service{svc("other", byName("grpc"), func(s *corev1.Service) { s.Spec.Selector = map[string]string{"app": "cart"} })},
		},
		"a Service without a selector does not count": {
			svcs: []corev1.Service{svc("manual", byName("grpc"), func(s *corev1.Service) { s.Spec.Selector = nil })},
		},
		"a UDP Service port does not count": {
			svcs: []corev1.Service{svc("pages", byName("grpc"), func(s *corev1.Service) { s.Spec.Ports[0].Protocol = corev1.ProtocolUDP })},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			pod := errorPod()
			pod.Labels = map[string]string{"app": "pages", "tier": "web"}
			if got := DeclaredHTTP2(pod, tc.svcs); got != tc.want {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}
