package chart

import (
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/tiercache/tiercache/internal/operator"
)

// operatorDeployment returns the rendered operator Deployment and its
// operator container.
func operatorDeployment(t *testing.T, objs []object) (appsv1.Deployment, corev1.Container) {
	t.Helper()
	for _, o := range byKind(objs, "Deployment") {
		var d appsv1.Deployment
		o.decode(t, &d)
		if d.Spec.Template.Labels["app.kubernetes.io/component"] != "operator" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "operator" {
				return d, c
			}
		}
		t.Fatalf("%s has no container named operator", o)
	}
	t.Fatal("no operator Deployment rendered")
	return appsv1.Deployment{}, corev1.Container{}
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// TestOperatorArgs parses the rendered operator container's args with the
// operator's own ParseArgs, as the binary would in the pod (POD_NAMESPACE
// from the downward API), then checks that every name and port the flags
// carry is an object or port the chart renders: chart and flags cannot
// drift apart without this test failing.
func TestOperatorArgs(t *testing.T) {
	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) {
			objs := parseObjects(t, render(t, c))
			dep, ctr := operatorDeployment(t, objs)
			if len(ctr.Command) != 1 || ctr.Command[0] != "/tiercache-operator" {
				t.Errorf("operator command %q, want [/tiercache-operator] (the image's entrypoint is the sidecar)", ctr.Command)
			}
			env := map[string]string{}
			for _, e := range ctr.Env {
				if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace" {
					env[e.Name] = releaseNS
				}
			}
			if env["POD_NAMESPACE"] == "" {
				t.Fatal("POD_NAMESPACE is not set from metadata.namespace")
			}
			o, err := operator.ParseArgs(ctr.Args, func(k string) string { return env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("operator.ParseArgs refuses the chart's args: %v\nargs: %q", err, ctr.Args)
			}

			if want := c.name == "observability-redis"; o.SidecarScrapeAnnotations != want {
				t.Errorf("--sidecar-scrape-annotations = %v, want %v (sidecar.scrapeAnnotations)", o.SidecarScrapeAnnotations, want)
			}
			if o.Namespace != releaseNS {
				t.Errorf("--namespace resolves to %q, want %q", o.Namespace, releaseNS)
			}
			ports := map[string]int32{}
			for _, p := range ctr.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if int(ports["webhook"]) != o.WebhookPort {
				t.Errorf("container port webhook = %d, --webhook-port = %d", ports["webhook"], o.WebhookPort)
			}
			checkAddrPort(t, "--metrics-bind-address", o.MetricsAddr, ports["metrics"])
			checkAddrPort(t, "--health-probe-bind-address", o.ProbeAddr, ports["health"])
			for name, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != intstr.FromString("health") {
					t.Errorf("%s probe %+v is not an HTTP GET on the health port", name, p)
				}
			}
			// SIGTERM, the shutdown delay, then the manager's stop: all
			// inside the grace period, or the kubelet kills the replica
			// while admissions are in flight.
			if g := dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second < o.ShutdownDelay+operator.ManagerStopTimeout {
				t.Errorf("terminationGracePeriodSeconds %v is less than --shutdown-delay %s + the manager's stop %s", g, o.ShutdownDelay, operator.ManagerStopTimeout)
			}
			if o.ShutdownDelay == 0 {
				t.Errorf("--shutdown-delay is 0: the replica stops at SIGTERM while the API server still calls it")
			}
			if *dep.Spec.Replicas > 1 && !o.LeaderElect {
				t.Errorf("%d replicas without --leader-elect", *dep.Spec.Replicas)
			}

			// The webhook Service, the configurations whose caBundle the
			// operator manages, and the certificate Secret it mounts.
			svc := findService(t, objs, o.WebhookService)
			if !servicePortTargets(svc, 443, "webhook") {
				t.Errorf("Service %s does not map 443 to the webhook port: %+v", svc.Name, svc.Spec.Ports)
			}
			var mwc admissionregistrationv1.MutatingWebhookConfiguration
			find(t, objs, "MutatingWebhookConfiguration", o.MutatingWebhook).decode(t, &mwc)
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			find(t, objs, "ValidatingWebhookConfiguration", o.ValidatingWebhook).decode(t, &vwc)
			var clients []admissionregistrationv1.WebhookClientConfig
			for _, w := range mwc.Webhooks {
				clients = append(clients, w.ClientConfig)
			}
			for _, w := range vwc.Webhooks {
				clients = append(clients, w.ClientConfig)
			}
			for _, cc := range clients {
				if cc.Service == nil || cc.Service.Name != o.WebhookService || cc.Service.Namespace != releaseNS {
					t.Errorf("webhook clientConfig %+v, want Service %s/%s", cc.Service, releaseNS, o.WebhookService)
				}
			}
			checkCertMount(t, dep, ctr, o)
			switch o.CertMode {
			case operator.CertModeSelf:
				var s corev1.Secret
				find(t, objs, "Secret", o.CertSecretName).decode(t, &s)
				if s.Annotations["helm.sh/resource-policy"] != "keep" {
					t.Errorf("cert Secret %s lacks helm.sh/resource-policy: keep", s.Name)
				}
			case operator.CertModeExternal:
				checkCertificate(t, objs, o, mwc.Annotations, vwc.Annotations)
			}

			// Excluded namespaces: the webhook never sends what the
			// operator would skip anyway, and vice versa.
			notIn := namespaceNotIn(t, mwc)
			want := append(slices.Clone(o.ExcludedNamespaces), o.Namespace)
			slices.Sort(want)
			want = slices.Compact(want)
			if !slices.Equal(notIn, want) {
				t.Errorf("webhook namespaceSelector excludes %q, the operator %q (--excluded-namespaces plus its namespace)", notIn, want)
			}

			checkControlPlane(t, objs, ctr, o, ports)
			if o.SidecarImage == "" || strings.Contains(o.SidecarImage, "<") {
				t.Errorf("--sidecar-image %q", o.SidecarImage)
			}
		})
	}
}

// checkAddrPort checks that a ":port" flag value names the container port.
func checkAddrPort(t *testing.T, flag, addr string, port int32) {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Errorf("%s=%q: %v", flag, addr, err)
		return
	}
	if p != strconv.Itoa(int(port)) {
		t.Errorf("%s=%q but the container port is %d", flag, addr, port)
	}
}

func findService(t *testing.T, objs []object, name string) corev1.Service {
	t.Helper()
	var svc corev1.Service
	find(t, objs, "Service", name).decode(t, &svc)
	return svc
}

func servicePortTargets(svc corev1.Service, port int32, target string) bool {
	for _, p := range svc.Spec.Ports {
		if p.Port == port && p.TargetPort == intstr.FromString(target) {
			return true
		}
	}
	return false
}

// checkCertMount: the Secret named by --cert-secret is mounted at
// --webhook-cert-dir.
func checkCertMount(t *testing.T, dep appsv1.Deployment, ctr corev1.Container, o operator.Options) {
	t.Helper()
	for _, m := range ctr.VolumeMounts {
		if m.MountPath != o.WebhookCertDir {
			continue
		}
		for _, v := range dep.Spec.Template.Spec.Volumes {
			if v.Name == m.Name {
				if v.Secret == nil || v.Secret.SecretName != o.CertSecretName {
					t.Errorf("volume %s at %s is %+v, want Secret %s", v.Name, m.MountPath, v.VolumeSource, o.CertSecretName)
				}
				return
			}
		}
	}
	t.Errorf("nothing is mounted at --webhook-cert-dir=%s", o.WebhookCertDir)
}

func namespaceNotIn(t *testing.T, mwc admissionregistrationv1.MutatingWebhookConfiguration) []string {
	t.Helper()
	if len(mwc.Webhooks) != 1 || mwc.Webhooks[0].NamespaceSelector == nil {
		t.Fatalf("mutating webhook without a namespaceSelector: %+v", mwc.Webhooks)
	}
	for _, e := range mwc.Webhooks[0].NamespaceSelector.MatchExpressions {
		if e.Key == "kubernetes.io/metadata.name" && e.Operator == "NotIn" {
			v := slices.Clone(e.Values)
			slices.Sort(v)
			return v
		}
	}
	t.Fatal("mutating webhook namespaceSelector has no kubernetes.io/metadata.name NotIn")
	return nil
}

// checkControlPlane: with a control plane, the operator listens where the
// xds container port is, the xds Service forwards to it, and sidecars are
// told to dial that Service; without one, the operator serves none and
// sidecars are told nothing.
func checkControlPlane(t *testing.T, objs []object, ctr corev1.Container, o operator.Options, ports map[string]int32) {
	t.Helper()
	listen, ok := flagValue(ctr.Args, "xds-listen")
	if !ok {
		t.Errorf("--xds-listen is not passed: the operator's default (:18000) would decide")
		return
	}
	if o.ControlPlaneAddress == "" {
		if listen != "" {
			t.Errorf("no --control-plane-address for sidecars, yet --xds-listen=%q", listen)
		}
		if _, ok := ports["xds"]; ok {
			t.Error("xds container port without a control plane")
		}
		return
	}
	checkAddrPort(t, "--xds-listen", listen, ports["xds"])
	host, port, err := net.SplitHostPort(o.ControlPlaneAddress)
	if err != nil {
		t.Fatalf("--control-plane-address=%q: %v", o.ControlPlaneAddress, err)
	}
	name, ok := strings.CutSuffix(host, "."+releaseNS+".svc")
	if !ok {
		t.Fatalf("--control-plane-address=%q is not a Service of %s", o.ControlPlaneAddress, releaseNS)
	}
	svc := findService(t, objs, name)
	p, _ := strconv.Atoi(port)
	if !servicePortTargets(svc, int32(p), "xds") {
		t.Errorf("Service %s does not map %s to the xds port: %+v", name, port, svc.Spec.Ports)
	}
	if !o.XDSTLS {
		return
	}
	// Sidecars check the certificate against the name they dial: the
	// self-managed one takes it from --xds-service, cert-manager's from
	// the chart's Certificate.
	if o.XDSService != name {
		t.Errorf("--xds-service=%q, but sidecars dial Service %q", o.XDSService, name)
	}
	if o.CertMode == operator.CertModeExternal {
		for _, c := range byKind(objs, "Certificate") {
			if secret, _, _ := unstructured.NestedString(c.u.Object, "spec", "secretName"); secret != o.CertSecretName {
				continue
			}
			names, _, _ := unstructured.NestedStringSlice(c.u.Object, "spec", "dnsNames")
			if !slices.Contains(names, host) {
				t.Errorf("the serving Certificate names %q, not %q, which sidecars dial for xDS", names, host)
			}
		}
	}
}

// checkCertificate: with cert-manager, a Certificate writes the Secret the
// operator mounts, for the webhook Service's DNS name, and both webhook
// configurations take their CA from it.
func checkCertificate(t *testing.T, objs []object, o operator.Options, annotations ...map[string]string) {
	t.Helper()
	for _, c := range byKind(objs, "Certificate") {
		secret, _, _ := unstructured.NestedString(c.u.Object, "spec", "secretName")
		if secret != o.CertSecretName {
			continue
		}
		dns, _, _ := unstructured.NestedStringSlice(c.u.Object, "spec", "dnsNames")
		if want := o.WebhookService + "." + o.Namespace + ".svc"; !slices.Contains(dns, want) {
			t.Errorf("%s: dnsNames %q lack %s", c, dns, want)
		}
		for _, a := range annotations {
			if got, want := a["cert-manager.io/inject-ca-from"], c.u.GetNamespace()+"/"+c.u.GetName(); got != want {
				t.Errorf("webhook configuration cert-manager.io/inject-ca-from = %q, want %q", got, want)
			}
		}
		return
	}
	t.Errorf("--cert-mode=external but no Certificate writes Secret %s", o.CertSecretName)
}
