package chart

import (
	"context"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tiercache/tiercache/test/testkube"
)

// startAPIServer starts envtest's etcd and kube-apiserver with nothing
// installed (the chart brings the CRD) and returns a client and an admin
// kubeconfig file for helm.
func startAPIServer(t *testing.T) (client.Client, string) {
	t.Helper()
	needEnv(t, "KUBEBUILDER_ASSETS", "the install test runs a real API server")
	env := &envtest.Environment{}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("stopping envtest: %v", err)
		}
	})
	path := testkube.Kubeconfig(t, env, testkube.Admin)
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, path
}

// TestInstall installs the chart with its default values into a real API
// server, the way the README does, and reads every object back. No
// kubelet or controllers run there, so pods never start: this checks what
// the API server accepts (schemas, CEL, RBAC escalation rules, webhook
// registration validation), not the operator's behaviour (e2e does that).
func TestInstall(t *testing.T) {
	c, kubeconfig := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// NOTES with the bundled Redis (a client-side dry run: nothing is
	// created) and then the real install with the defaults.
	notes := helm(t, "install", releaseName, chartDir(t), "--namespace", releaseNS, "--kubeconfig", kubeconfig,
		"--dry-run=client", "--set", "redis.bundled.enabled=true")
	for _, want := range []string{"NOT FOR PRODUCTION", `addresses: ["tiercache-redis.tiercache-system.svc:6379"]`} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES with redis.bundled.enabled lack %q:\n%s", want, notes)
		}
	}
	notes = helm(t, "install", releaseName, chartDir(t), "--namespace", releaseNS, "--create-namespace",
		"--kubeconfig", kubeconfig, "--wait=false", "--timeout", "2m")
	for _, want := range []string{"kind: CacheTier", "tiercache.io/tier", "rollout status deployment/tiercache-operator"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "NOT FOR PRODUCTION") {
		t.Errorf("NOTES warn about the bundled Redis, which the defaults do not install:\n%s", notes)
	}

	// The CRD came from crds/ and is served.
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := c.Get(ctx, types.NamespacedName{Name: "cachetiers.tiercache.io"}, crd); err != nil {
		t.Fatalf("the CRD is not installed: %v", err)
	}
	// Every object helm template renders for these values exists.
	objs := parseObjects(t, render(t, valuesCase{name: "default"}))
	for _, o := range objs {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.u.GroupVersionKind())
		if err := c.Get(ctx, types.NamespacedName{Namespace: o.u.GetNamespace(), Name: o.u.GetName()}, got); err != nil {
			t.Errorf("%s: not readable after helm install: %v", o, err)
		}
	}
	for _, kind := range []string{"Deployment", "Service", "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
		"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount", "Secret", "NetworkPolicy", "PodDisruptionBudget"} {
		if len(byKind(objs, kind)) == 0 {
			t.Errorf("the default values render no %s", kind)
		}
	}

	t.Run("RBAC", func(t *testing.T) { checkRBAC(t, ctx, c) })
	t.Run("upgrade keeps the operator's certificate", func(t *testing.T) { checkUpgrade(t, ctx, c, kubeconfig) })
}

// checkRBAC asks the API server what the operator's ServiceAccount may do:
// everything the operator needs, and nothing beside it.
func checkRBAC(t *testing.T, ctx context.Context, c client.Client) {
	sa := "system:serviceaccount:" + releaseNS + ":tiercache"
	type access struct {
		verb, group, resource, sub, ns, name string
	}
	allowed := []access{
		{"list", "tiercache.io", "cachetiers", "", "", ""},
		{"watch", "tiercache.io", "cachetiers", "", "shop", ""},
		{"patch", "tiercache.io", "cachetiers", "status", "shop", "pages"},
		{"list", "", "pods", "", "", ""},
		{"watch", "", "secrets", "", "", ""},
		{"get", "", "secrets", "", "shop", "redis"},
		{"create", "events.k8s.io", "events", "", "shop", ""},
		{"patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "tiercache-inject"},
		{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "tiercache-validate"},
		{"watch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", ""},
		{"create", "coordination.k8s.io", "leases", "", releaseNS, ""},
		{"update", "coordination.k8s.io", "leases", "", releaseNS, "tiercache-operator.tiercache.io"},
		{"delete", "coordination.k8s.io", "leases", "", releaseNS, "tiercache-connected-tiercache-operator-0"},
		// Each replica's sidecar report, which the leader watches.
		{"patch", "coordination.k8s.io", "leases", "", releaseNS, "tiercache-connected-tiercache-operator-0"},
		{"list", "coordination.k8s.io", "leases", "", releaseNS, ""},
		{"watch", "coordination.k8s.io", "leases", "", releaseNS, ""},
		{"create", "", "events", "", releaseNS, ""},
		{"create", "", "secrets", "", releaseNS, ""},
		{"update", "", "secrets", "", releaseNS, "tiercache-webhook-cert"},
		// Each tier's generated Secret <tier>-tiercache.
		{"create", "", "secrets", "", "shop", ""},
	}
	denied := []access{
		{"update", "tiercache.io", "cachetiers", "", "shop", "pages"},
		{"delete", "tiercache.io", "cachetiers", "", "shop", "pages"},
		{"create", "", "pods", "", "shop", ""},
		{"patch", "", "pods", "", "shop", "web-0"},
		// Generated Secrets are never overwritten, and go with their
		// CacheTier (owner reference), so neither update nor delete.
		{"update", "", "secrets", "", "shop", "redis"},
		{"patch", "", "secrets", "", "shop", "pages-tiercache"},
		{"delete", "", "secrets", "", "shop", "pages-tiercache"},
		{"deletecollection", "", "secrets", "", "shop", ""},
		{"update", "", "secrets", "", releaseNS, "someone-elses"},
		{"delete", "", "secrets", "", releaseNS, "tiercache-webhook-cert"},
		{"patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", "istio-sidecar-injector"},
		{"update", "admissionregistration.k8s.io", "validatingwebhookconfigurations", "", "", "other"},
		{"create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", "", ""},
		{"create", "coordination.k8s.io", "leases", "", "shop", ""},
		{"patch", "coordination.k8s.io", "leases", "", "shop", "tiercache-connected-tiercache-operator-0"},
		{"watch", "coordination.k8s.io", "leases", "", "", ""},
		{"get", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""},
	}
	ask := func(a access) bool {
		t.Helper()
		return allowedTo(t, ctx, c, sa, releaseNS, a.verb, a.group, a.resource, a.sub, a.ns, a.name)
	}
	for _, a := range allowed {
		if !ask(a) {
			t.Errorf("the operator may not %s %s/%s %s in %q %q; it needs to", a.verb, a.group, a.resource, a.sub, a.ns, a.name)
		}
	}
	for _, a := range denied {
		if ask(a) {
			t.Errorf("the operator may %s %s/%s %s in %q %q; it should not", a.verb, a.group, a.resource, a.sub, a.ns, a.name)
		}
	}

	// The sidecar needs no RBAC at all: its Secrets come as projected
	// volumes, its config over xDS. The ServiceAccount of a tenant's pods
	// gets nothing from the chart.
	pods := "system:serviceaccount:shop:default"
	for _, a := range []access{
		{"get", "", "secrets", "", "shop", "pages-tiercache"},
		{"list", "", "secrets", "", "shop", ""},
		{"get", "tiercache.io", "cachetiers", "", "shop", "pages"},
		{"list", "tiercache.io", "cachetiers", "", "", ""},
		{"create", "authentication.k8s.io", "tokenreviews", "", "", ""},
		{"get", "", "pods", "", "shop", "web-0"},
	} {
		if allowedTo(t, ctx, c, pods, "shop", a.verb, a.group, a.resource, a.sub, a.ns, a.name) {
			t.Errorf("a tenant pod's ServiceAccount may %s %s/%s in %q %q; the chart should grant it nothing", a.verb, a.group, a.resource, a.ns, a.name)
		}
	}
}

// allowedTo asks the API server (a SubjectAccessReview) whether the
// ServiceAccount user of namespace saNS may do verb on the resource.
func allowedTo(t *testing.T, ctx context.Context, c client.Client, user, saNS, verb, group, resource, sub, ns, name string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   user,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns, Name: name,
		},
	}}
	if err := c.Create(ctx, sar); err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

// checkUpgrade fills the cert Secret and the caBundles the way the
// operator does in self mode, upgrades the release with a changed value,
// and checks Helm kept both (the chart never sets them), applied the
// change, and that uninstall keeps the Secret (resource-policy: keep).
func checkUpgrade(t *testing.T, ctx context.Context, c client.Client, kubeconfig string) {
	var sec corev1.Secret
	key := types.NamespacedName{Namespace: releaseNS, Name: "tiercache-webhook-cert"}
	if err := c.Get(ctx, key, &sec); err != nil {
		t.Fatal(err)
	}
	sec.Data = map[string][]byte{"ca.crt": []byte("CA"), "tls.crt": []byte("CERT"), "tls.key": []byte("KEY")}
	if err := c.Update(ctx, &sec); err != nil {
		t.Fatal(err)
	}
	ca := []byte("-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n")
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := c.Get(ctx, types.NamespacedName{Name: "tiercache-inject"}, &mwc); err != nil {
		t.Fatal(err)
	}
	mwc.Webhooks[0].ClientConfig.CABundle = ca
	if err := c.Update(ctx, &mwc); err != nil {
		t.Fatal(err)
	}

	helm(t, "upgrade", releaseName, chartDir(t), "--namespace", releaseNS, "--kubeconfig", kubeconfig,
		"--wait=false", "--timeout", "2m", "--set", "webhook.timeoutSeconds=5")

	if err := c.Get(ctx, types.NamespacedName{Name: "tiercache-inject"}, &mwc); err != nil {
		t.Fatal(err)
	}
	w := mwc.Webhooks[0]
	if string(w.ClientConfig.CABundle) != string(ca) {
		t.Errorf("helm upgrade reset the caBundle the operator wrote: %q", w.ClientConfig.CABundle)
	}
	if w.TimeoutSeconds == nil || *w.TimeoutSeconds != 5 {
		t.Errorf("helm upgrade did not apply timeoutSeconds=5: %v", w.TimeoutSeconds)
	}
	if err := c.Get(ctx, key, &sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["tls.crt"]) != "CERT" {
		t.Errorf("helm upgrade reset the cert Secret the operator wrote: %v", sec.Data)
	}

	helm(t, "uninstall", releaseName, "--namespace", releaseNS, "--kubeconfig", kubeconfig, "--wait=false", "--timeout", "2m")
	if err := c.Get(ctx, key, &sec); err != nil {
		t.Errorf("helm uninstall removed the cert Secret (resource-policy: keep): %v", err)
	}
	if err := c.Get(ctx, types.NamespacedName{Name: "tiercache-inject"}, &mwc); err == nil {
		t.Error("helm uninstall left the MutatingWebhookConfiguration behind: pods would hit a dead webhook")
	}
}
