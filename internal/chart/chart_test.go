package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmezard/go-difflib/difflib"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"
)

func TestLintStrict(t *testing.T) {
	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) {
			out, err := helmErr(t, c.helmArgs("lint", "--strict", chartDir(t))...)
			if err != nil {
				t.Fatalf("helm lint --strict: %v", err)
			}
			// --strict turns warnings into failures; make sure no
			// warning or error line slipped through either way.
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "[WARNING]") || strings.HasPrefix(l, "[ERROR]") {
					t.Errorf("helm lint: %s", l)
				}
			}
		})
	}
}

// TestGolden compares `helm template` with testdata/golden/<case>.yaml;
// -update rewrites the goldens. Review a golden diff like code: it is
// exactly what users' clusters will receive.
func TestGolden(t *testing.T) {
	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) {
			got := elideCRDSpecs(render(t, c))
			path := filepath.Join("testdata", "golden", c.name+".yaml")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./internal/chart -update to create it)", err)
			}
			if got == string(want) {
				return
			}
			diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
				A: difflib.SplitLines(string(want)), B: difflib.SplitLines(got),
				FromFile: path, ToFile: "helm template", Context: 3,
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Errorf("helm template differs from %s (go test ./internal/chart -update rewrites it):\n%s", path, diff)
		})
	}
	if *update {
		return
	}
	// A golden without a values case is stale.
	goldens, err := filepath.Glob(filepath.Join("testdata", "golden", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, c := range valuesCases(t) {
		known[c.name] = true
	}
	for _, g := range goldens {
		if name := strings.TrimSuffix(filepath.Base(g), ".yaml"); !known[name] {
			t.Errorf("%s has no values file testdata/values/%s.yaml: delete it", g, name)
		}
	}
}

// TestCRDsAreConfigCRD: the chart carries exactly the generated CRDs in
// files/crds (hack/generate.sh copies them; make generate keeps both), and
// has no crds/ directory, which Helm would install on its own, once, and
// never upgrade (templates/crds.yaml installs and upgrades them).
func TestCRDsAreConfigCRD(t *testing.T) {
	root := repoRoot(t)
	if _, err := os.Stat(filepath.Join(chartDir(t), "crds")); !os.IsNotExist(err) {
		t.Errorf("charts/tiercache/crds exists (%v): Helm would install it besides templates/crds.yaml and the install would fail; the CRDs belong in files/crds", err)
	}
	src, err := filepath.Glob(filepath.Join(root, "config", "crd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := filepath.Glob(filepath.Join(chartDir(t), "files", "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(src) == 0 {
		t.Fatal("no CRDs in config/crd")
	}
	names := func(paths []string) string {
		var b []string
		for _, p := range paths {
			b = append(b, filepath.Base(p))
		}
		return strings.Join(b, " ")
	}
	if names(src) != names(dst) {
		t.Fatalf("config/crd has [%s], charts/tiercache/files/crds has [%s]: run make generate", names(src), names(dst))
	}
	for i := range src {
		a, err := os.ReadFile(src[i])
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(dst[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("charts/tiercache/files/crds/%s differs from config/crd: run make generate", filepath.Base(src[i]))
		}
	}
}

// TestCRDTemplateIsConfigCRD: with crds.enabled (the default) every values
// case renders each CRD of config/crd as it is but for the chart's labels
// and, with crds.keep, Helm's keep annotation; with crds.enabled=false
// none.
func TestCRDTemplateIsConfigCRD(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "crd", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]any{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var crd map[string]any
		if err := yaml.Unmarshal(raw, &crd); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want[crd["metadata"].(map[string]any)["name"].(string)] = crd
	}
	check := func(t *testing.T, manifest string, keep bool) {
		t.Helper()
		crds := byKind(parseObjects(t, manifest), "CustomResourceDefinition")
		if len(crds) != len(want) {
			t.Fatalf("%d CRDs rendered, want the %d of config/crd", len(crds), len(want))
		}
		for _, o := range crds {
			got := o.u.DeepCopy()
			if got.GetLabels()["app.kubernetes.io/managed-by"] != "Helm" || got.GetLabels()["app.kubernetes.io/instance"] != releaseName {
				t.Errorf("%s labels %v lack the release's", o, got.GetLabels())
			}
			ann := got.GetAnnotations()
			if (ann["helm.sh/resource-policy"] == "keep") != keep {
				t.Errorf("%s annotations %v: want helm.sh/resource-policy keep %v", o, ann, keep)
			}
			delete(ann, "helm.sh/resource-policy")
			got.SetAnnotations(ann)
			got.SetLabels(nil)
			w, ok := want[got.GetName()]
			if !ok {
				t.Errorf("%s is not in config/crd", o)
				continue
			}
			if !equality.Semantic.DeepEqual(got.Object, w) {
				gotYAML, _ := yaml.Marshal(got.Object)
				wantYAML, _ := yaml.Marshal(w)
				d, _ := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: difflib.SplitLines(string(wantYAML)), B: difflib.SplitLines(string(gotYAML)), FromFile: "config/crd", ToFile: "rendered", Context: 2})
				t.Errorf("%s differs from config/crd beyond labels and annotations:\n%s", o, d)
			}
		}
	}
	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) { check(t, render(t, c), true) })
	}
	t.Run("crds.keep=false", func(t *testing.T) {
		check(t, helm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS, "--set", "crds.keep=false"), false)
	})
	t.Run("crds.enabled=false", func(t *testing.T) {
		out := helm(t, "template", releaseName, chartDir(t), "--namespace", releaseNS, "--set", "crds.enabled=false")
		if n := len(byKind(parseObjects(t, out), "CustomResourceDefinition")); n != 0 {
			t.Errorf("%d CRDs rendered with crds.enabled=false", n)
		}
	})
}

// elideCRDSpecs replaces the spec of every CustomResourceDefinition in a
// manifest with a note: the goldens would otherwise repeat the whole
// generated schema once per values case, and change with every API field.
// TestCRDTemplateIsConfigCRD checks the specs instead.
func elideCRDSpecs(manifest string) string {
	var b strings.Builder
	crd, skip := false, false
	for _, l := range strings.SplitAfter(manifest, "\n") {
		switch {
		case l == "---\n":
			crd, skip = false, false
		case l == "kind: CustomResourceDefinition\n":
			crd = true
		case crd && l == "spec:\n":
			b.WriteString("spec: {} # elided: files/crds as generated (TestCRDTemplateIsConfigCRD)\n")
			skip = true
		}
		if !skip {
			b.WriteString(l)
		}
	}
	return b.String()
}

// TestObjectsDecodeStrictly decodes every rendered object of a built-in
// kind into its Go type with unknown fields refused, so a misspelled or
// misplaced field fails here rather than being dropped by the API server.
func TestObjectsDecodeStrictly(t *testing.T) {
	types := map[string]func() any{
		"Deployment":                     func() any { return &appsv1.Deployment{} },
		"Service":                        func() any { return &corev1.Service{} },
		"ServiceAccount":                 func() any { return &corev1.ServiceAccount{} },
		"Secret":                         func() any { return &corev1.Secret{} },
		"ConfigMap":                      func() any { return &corev1.ConfigMap{} },
		"ClusterRole":                    func() any { return &rbacv1.ClusterRole{} },
		"ClusterRoleBinding":             func() any { return &rbacv1.ClusterRoleBinding{} },
		"Role":                           func() any { return &rbacv1.Role{} },
		"RoleBinding":                    func() any { return &rbacv1.RoleBinding{} },
		"PodDisruptionBudget":            func() any { return &policyv1.PodDisruptionBudget{} },
		"NetworkPolicy":                  func() any { return &networkingv1.NetworkPolicy{} },
		"MutatingWebhookConfiguration":   func() any { return &admissionregistrationv1.MutatingWebhookConfiguration{} },
		"ValidatingWebhookConfiguration": func() any { return &admissionregistrationv1.ValidatingWebhookConfiguration{} },
		"CustomResourceDefinition":       func() any { return &apiextensionsv1.CustomResourceDefinition{} },
	}
	// Kinds of CRDs the chart does not own, checked by the goldens only.
	foreign := map[string]bool{"ServiceMonitor": true, "PodMonitor": true, "PrometheusRule": true, "Certificate": true, "Issuer": true}
	for _, c := range valuesCases(t) {
		t.Run(c.name, func(t *testing.T) {
			for _, o := range parseObjects(t, render(t, c)) {
				kind := o.u.GetKind()
				if foreign[kind] {
					continue
				}
				mk, ok := types[kind]
				if !ok {
					t.Errorf("%s: add its kind to this test", o)
					continue
				}
				o.decode(t, mk())
				// Elsewhere only by a value: the dashboard's ConfigMap
				// (grafana.dashboard.namespace) and the sidecars' policies
				// (networkPolicy.appNamespaces).
				appPolicy := kind == "NetworkPolicy" && o.u.GetName() == releaseName+"-sidecars"
				if ns := o.u.GetNamespace(); ns != "" && ns != releaseNS && kind != "ConfigMap" && !appPolicy {
					t.Errorf("%s: namespace %q, want the release namespace %q", o, ns, releaseNS)
				}
			}
		})
	}
}

// TestDashboardConfigMap: the ConfigMap carries the dashboard file
// unchanged and the label Grafana's sidecar looks for.
func TestDashboardConfigMap(t *testing.T) {
	c := valuesCase{name: "observability-redis", file: mustAbs(t, filepath.Join("testdata", "values", "observability-redis.yaml"))}
	cms := byKind(parseObjects(t, render(t, c)), "ConfigMap")
	if len(cms) != 1 {
		t.Fatalf("%d ConfigMaps rendered with grafana.dashboard.enabled, want 1", len(cms))
	}
	var cm corev1.ConfigMap
	cms[0].decode(t, &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard: \"1\"", cm.Labels)
	}
	want, err := os.ReadFile(filepath.Join(chartDir(t), "dashboards", "tiercache.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["tiercache.json"]; got != strings.TrimRight(string(want), "\n") {
		t.Errorf("ConfigMap data tiercache.json (%d bytes) is not dashboards/tiercache.json (%d bytes)", len(got), len(want))
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}
