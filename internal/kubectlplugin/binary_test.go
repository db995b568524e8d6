package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/version"
)

// TestTheBinaryRunsAsAKubectlPlugin builds cmd/kubectl-tiercache, puts it
// on PATH as a user would, and runs it through a real kubectl: kubectl
// finds it, hands it its arguments, and passes its output and exit code
// on.
func TestTheBinaryRunsAsAKubectlPlugin(t *testing.T) {
	ns := namespace(t)
	kubectl := os.Getenv("KUBECTL")
	if kubectl == "" {
		if os.Getenv("TIERCACHE_REQUIRE_ENVTEST") != "" {
			t.Fatal("KUBECTL is not set: `eval $(bash hack/k8s-tools.sh env)` sets it")
		}
		t.Skip("KUBECTL is not set (hack/k8s-tools.sh env sets it)")
	}
	createTier(t, ns, "shop", shopTier())
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "kubectl-tiercache"), "./cmd/kubectl-tiercache")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	kubectlRun := func(args ...string) (string, string, int) {
		cmd := exec.Command(kubectl, args...)
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+env.kubeconfig)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String(), code
	}

	plugins, _, _ := kubectlRun("plugin", "list")
	if !strings.Contains(plugins, filepath.Join(bin, "kubectl-tiercache")) {
		t.Fatalf("kubectl plugin list:\n%s\ndoes not list the plugin", plugins)
	}
	out, errOut, code := kubectlRun("tiercache", "explain", "shop", "https://shop.example/api/x", "-n", ns, "-o", "json")
	var e explanation
	if code != 0 || json.Unmarshal([]byte(out), &e) != nil || e.Rule != "api" || !e.Bypass {
		t.Fatalf("kubectl tiercache explain: exit %d, stdout %q, stderr %q; want rule api, bypassed", code, out, errOut)
	}
	_, errOut, code = kubectlRun("tiercache", "status", "nope", "-n", ns)
	if code != 1 || !strings.Contains(errOut, `error: CacheTier "nope" not found in namespace "`+ns+`"`) {
		t.Fatalf("kubectl tiercache status nope: exit %d, stderr %q; want 1 and the error", code, errOut)
	}
	out, errOut, code = kubectlRun("tiercache", "--version")
	if code != 0 || !strings.HasPrefix(out, "kubectl-tiercache "+version.DevVersion+" (revision ") {
		t.Fatalf("kubectl tiercache --version: exit %d, stdout %q, stderr %q; want the plugin's development version", code, out, errOut)
	}
	_, errOut, code = kubectlRun("tiercache", "purge", "shop", "-n", ns)
	if code != 2 || !strings.Contains(errOut, "error: nothing to purge") {
		t.Fatalf("kubectl tiercache purge without a selector: exit %d, stderr %q; want 2 and the usage error", code, errOut)
	}
}
