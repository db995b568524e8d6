package operator

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/sidecar"
	"github.com/tiercache/tiercache/test/testkube"
)

// TestKubectlApplyChangesARunningSidecar: a sidecar connected to the
// operator's control plane changes behaviour when its CacheTier is edited
// with kubectl apply, without a restart; a config the sidecar refuses is
// reported in the tier's status.
func TestKubectlApplyChangesARunningSidecar(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	kubeconfig := testkube.Kubeconfig(t, cluster.env, testkube.Admin)

	var hits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		// No freshness information: not stored unless a rule says so.
		_, _ = io.WriteString(w, "page body\n")
	}))
	defer origin.Close()

	apply := func(manifest string) {
		t.Helper()
		cmd := exec.Command(kubectlPath(t), "--kubeconfig", kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(manifest)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply: %v\n%s", err, out)
		}
	}
	const tierYAML = `apiVersion: tiercache.io/v1alpha1
kind: CacheTier
metadata: {name: live, namespace: %s}
spec:
  rules:
    - name: page
      match: {path: /page}
%s`
	apply(fmt.Sprintf(tierYAML, ns, "      bypass: true\n"))

	// The sidecar's Redis CA is not PEM (in a pod: a bad redis-ca.crt in
	// its secrets directory); it matters once a config turns L2 TLS on.
	a := startSidecar(t, origin.URL, ns, "live", "web-0", cluster.xdsAddr, "--redis-ca-cert=not a certificate")

	xcache := xcacheOf(a.Serve + "/page")

	// The sidecar connects, and the status counts it.
	eventually(t, 30*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "live"}, &tier); err != nil {
			return err
		}
		if tier.Status.ConnectedSidecars != 1 {
			return fmt.Errorf("connectedSidecars = %d", tier.Status.ConnectedSidecars)
		}
		return nil
	})
	eventually(t, 10*time.Second, func() error {
		if x := xcache(); !strings.HasPrefix(x, "BYPASS") {
			return fmt.Errorf("X-Cache %q, want BYPASS from the pushed rule", x)
		}
		return nil
	})

	// kubectl apply: the rule now stores /page for an hour.
	apply(fmt.Sprintf(tierYAML, ns, "      ttl: 1h\n"))
	eventually(t, 10*time.Second, func() error {
		if x := xcache(); !strings.HasPrefix(x, "HIT") {
			return fmt.Errorf("X-Cache %q, want HIT once the new rule is live", x)
		}
		return nil
	})
	before := hits.Load()
	for range 5 {
		if x := xcache(); !strings.HasPrefix(x, "HIT") {
			t.Fatalf("X-Cache %q after the rule applied", x)
		}
	}
	if hits.Load() != before {
		t.Errorf("the origin saw %d more requests while the rule held", hits.Load()-before)
	}

	// A config the sidecar refuses at apply time (L2 TLS with the
	// sidecar's CA that is not PEM: valid for the schema and
	// tierconfig.Validate, refused when the sidecar builds its Redis
	// client) is a NACK: the sidecar keeps serving its last config, and
	// the status says why.
	apply(fmt.Sprintf(tierYAML, ns, `      ttl: 1h
  l2:
    addresses: ["127.0.0.1:1"]
    tls: {enabled: true}
`))
	eventually(t, 30*time.Second, func() error {
		var tier v1alpha1.CacheTier
		if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "live"}, &tier); err != nil {
			return err
		}
		if tier.Status.NACKs < 1 || !strings.Contains(tier.Status.LastNACK, "web-0") {
			return fmt.Errorf("nacks %d, lastNACK %q", tier.Status.NACKs, tier.Status.LastNACK)
		}
		return nil
	})
	if x := xcache(); !strings.HasPrefix(x, "HIT") {
		t.Errorf("X-Cache %q after the refused config; the last good one should still serve", x)
	}
}

// startSidecar creates pod (annotated for tier, injected by the webhook)
// and runs its sidecar, connected to the control plane at xds with the
// pod's token and the suite's CA, until the test ends; extra arguments
// are added to the sidecar's.
func startSidecar(t *testing.T, upstream, ns, tier, pod, xds string, extra ...string) sidecar.Addrs {
	t.Helper()
	p := createPod(t, ns, pod, tier)
	tokenFile := filepath.Join(t.TempDir(), "token")
	tok, err := testkube.PodToken(context.Background(), cluster.client, p, xdsAudience, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	testkube.WriteToken(t, tokenFile, tok)
	return runSidecar(t, upstream, ns, tier, pod, xds, append([]string{"--control-plane-token-file=" + tokenFile, "--control-plane-ca=" + cluster.caFile}, extra...)...)
}

// createPod creates a pod running as ServiceAccount "app" (created if
// missing) annotated for tier: the webhook injects it.
func createPod(t *testing.T, ns, name, tier string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}
	if err := cluster.client.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{inject.AnnotationTier: tier}},
		Spec: corev1.PodSpec{
			ServiceAccountName: "app",
			Containers: []corev1.Container{{
				Name: "app", Image: "example.test/app",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
			}},
		},
	}
	if err := cluster.client.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// runSidecar runs a sidecar of tier in namespace ns as pod, connected to
// the control plane at xds with the extra flags, until the test ends.
func runSidecar(t *testing.T, upstream, ns, tier, pod, xds string, extra ...string) sidecar.Addrs {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	addrs := make(chan sidecar.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- sidecar.RunWith(ctx, append([]string{
			"--upstream=" + upstream,
			"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0",
			"--tier=" + tier, "--pod-name=" + pod, "--pod-namespace=" + ns,
			"--control-plane=" + xds,
			"--state-dir=" + t.TempDir(),
			"--log-format=text",
		}, extra...), func(string) string { return "" }, logSink(), func(a sidecar.Addrs) { addrs <- a })
	}()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("sidecar %s: %v", pod, err)
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("sidecar %s exited: %v", pod, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("sidecar %s did not start", pod)
	}
	return sidecar.Addrs{}
}

// kubectlPath is the kubectl that hack/k8s-tools.sh built.
func kubectlPath(t *testing.T) string {
	t.Helper()
	k := os.Getenv("KUBECTL")
	if k == "" {
		k = filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	}
	if _, err := os.Stat(k); err != nil {
		t.Fatalf("kubectl: %v (hack/k8s-tools.sh env sets KUBECTL)", err)
	}
	return k
}

// xcacheOf returns a function that GETs the URL (host:port/path) and
// returns its X-Cache header, or "error: ..." when the request fails.
func xcacheOf(hostPath string) func() string {
	return func() string {
		resp, err := http.Get("http://" + hostPath)
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Header.Get("X-Cache")
	}
}
