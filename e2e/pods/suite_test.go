// Package pods is the user's path in real pods (issue 27 §3): on a real
// single-node cluster (test/testnode: kubelet, containerd, runc, the CNI
// bridge, kube-proxy and CoreDNS inside a network namespace) the real
// helm installs the chart with the images `make image` built, the bundled
// Redis runs, a CacheTier is applied and a 3-replica Deployment of a real
// app (the demo origin) is annotated. Each step of TestUserPath asserts
// what a user would see: injection and start order, probes, MISS → HIT
// through a Service by its DNS name, L2 across pods, the kubectl plugin
// over a real port-forward, live config, zero trust, faults under load,
// body stores, mistakes answered clearly, and a clean reinstall.
//
// The steps run in order on one node (about 3 minutes warm); E2E_RUN
// (make e2e-pods) picks subtests while developing. Without the images
// (TIERCACHE_IMAGE and the others `make test-node` sets) or a machine
// that can run a node the test skips, naming why; TIERCACHE_REQUIRE_NODE=1
// makes that a failure.
package pods

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/test/testnode"
)

const (
	release   = "tiercache"
	releaseNS = "tiercache-system"
	appNS     = "shop"
	tierName  = "web"
	appName   = "web"
	// serviceHost is the app Service's DNS name; clients send it as Host,
	// which is part of the cache key.
	serviceHost = appName + "." + appNS + ".svc." + testnode.ClusterDomain
	// redisImage is the Redis image the test builds from the tool cache.
	redisImage = "tiercache.local/redis:7.0.15"
	chartDir   = "../../charts/tiercache"
)

// images are the archives `make image` built and their references.
type images struct {
	product, productRef string
	demo, demoRef       string
}

func imagesFromEnv() (images, error) {
	im := images{
		product: os.Getenv("TIERCACHE_IMAGE"), productRef: os.Getenv("TIERCACHE_IMAGE_REF"),
		demo: os.Getenv("TIERCACHE_DEMO_IMAGE"), demoRef: os.Getenv("TIERCACHE_DEMO_IMAGE_REF"),
	}
	for name, v := range map[string]string{"TIERCACHE_IMAGE": im.product, "TIERCACHE_IMAGE_REF": im.productRef,
		"TIERCACHE_DEMO_IMAGE": im.demo, "TIERCACHE_DEMO_IMAGE_REF": im.demoRef} {
		if v == "" {
			return im, fmt.Errorf("%s is not set (make test-node and make e2e-pods build the images with make image and set it)", name)
		}
	}
	for _, p := range []string{im.product, im.demo} {
		if _, err := os.Stat(p); err != nil {
			return im, fmt.Errorf("%w (run make image)", err)
		}
	}
	return im, nil
}

// skipOrFail skips without the node's prerequisites, or fails when the
// node is required.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("TIERCACHE_REQUIRE_NODE") == "1" {
		t.Fatalf("e2e/pods: TIERCACHE_REQUIRE_NODE=1 but %s", why)
	}
	t.Skipf("e2e/pods: %s (TIERCACHE_REQUIRE_NODE=1 makes this a failure)", why)
}

// suite is the state the steps share: one node, one install.
type suite struct {
	t       *testing.T
	n       *testnode.Node
	c       client.Client
	im      images
	helm    string
	kubectl string
	plugin  string // directory holding kubectl-tiercache
	home    string // helm's and kubectl's homes
	svcIP   string // the app Service's ClusterIP
	l2Extra string // lines under the tier's spec.l2 (liveConfig's CA)
}

func newScheme(t *testing.T) *kruntime.Scheme {
	s := kruntime.NewScheme()
	for _, add := range []func(*kruntime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// exec runs a command inside the node's namespaces (KUBECONFIG set),
// bounded by limit, and returns its output.
func (s *suite) exec(ctx context.Context, limit time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	full := append([]string{"env",
		"HELM_CACHE_HOME=" + filepath.Join(s.home, "helm-cache"),
		"HELM_CONFIG_HOME=" + filepath.Join(s.home, "helm-config"),
		"HELM_DATA_HOME=" + filepath.Join(s.home, "helm-data"),
		"PATH=" + s.plugin + ":" + filepath.Dir(s.kubectl) + ":/usr/sbin:/usr/bin:/sbin:/bin",
	}, args...)
	out, err := s.n.Exec(ctx, full...)
	return string(out), err
}

// kubectl runs kubectl in the node and fails the test on an error.
func (s *suite) kubectlOK(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.exec(t.Context(), 2*time.Minute, append([]string{s.kubectl}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// apply applies a manifest with kubectl and returns its output and error.
func (s *suite) apply(t *testing.T, manifest string, flags ...string) (string, error) {
	t.Helper()
	f := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(f, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	return s.exec(t.Context(), time.Minute, append([]string{s.kubectl, "apply", "-f", f}, flags...)...)
}

func (s *suite) applyOK(t *testing.T, manifest string) {
	t.Helper()
	if out, err := s.apply(t, manifest); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// eventually retries f every 100 ms until it succeeds or limit passes.
func eventually(t testing.TB, what string, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// dialer dials from inside the node's network namespace and resolves
// names with the cluster's DNS, as a pod's client would.
func (s *suite) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if net.ParseIP(host) == nil {
		ips, err := s.n.Resolver().LookupHost(ctx, host)
		if err != nil {
			return nil, err
		}
		host = ips[0]
	}
	return s.n.DialContext(ctx, network, net.JoinHostPort(host, port))
}

// httpClient is a client whose connections start in the node: keepAlive
// reuses them (kube-proxy pins a connection to one pod), otherwise every
// request opens a new one.
func (s *suite) httpClient(keepAlive bool) *http.Client {
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:         s.dial,
			DisableKeepAlives:   !keepAlive,
			MaxIdleConnsPerHost: 1,
		},
	}
}

// answer is what a client saw.
type answer struct {
	status int
	xcache string
	body   string
}

// get fetches url with the Service's name as Host.
func get(ctx context.Context, c *http.Client, url string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return answer{}, err
	}
	req.Host = serviceHost
	resp, err := c.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return answer{}, err
	}
	a := answer{status: resp.StatusCode, xcache: resp.Header.Get("X-Cache"), body: string(b)}
	if resp.StatusCode != http.StatusOK {
		return a, fmt.Errorf("GET %s: %s: %.200s", url, resp.Status, b)
	}
	return a, nil
}

// appPods lists the app's pods that are running and not being deleted,
// by name.
func (s *suite) appPods(t *testing.T) []corev1.Pod {
	t.Helper()
	var l corev1.PodList
	if err := s.c.List(t.Context(), &l, client.InNamespace(appNS), client.MatchingLabels{"app": appName}); err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

// waitAppReady waits until want app pods run, all Ready, none being
// deleted, and returns them.
func (s *suite) waitAppReady(t *testing.T, want int, limit time.Duration) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	eventually(t, fmt.Sprintf("%d app pods Ready", want), limit, func() error {
		var l corev1.PodList
		if err := s.c.List(t.Context(), &l, client.InNamespace(appNS), client.MatchingLabels{"app": appName}); err != nil {
			return err
		}
		pods = pods[:0]
		var states []string
		for _, p := range l.Items {
			states = append(states, p.Name+":"+string(p.Status.Phase)+":"+podState(&p))
			if p.DeletionTimestamp == nil && podReady(&p) {
				pods = append(pods, p)
			}
		}
		if len(pods) != want || len(l.Items) != want {
			return fmt.Errorf("%d ready of %d pods, want %d: %v", len(pods), len(l.Items), want, states)
		}
		return nil
	})
	return pods
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podState(p *corev1.Pod) string {
	var s []string
	for _, c := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case c.State.Running != nil:
			s = append(s, fmt.Sprintf("%s=running(ready=%v,restarts=%d)", c.Name, c.Ready, c.RestartCount))
		case c.State.Waiting != nil:
			s = append(s, c.Name+"=waiting:"+c.State.Waiting.Reason+":"+c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s = append(s, c.Name+"=terminated:"+c.State.Terminated.Reason)
		}
	}
	return strings.Join(s, ",")
}

// podURL is a pod's sidecar (port 15180) or app (8080) address.
func podURL(p corev1.Pod, port int) string {
	return fmt.Sprintf("http://%s:%d", p.Status.PodIP, port)
}

// tier reads the CacheTier.
func (s *suite) tier(t *testing.T) *v1alpha1.CacheTier {
	t.Helper()
	var ct v1alpha1.CacheTier
	if err := s.c.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: tierName}, &ct); err != nil {
		t.Fatal(err)
	}
	return &ct
}

// getColumns runs `kubectl get ct` and returns the tier's row by column.
func (s *suite) getColumns(t *testing.T, ns, name string) (map[string]string, error) {
	out, err := s.exec(t.Context(), time.Minute, s.kubectl, "get", "ct", name, "-n", ns, "-o", "wide")
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) != 2 {
		return nil, fmt.Errorf("kubectl get ct: %q", out)
	}
	// Columns by their header's position (kubectl aligns them), so that
	// an empty value does not shift the others.
	head, row := lines[0], lines[1]+strings.Repeat(" ", len(lines[0]))
	var starts []int
	for i := range head {
		if head[i] != ' ' && (i == 0 || head[i-1] == ' ') {
			starts = append(starts, i)
		}
	}
	cols := map[string]string{}
	for k, st := range starts {
		end := len(row)
		if k+1 < len(starts) {
			end = starts[k+1]
		}
		cols[strings.TrimSpace(head[st:min(end, len(head))])] = strings.TrimSpace(row[st:end])
	}
	return cols, nil
}

// originStats reads the demo origin's request counts by class, from the
// app's own port.
func (s *suite) originStats(ctx context.Context, p corev1.Pod) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, podURL(p, 8080)+"/stats", nil)
	if err != nil {
		return nil, err
	}
	resp, err := s.httpClient(false).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st struct {
		ByClass map[string]int64 `json:"by_class"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil, fmt.Errorf("%s /stats: %w", p.Name, err)
	}
	return st.ByClass, nil
}

// waitRollout waits for a Deployment's rollout with kubectl.
func (s *suite) waitRollout(t *testing.T, ns, name string, limit time.Duration) {
	t.Helper()
	must(t, s.rollout(t, ns, name, limit))
}

// rollout waits for a Deployment's rollout; safe from any goroutine.
func (s *suite) rollout(t *testing.T, ns, name string, limit time.Duration) error {
	out, err := s.exec(t.Context(), limit+10*time.Second, s.kubectl, "rollout", "status", "-n", ns, "deployment/"+name, "--timeout", limit.String())
	if err != nil {
		return fmt.Errorf("rollout of %s/%s: %w\n%s", ns, name, err, out)
	}
	return nil
}

// must is t.Fatal on an error.
func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// deleteNow deletes a pod without a grace period override.
func (s *suite) deletePod(t *testing.T, p corev1.Pod) {
	t.Helper()
	must(t, s.c.Delete(t.Context(), &p))
}
