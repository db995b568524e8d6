package kubectlplugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// TestConfigShowsWhatAPodsSidecarRuns: config reads a pod's sidecar's
// running config over a port-forward with the tier's purge token, as YAML
// (or JSON), the token itself REDACTED; a wrong token is refused by the
// sidecar with its reason, and a pod that is not injected is named.
func TestConfigShowsWhatAPodsSidecarRuns(t *testing.T) {
	ip := podIP(t)
	ns := namespace(t)
	const token = "token-of-web-0123456789"
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	generatedSecret(t, tier, token)
	sc := startSidecar(t, newOrigin(t).URL, ip, token, smallL1+"rules: [{name: assets, match: {pathPrefix: /static/}, ttl: 1h}]\n")
	createPod(t, tier, "web-1", true, sc.adminPort(t), ip, corev1.PodRunning, true)
	createPod(t, tier, "plain", false, 0, ip, corev1.PodRunning, true)
	pods := Options{Pods: podsThroughAPIServer(t)}

	r := run(t, pods, "config", "web-1", "-n", ns)
	if r.err != nil {
		t.Fatalf("config: %v\n%s", r.err, r.errOut)
	}
	for _, want := range []string{"version: " + sc.version(t), "name: assets", "pathPrefix: /static/", "token: REDACTED"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("config printed:\n%s\nwithout %q", r.out, want)
		}
	}
	if strings.Contains(r.out, token) {
		t.Errorf("config printed the purge token:\n%s", r.out)
	}

	j := run(t, pods, "config", "web-1", "-n", ns, "-o", "json")
	var got struct {
		Version string `json:"version"`
		Config  struct {
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(j.out), &got); j.err != nil || err != nil || got.Version != sc.version(t) || len(got.Config.Rules) != 1 {
		t.Errorf("config -o json: %v, %v: %+v\n%s", j.err, err, got, j.out)
	}

	wrong := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(wrong, []byte("not-the-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, pods, "config", "web-1", "-n", ns, "--purge-token-file", wrong); r.code() != 1 ||
		!strings.Contains(r.err.Error(), "401") || !strings.Contains(r.err.Error(), "config: a valid bearer token is required") {
		t.Errorf("config with a wrong token: exit %d, %v; want the sidecar's 401 and its reason", r.code(), r.err)
	}
	if r := run(t, pods, "config", "plain", "-n", ns); r.code() != 1 || !strings.Contains(r.err.Error(), "not injected") {
		t.Errorf("config of a pod without a sidecar: exit %d, %v", r.code(), r.err)
	}
	if r := run(t, pods, "config", "ghost", "-n", ns); r.code() != 1 || !strings.Contains(r.err.Error(), `pod "ghost" not found`) {
		t.Errorf("config of a missing pod: exit %d, %v", r.code(), r.err)
	}
}
