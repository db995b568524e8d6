package operator

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/tiercache/tiercache/test/testkube"
)

// TestEveryCRDFieldIsDocumented walks the generated schema: every field
// under spec and status has a description, so `kubectl explain` documents
// it.
func TestEveryCRDFieldIsDocumented(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "tiercache.io_cachetiers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	var missing []string
	var walk func(path string, s apiextv1.JSONSchemaProps)
	walk = func(path string, s apiextv1.JSONSchemaProps) {
		if strings.TrimSpace(s.Description) == "" {
			missing = append(missing, path)
		}
		for name, p := range s.Properties {
			walk(path+"."+name, p)
		}
		if s.Items != nil && s.Items.Schema != nil && len(s.Items.Schema.Properties) > 0 {
			for name, p := range s.Items.Schema.Properties {
				walk(path+"[]."+name, p)
			}
		}
	}
	root := crd.Spec.Versions[0].Schema.OpenAPIV3Schema
	for _, top := range []string{"spec", "status"} {
		walk(top, root.Properties[top])
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("fields without a description (kubectl explain would show nothing):\n%s", strings.Join(missing, "\n"))
	}
}

// explain runs kubectl explain on field. Right after the API server starts,
// the CRD can be served before kubectl's discovery and OpenAPI documents
// list it ("couldn't find resource"): that answer is asked again, for at
// most 30 s; any other answer is returned at once.
func explain(kubectl, kubeconfig, field string) ([]byte, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "explain", field).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "couldn't find resource") || time.Now().After(deadline) {
			return out, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestKubectlExplainDocumentsCacheTier asks the real API server through
// kubectl, as a user would.
func TestKubectlExplainDocumentsCacheTier(t *testing.T) {
	needCluster(t)
	kubectl, path := kubectlPath(t), testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	for field, want := range map[string]string{
		"cachetier.spec.l2.passwordSecretRef":      "Redis password",
		"ct.spec.rules.cacheKey.queryExclude":      "utm_*",
		"cachetier.spec.sidecar.port":              "15180",
		"cachetier.status.configHash":              "sha256",
		"ct.spec.bodyStore.size":                   "tiercache-bodies",
		"ct.spec.bodyStore.medium":                 "tmpfs",
		"ct.spec.bodyStore.threshold":              "64Ki",
		"ct.spec.l2.maxBodySize":                   "1 MiB chunks",
		"ct.spec.defaults.staleIfUnreachable":      "RFC 9111 §4.2.4",
		"ct.spec.defaults.normalizeAcceptLanguage": "Accept-Language",
	} {
		out, err := explain(kubectl, path, field)
		if err != nil {
			t.Errorf("kubectl explain %s: %v\n%s", field, err, out)
			continue
		}
		if !strings.Contains(string(out), want) {
			t.Errorf("kubectl explain %s does not mention %q:\n%s", field, want, out)
		}
	}
}
