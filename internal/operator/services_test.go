package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

func service(name string, selector map[string]string, ports ...corev1.ServicePort) corev1.Service {
	return corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: corev1.ServiceSpec{Selector: selector, Ports: ports}}
}

func TestServicesBypassing(t *testing.T) {
	tier := newTier("shop", "web", v1alpha1.CacheTierSpec{})
	pod := injectedWith(t, "web-0", tier) // app port "http" 8080
	pod.Labels["app"] = "web"
	web := map[string]string{"app": "web"}
	cases := map[string]struct {
		svc  corev1.Service
		want string
	}{
		"a Service that targets the port by name reaches the sidecar": {
			svc: service("byname", web, corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http")}), want: "",
		},
		"a Service that targets the application's port by number goes around it": {
			svc:  service("bynumber", web, corev1.ServicePort{Name: "web", Port: 80, TargetPort: intstr.FromInt32(8080)}),
			want: "Service bynumber port web targets the application's port 8080 by number, around the sidecar: nothing it serves is cached; set targetPort: http (the port's name, which the sidecar took over)",
		},
		"a port without a targetPort targets its own number": {
			svc:  service("implicit", web, corev1.ServicePort{Port: 8080}),
			want: "Service implicit port 8080 targets the application's port 8080",
		},
		"a Service that targets the sidecar's port by number reaches it": {
			svc: service("sidecar", web, corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(15180)}), want: "",
		},
		"a Service that selects other pods is not the tier's": {
			svc: service("other", map[string]string{"app": "api"}, corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080)}), want: "",
		},
		"a Service without a selector is not the tier's": {
			svc: service("manual", nil, corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080)}), want: "",
		},
		"a UDP port of the same number is not HTTP": {
			svc: service("udp", web, corev1.ServicePort{Port: 80, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(8080)}), want: "",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := servicesBypassing([]corev1.Service{c.svc}, []*corev1.Pod{pod})
			switch {
			case c.want == "" && len(got) != 0:
				t.Errorf("bypass %v, want none", got)
			case c.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0].String(), c.want)):
				t.Errorf("bypass %v, want one: %s", got, c.want)
			}
		})
	}
}

func TestServicesDeclaringHTTP2(t *testing.T) {
	tier := newTier("shop", "web", v1alpha1.CacheTierSpec{})
	pod := injectedWith(t, "web-0", tier) // app port "http" 8080, sidecar "http" 15180
	pod.Labels["app"] = "web"
	web := map[string]string{"app": "web"}
	ap := func(s string) *string { return &s }
	cases := map[string]struct {
		svc  corev1.Service
		want string
	}{
		"appProtocol grpc on the sidecar's port by name declares it": {
			svc:  service("rpc", web, corev1.ServicePort{Name: "api", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ap("grpc")}),
			want: "Service rpc port api declares appProtocol grpc for the port the sidecar fronts (http), and the tier does not set spec.sidecar.frontHTTP2",
		},
		"appProtocol h2c on the sidecar's port by number declares it": {
			svc:  service("h2", web, corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(15180), AppProtocol: ap("h2c")}),
			want: "Service h2 port 80 declares appProtocol h2c",
		},
		"appProtocol http does not": {
			svc: service("plain", web, corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ap("http")}),
		},
		"a port without appProtocol does not": {
			svc: service("none", web, corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http")}),
		},
		"the application's port by number is a bypass, not this": {
			svc: service("around", web, corev1.ServicePort{Port: 80, TargetPort: intstr.FromInt32(8080), AppProtocol: ap("grpc")}),
		},
		"a Service that selects other pods is not the tier's": {
			svc: service("other", map[string]string{"app": "api"}, corev1.ServicePort{Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ap("grpc")}),
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := servicesDeclaringHTTP2([]corev1.Service{c.svc}, []*corev1.Pod{pod})
			switch {
			case c.want == "" && len(got) != 0:
				t.Errorf("declared %v, want none", got)
			case c.want != "" && (len(got) != 1 || !strings.HasPrefix(got[0].String(), c.want) || got[0].reason() != v1alpha1.ReasonServiceDeclaresHTTP2):
				t.Errorf("declared %v, want one: %s", got, c.want)
			}
		})
	}
}

// TestAServiceThatTargetsTheAppPortByNumberIsReported: a Service that
// selects the tier's pods and targets the application's port by number
// (which the sidecar does not take over) sends traffic around the cache.
// The tier says so in ServicesRouted, with the fix, and the Service gets
// a Warning Event; once it targets the port by name, the condition is
// True again.
func TestAServiceThatTargetsTheAppPortByNumberIsReported(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, "web-0", "web")
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	pod.Labels["app"] = "web"
	if err := c.Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	routed := func(st metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			r := condition(tierOf(t, c, key), v1alpha1.ConditionServicesRouted)
			if r == nil || r.Status != st || r.Reason != reason || !strings.Contains(r.Message, msg) {
				return fmt.Errorf("ServicesRouted %+v, want %s %s with %q", r, st, reason, msg)
			}
			return nil
		})
	}
	routed(metav1.ConditionTrue, v1alpha1.ReasonThroughSidecar, "no Service")

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	routed(metav1.ConditionFalse, v1alpha1.ReasonServiceTargetsAppPort,
		"Service web port http targets the application's port 8080 by number, around the sidecar: nothing it serves is cached; set targetPort: http")
	eventually(t, 30*time.Second, func() error {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == "web" && e.Type == corev1.EventTypeWarning &&
				e.Reason == v1alpha1.ReasonServiceTargetsAppPort && strings.Contains(e.Message, "targetPort: http") {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event on Service web among %d events", len(evs.Items))
	})

	if err := c.Get(ctx, client.ObjectKeyFromObject(svc), svc); err != nil {
		t.Fatal(err)
	}
	svc.Spec.Ports[0].TargetPort = intstr.FromString("http")
	if err := c.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}
	routed(metav1.ConditionTrue, v1alpha1.ReasonThroughSidecar, "no Service")
}

// TestAServiceThatDeclaresTheFrontedPortGRPCIsReported: a Service created
// after the pods declares the port the sidecar fronts gRPC (appProtocol).
// The webhook could not see it when the pods were admitted, so the tier
// says so in ServicesRouted, with the fix, and the Service gets a Warning
// Event; once the tier sets spec.sidecar.frontHTTP2, the condition is
// True again.
func TestAServiceThatDeclaresTheFrontedPortGRPCIsReported(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "rpc"}
	if err := c.Create(ctx, newTier(ns, "rpc", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	createPod(t, ns, "rpc-0", "rpc")
	var pod corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "rpc-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	if pod.Labels == nil {
		pod.Labels = map[string]string{}
	}
	pod.Labels["app"] = "rpc"
	if err := c.Update(ctx, &pod); err != nil {
		t.Fatal(err)
	}
	routed := func(st metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			r := condition(tierOf(t, c, key), v1alpha1.ConditionServicesRouted)
			if r == nil || r.Status != st || r.Reason != reason || !strings.Contains(r.Message, msg) {
				return fmt.Errorf("ServicesRouted %+v, want %s %s with %q", r, st, reason, msg)
			}
			return nil
		})
	}
	routed(metav1.ConditionTrue, v1alpha1.ReasonThroughSidecar, "no Service")

	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rpc"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "rpc"},
			Ports: []corev1.ServicePort{{Name: "api", Port: 80, TargetPort: intstr.FromString("http"), AppProtocol: ptr.To("kubernetes.io/h2c")}}},
	}
	if err := c.Create(ctx, svc); err != nil {
		t.Fatal(err)
	}
	want := "Service rpc port api declares appProtocol kubernetes.io/h2c for the port the sidecar fronts (http), and the tier does not set spec.sidecar.frontHTTP2"
	routed(metav1.ConditionFalse, v1alpha1.ReasonServiceDeclaresHTTP2, want)
	eventually(t, 30*time.Second, func() error {
		var evs corev1.EventList
		if err := c.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == "rpc" && e.Type == corev1.EventTypeWarning &&
				e.Reason == v1alpha1.ReasonServiceDeclaresHTTP2 && strings.Contains(e.Message, want) {
				return nil
			}
		}
		return fmt.Errorf("no Warning Event on Service rpc among %d events", len(evs.Items))
	})

	tier := tierOf(t, c, key)
	tier.Spec.Sidecar.FrontHTTP2 = true
	if err := c.Update(ctx, tier); err != nil {
		t.Fatal(err)
	}
	routed(metav1.ConditionTrue, v1alpha1.ReasonThroughSidecar, "no Service")
}
