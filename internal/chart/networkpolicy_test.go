package chart

import (
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tiercache/tiercache/internal/operator/inject"
)

// endpoint is a destination (or source) pod: its namespace's labels, its
// own labels and a port.
type endpoint struct {
	ns, pod map[string]string
	port    intstrPort
}

// intstrPort is a port by number or name, with its protocol.
type intstrPort struct {
	num   int32
	name  string
	proto corev1.Protocol
}

func selects(t *testing.T, sel *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Fatalf("selector %v: %v", sel, err)
	}
	return s.Matches(labels.Set(l))
}

// peerMatches: the peer names the endpoint's pod (peers without a
// namespaceSelector name the policy's own namespace, never the endpoints
// tested here; ipBlocks name no pod).
func peerMatches(t *testing.T, p networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if p.IPBlock != nil || p.NamespaceSelector == nil {
		return false
	}
	if !selects(t, p.NamespaceSelector, e.ns) {
		return false
	}
	return p.PodSelector == nil || selects(t, p.PodSelector, e.pod)
}

func portMatches(ports []networkingv1.NetworkPolicyPort, want intstrPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != want.proto || p.Port == nil {
			continue
		}
		if (want.name != "" && p.Port.StrVal == want.name) || (want.num != 0 && p.Port.IntVal == want.num) {
			return true
		}
	}
	return false
}

// allowsEgress evaluates the policy's egress rules as a network plugin
// would for one destination.
func allowsEgress(t *testing.T, np networkingv1.NetworkPolicy, e endpoint) bool {
	t.Helper()
	for _, r := range np.Spec.Egress {
		if !portMatches(r.Ports, e.port) {
			continue
		}
		if len(r.To) == 0 {
			return true
		}
		for _, p := range r.To {
			if peerMatches(t, p, e) {
				return true
			}
		}
	}
	return false
}

// allowsIngress: the same for a source reaching the selected pods' port.
func allowsIngress(t *testing.T, np networkingv1.NetworkPolicy, from endpoint, port intstrPort) bool {
	t.Helper()
	for _, r := range np.Spec.Ingress {
		if !portMatches(r.Ports, port) {
			continue
		}
		if len(r.From) == 0 {
			return true
		}
		for _, p := range r.From {
			if peerMatches(t, p, from) {
				return true
			}
		}
	}
	return false
}

// podPort returns a Deployment's pod labels and its container port of
// that name.
func podPort(t *testing.T, objs []object, name, port string) (map[string]string, int32) {
	t.Helper()
	var d appsv1.Deployment
	find(t, objs, "Deployment", name).decode(t, &d)
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port {
				return d.Spec.Template.Labels, p.ContainerPort
			}
		}
	}
	t.Fatalf("Deployment %s has no container port %q", name, port)
	return nil, 0
}

func nsLabels(name string) map[string]string {
	return map[string]string{"kubernetes.io/metadata.name": name}
}

// appPolicies returns the rendered NetworkPolicies outside the release
// namespace, by namespace.
func appPolicies(t *testing.T, objs []object) map[string]networkingv1.NetworkPolicy {
	t.Helper()
	out := map[string]networkingv1.NetworkPolicy{}
	for _, o := range byKind(objs, "NetworkPolicy") {
		if o.u.GetNamespace() == releaseNS {
			continue
		}
		var np networkingv1.NetworkPolicy
		o.decode(t, &np)
		if np.Name != "tiercache-sidecars" {
			t.Errorf("%s: want the name tiercache-sidecars", o)
		}
		out[np.Namespace] = np
	}
	return out
}

var dns = []intstrPort{{num: 53, proto: corev1.ProtocolUDP}, {num: 53, proto: corev1.ProtocolTCP}}

// TestAppNetworkPolicies: networkPolicy.appNamespaces writes, into each
// listed namespace, a policy selecting exactly the injected pods that
// lets them reach what the sidecar dials (the operator's xDS port, the
// bundled Redis, DNS, appExtraEgress) and, with appIngress, admits the
// scraper on the admin port. The peers are checked against the labels and
// ports the chart really gives the operator's and Redis' pods.
func TestAppNetworkPolicies(t *testing.T) {
	c := valuesCase{name: "app-network-policy", file: mustAbs(t, filepath.Join("testdata", "values", "app-network-policy.yaml"))}
	objs := parseObjects(t, render(t, c))
	nps := appPolicies(t, objs)
	if len(nps) != 2 {
		t.Fatalf("app NetworkPolicies in %v, want shop and blog", nps)
	}
	opLabels, xdsPort := podPort(t, objs, "tiercache-operator", "xds")
	redisLabels, redisPort := podPort(t, objs, "tiercache-redis", "redis")
	for _, ns := range []string{"shop", "blog"} {
		np, ok := nps[ns]
		if !ok {
			t.Fatalf("no NetworkPolicy in %s", ns)
		}
		if !selects(t, &np.Spec.PodSelector, map[string]string{inject.LabelTier: "web", "app": "shop"}) {
			t.Errorf("%s: the podSelector misses injected pods (label %s)", ns, inject.LabelTier)
		}
		if selects(t, &np.Spec.PodSelector, map[string]string{"app": "shop"}) {
			t.Errorf("%s: the podSelector selects pods that are not injected", ns)
		}
		if want := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}; !slices.Equal(np.Spec.PolicyTypes, want) {
			t.Errorf("%s: policyTypes %v, want %v", ns, np.Spec.PolicyTypes, want)
		}
		tcp := func(n int32) intstrPort { return intstrPort{num: n, proto: corev1.ProtocolTCP} }
		sys := nsLabels(releaseNS)
		for what, e := range map[string]endpoint{
			"xDS":           {ns: sys, pod: opLabels, port: tcp(xdsPort)},
			"bundled Redis": {ns: sys, pod: redisLabels, port: tcp(redisPort)},
			"DNS over UDP":  {ns: nsLabels("kube-system"), pod: map[string]string{"k8s-app": "kube-dns"}, port: dns[0]},
			"DNS over TCP":  {ns: nsLabels("kube-system"), pod: map[string]string{"k8s-app": "kube-dns"}, port: dns[1]},
		} {
			if !allowsEgress(t, np, e) {
				t.Errorf("%s: egress to %s (%v) not allowed", ns, what, e)
			}
		}
		for what, e := range map[string]endpoint{
			"another port of the operator":          {ns: sys, pod: opLabels, port: tcp(8443)},
			"xDS on a pod that is not the operator": {ns: sys, pod: map[string]string{"app": "x"}, port: tcp(xdsPort)},
			"xDS in another namespace":              {ns: nsLabels("other"), pod: opLabels, port: tcp(xdsPort)},
			"DNS on another pod":                    {ns: nsLabels("kube-system"), pod: map[string]string{"k8s-app": "x"}, port: dns[0]},
		} {
			if allowsEgress(t, np, e) {
				t.Errorf("%s: egress to %s (%v) allowed", ns, what, e)
			}
		}
		extra := false
		for _, r := range np.Spec.Egress {
			for _, p := range r.To {
				extra = extra || (p.IPBlock != nil && p.IPBlock.CIDR == "10.0.5.10/32" && portMatches(r.Ports, tcp(6379)))
			}
		}
		if !extra {
			t.Errorf("%s: appExtraEgress (10.0.5.10/32:6379) missing", ns)
		}
		admin := intstrPort{name: inject.AdminPortName, proto: corev1.ProtocolTCP}
		if !allowsIngress(t, np, endpoint{ns: nsLabels("monitoring")}, admin) {
			t.Errorf("%s: ingress to the admin port %q from monitoring not allowed", ns, inject.AdminPortName)
		}
		if allowsIngress(t, np, endpoint{ns: nsLabels("other")}, admin) {
			t.Errorf("%s: ingress to the admin port from outside metricsFrom allowed", ns)
		}
	}
}

// TestAppNetworkPoliciesFollowValues: none by default; without appIngress
// the policy is Egress only, and without a control plane or the bundled
// Redis it allows neither.
func TestAppNetworkPoliciesFollowValues(t *testing.T) {
	if nps := appPolicies(t, parseObjects(t, render(t, valuesCase{name: "default"}))); len(nps) != 0 {
		t.Errorf("default values render app NetworkPolicies: %v", nps)
	}
	out := helm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS,
		"--set", "networkPolicy.appNamespaces={shop}", "--set", "controlPlane.enabled=false")
	np, ok := appPolicies(t, parseObjects(t, out))["shop"]
	if !ok {
		t.Fatal("no NetworkPolicy in shop")
	}
	if want := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}; !slices.Equal(np.Spec.PolicyTypes, want) || len(np.Spec.Ingress) != 0 {
		t.Errorf("policyTypes %v with %d ingress rules, want %v and none", np.Spec.PolicyTypes, len(np.Spec.Ingress), want)
	}
	if len(np.Spec.Egress) != 1 {
		t.Errorf("%d egress rules, want DNS only: %+v", len(np.Spec.Egress), np.Spec.Egress)
	}
	for _, p := range dns {
		if !allowsEgress(t, np, endpoint{ns: nsLabels("kube-system"), pod: map[string]string{"k8s-app": "kube-dns"}, port: p}) {
			t.Errorf("DNS %v not allowed", p)
		}
	}
}

// TestAppNamespacesSchema: a name that is no namespace name is refused
// before anything renders.
func TestAppNamespacesSchema(t *testing.T) {
	if out, err := helmErr(t, "template", releaseName, chartDir(t), "--namespace", releaseNS, "--set", "networkPolicy.appNamespaces={Shop_1}"); err == nil {
		t.Errorf("appNamespaces={Shop_1} rendered:\n%.300s", out)
	}
}
