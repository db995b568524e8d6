package chart

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

const crdName = "cachetiers.tiercache.io"

// oldChart copies the chart into a temporary directory with its CRD as an
// older release had it: without printer columns. It returns the copy and
// that CRD's YAML.
func oldChart(t *testing.T) (string, []byte) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiercache")
	if err := os.CopyFS(dir, os.DirFS(chartDir(t))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "files", "crds", "tiercache.io_cachetiers.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(raw, &crd); err != nil {
		t.Fatal(err)
	}
	for _, v := range crd["spec"].(map[string]any)["versions"].([]any) {
		delete(v.(map[string]any), "additionalPrinterColumns")
	}
	old, err := yaml.Marshal(crd)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, old
}

// printerColumns returns how many printer columns the served CRD's first
// version has, or -1 when the CRD is gone.
func printerColumns(t *testing.T, ctx context.Context, c client.Client) int {
	t.Helper()
	crd := &unstructured.Unstructured{}
	crd.SetGroupVersionKind(schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"})
	if err := c.Get(ctx, types.NamespacedName{Name: crdName}, crd); err != nil {
		return -1
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) == 0 {
		t.Fatalf("the CRD has no versions")
	}
	cols, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
	return len(cols)
}

// TestUpgradeUpdatesTheCRD: against a real API server, a CRD left by an
// older chart's crds/ directory is adopted with the steps docs/operations.md
// gives and updated by the install; helm upgrade then moves the CRD to
// each release's schema (Helm never upgrades crds/, so this is what the
// templated CRD is for); helm uninstall keeps it (crds.keep).
func TestUpgradeUpdatesTheCRD(t *testing.T) {
	c, kubeconfig := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	old, oldCRD := oldChart(t)
	install := func(chart string, verb ...string) (string, error) {
		args := append(append([]string{}, verb...), releaseName, chart, "--namespace", releaseNS,
			"--kubeconfig", kubeconfig, "--wait=false", "--timeout", "2m")
		return helmErr(t, args...)
	}

	// A CRD as an older chart's crds/ left it: no Helm ownership.
	var crd unstructured.Unstructured
	if err := yaml.Unmarshal(oldCRD, &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &crd); err != nil {
		t.Fatal(err)
	}
	_, err := install(chartDir(t), "install", "--create-namespace")
	if err == nil || !strings.Contains(err.Error(), "invalid ownership metadata") {
		t.Fatalf("installing over a CRD Helm does not own: %v; want Helm's invalid ownership metadata error, which docs/operations.md tells how to fix", err)
	}
	// docs/operations.md, Upgrading: kubectl label and kubectl annotate.
	patch := []byte(`{"metadata":{"labels":{"app.kubernetes.io/managed-by":"Helm"},"annotations":{"meta.helm.sh/release-name":"` +
		releaseName + `","meta.helm.sh/release-namespace":"` + releaseNS + `"}}}`)
	if err := c.Patch(ctx, &crd, client.RawPatch(types.MergePatchType, patch)); err != nil {
		t.Fatal(err)
	}
	if _, err := install(chartDir(t), "install", "--create-namespace"); err != nil {
		t.Fatalf("install after adopting the CRD: %v", err)
	}
	if n := printerColumns(t, ctx, c); n <= 0 {
		t.Fatalf("after the install the CRD has %d printer columns: the adopted CRD was not updated", n)
	}

	// Upgrades move the CRD to each chart's schema, both ways.
	if _, err := install(old, "upgrade"); err != nil {
		t.Fatal(err)
	}
	if n := printerColumns(t, ctx, c); n != 0 {
		t.Errorf("upgrading to the chart without printer columns left %d", n)
	}
	if _, err := install(chartDir(t), "upgrade"); err != nil {
		t.Fatal(err)
	}
	if n := printerColumns(t, ctx, c); n <= 0 {
		t.Errorf("helm upgrade did not update the CRD: %d printer columns", n)
	}

	if _, err := helmErr(t, "uninstall", releaseName, "--namespace", releaseNS, "--kubeconfig", kubeconfig, "--wait=false", "--timeout", "2m"); err != nil {
		t.Fatal(err)
	}
	if n := printerColumns(t, ctx, c); n < 0 {
		t.Error("helm uninstall deleted the CRD, and every CacheTier with it (crds.keep)")
	}
}
