package kubectlplugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/internal/sidecar"
	"github.com/tiercache/tiercache/test/testkube"
)

// The tests run the plugin's commands (RunWith, with their command line)
// against a real API server and etcd started by envtest with the CRD from
// config/crd, and against real sidecars (internal/sidecar) on this host.
// No operator runs: the tests create what it would (the generated Secret,
// the status, injected pods). No kubelet runs either, so:
//   - pods never start: the tests set their status (phase, IP, Ready);
//   - the API server's pod proxy does reach a pod's IP, so a sidecar on
//     this host's own non-loopback address stands for the pod's (the API
//     server refuses to proxy to loopback addresses);
//   - a port-forward needs a kubelet: tests of purges through pods replace
//     only that step (forwardDirect) with a connection to the pod's IP.

// cluster is the shared API server of the package's tests.
var env struct {
	env        *envtest.Environment
	client     client.Client
	kubeconfig string
}

// TestMain runs the tests, then, once the API server has stopped,
// checks that they left no goroutine behind.
func TestMain(m *testing.M) {
	code := runMain(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runMain(m *testing.M) int {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("TIERCACHE_REQUIRE_ENVTEST") != "" {
			fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, or `eval $(bash hack/k8s-tools.sh env)` first")
			return 1
		}
		fmt.Fprintln(os.Stderr, "skipping the API-server tests: KUBEBUILDER_ASSETS is not set (make test sets it)")
		return m.Run()
	}
	e := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := e.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		if err := e.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	s := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(s), v1alpha1.AddToScheme(s)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: s})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "kubectl-tiercache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	user, err := e.AddUser(testkube.Admin, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kc, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(env.kubeconfig, kc, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	env.env, env.client = e, c
	return m.Run()
}

// needCluster skips (or, under make test, fails) a test without envtest.
func needCluster(t *testing.T) client.Client {
	t.Helper()
	if env.client == nil {
		t.Skip("no API server: KUBEBUILDER_ASSETS is not set")
	}
	return env.client
}

// namespace creates a namespace of the test's own.
func namespace(t *testing.T) string {
	t.Helper()
	c := needCluster(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "plugin-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// result is what one run of the plugin printed and returned.
type result struct {
	out, errOut string
	err         error
}

func (r result) code() int { return ExitCode(r.err) }

// run runs the plugin with the admin kubeconfig and args.
func run(t *testing.T, o Options, args ...string) result {
	t.Helper()
	needCluster(t)
	return runArgs(t, o, append([]string{"--kubeconfig", env.kubeconfig}, args...)...)
}

// runArgs runs the plugin with args alone.
func runArgs(t *testing.T, o Options, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := RunWith(ctx, args, Streams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}, o)
	return result{out: out.String(), errOut: errOut.String(), err: err}
}

func clientKey(namespace, name string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: name}
}

// createTier creates a CacheTier and returns it as stored.
func createTier(t *testing.T, ns, name string, spec v1alpha1.CacheTierSpec) *v1alpha1.CacheTier {
	t.Helper()
	tier := &v1alpha1.CacheTier{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := needCluster(t).Create(context.Background(), tier); err != nil {
		t.Fatal(err)
	}
	return tier
}

// setStatus writes the tier's status as the operator would.
func setStatus(t *testing.T, tier *v1alpha1.CacheTier, s v1alpha1.CacheTierStatus) {
	t.Helper()
	c := needCluster(t)
	var cur v1alpha1.CacheTier
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(tier), &cur); err != nil {
		t.Fatal(err)
	}
	cur.Status = s
	if err := c.Status().Update(context.Background(), &cur); err != nil {
		t.Fatal(err)
	}
}

// generatedSecret creates the tier's Secret as the operator generates it,
// with the purge token token.
func generatedSecret(t *testing.T, tier *v1alpha1.CacheTier, token string) {
	t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: tier.Namespace, Name: inject.GeneratedSecretName(tier.Name),
			Labels: map[string]string{inject.LabelAllowReference: "true", inject.LabelGeneratedFor: tier.Name},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: v1alpha1.GroupVersion.String(), Kind: "CacheTier", Name: tier.Name, UID: tier.UID,
			}},
		},
		Data: map[string][]byte{inject.KeyPurgeToken: []byte(token + "\n"), inject.KeyInvalidationKey: []byte("0123456789abcdef0123456789abcdef")},
	}
	if err := needCluster(t).Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// podIP returns an address of this host that the API server will proxy
// to (not loopback: it refuses those), to stand for pod IPs; it skips the
// test when the host has none.
func podIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skipf("no interface addresses: %v", err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Skip("this host has no global unicast IPv4 address to stand for a pod IP")
	return ""
}

// createPod creates a pod of the tier as injection leaves it, with the
// sidecar's admin port adminPort, and gives it a node and the status of
// a pod in phase at ip (ready or not); phase "" leaves it unscheduled.
func createPod(t *testing.T, tier *v1alpha1.CacheTier, name string, injected bool, adminPort int32, ip string, phase corev1.PodPhase, ready bool) *corev1.Pod {
	t.Helper()
	c := needCluster(t)
	always := corev1.ContainerRestartPolicyAlways
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: tier.Namespace, Name: name,
			Annotations: map[string]string{inject.AnnotationTier: tier.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.test/app:1"}}},
	}
	if injected {
		p.Labels = map[string]string{inject.LabelTier: tier.Name}
		p.Annotations[inject.AnnotationInjected] = "true"
		p.Spec.InitContainers = []corev1.Container{{
			Name: inject.ContainerName, Image: "example.test/tiercache:1", RestartPolicy: &always,
			Ports: []corev1.ContainerPort{
				{Name: "http", ContainerPort: inject.DefaultPort},
				{Name: inject.AdminPortName, ContainerPort: adminPort},
			},
		}}
	}
	if phase != "" {
		p.Spec.NodeName = "node-1"
	}
	ctx := context.Background()
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	if phase == "" {
		return p
	}
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	p.Status = corev1.PodStatus{
		Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}},
	}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// forwardDirect stands in for the kubelet's port-forward, which envtest
// cannot run: it connects to the pod's IP and port itself. Metrics go
// through the real API server's pod proxy.
type forwardDirect struct{ *apiServerPods }

func (forwardDirect) Forward(_ context.Context, pod *corev1.Pod, port int32) (string, func(), error) {
	return net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(int(port))), func() {}, nil
}

func podsThroughAPIServer(t *testing.T) forwardDirect {
	t.Helper()
	a, err := newAPIServerPods(env.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return forwardDirect{a}
}

// origin is an application that answers every GET with the path and a
// version that counts its requests for that path, cacheable for an hour,
// tagged with the first path segment.
type origin struct {
	*httptest.Server
	mu    sync.Mutex
	count map[string]int
}

func newOrigin(t *testing.T) *origin {
	t.Helper()
	o := &origin{count: map[string]int{}}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.count[r.URL.Path]++
		n := o.count[r.URL.Path]
		o.mu.Unlock()
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Surrogate-Key", "tag-"+seg)
		fmt.Fprintf(w, "%s v%d", r.URL.Path, n)
	}))
	t.Cleanup(o.Close)
	return o
}

// node is a running sidecar.
type node struct {
	serve, admin string
	hc           *http.Client
}

// smallL1 is the config of the tests' sidecars unless they need another.
const smallL1 = "l1: {maxSize: 16Mi, shards: 16}\n"

// startSidecar runs a sidecar in front of upstream until the test ends,
// its admin port on adminHost, with the purge token token ("" for none)
// and the tier config config (YAML).
func startSidecar(t *testing.T, upstream, adminHost, token, config string, extra ...string) *node {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "tier.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--upstream", upstream, "--listen", "127.0.0.1:0", "--admin-listen", net.JoinHostPort(adminHost, "0"),
		"--config", cfg, "--log-level", "error", "--shutdown-timeout", "5s", "--memory-limit", "0"}, extra...)
	if token != "" {
		args = append(args, "--purge-token", token)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan sidecar.Addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- sidecar.RunWith(ctx, args, func(string) string { return "" }, io.Discard, func(a sidecar.Addrs) { ready <- a })
	}()
	n := &node{hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
	select {
	case a := <-ready:
		n.serve, n.admin = a.Serve, a.Admin
	case err := <-done:
		cancel()
		t.Fatalf("sidecar exited: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("sidecar did not start within 20s")
	}
	t.Cleanup(func() {
		n.hc.CloseIdleConnections()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("sidecar: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("sidecar did not stop within 20s")
		}
	})
	return n
}

// adminPort is the port of the sidecar's admin address.
func (n *node) adminPort(t *testing.T) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(n.admin)
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return int32(v)
}

// get requests path from the sidecar and returns X-Cache and the body.
func (n *node) get(t *testing.T, path string) (xcache, body string) {
	t.Helper()
	resp, err := n.hc.Get("http://" + n.serve + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Get("X-Cache"), string(b)
}

// expect requests path and fails unless X-Cache starts with want.
func (n *node) expect(t *testing.T, path, want string) string {
	t.Helper()
	x, body := n.get(t, path)
	if !strings.HasPrefix(x, want) {
		t.Fatalf("GET %s from %s: X-Cache %q (body %q), want %s", path, n.serve, x, body, want)
	}
	return body
}

// eventually retries f every 20ms until it returns nil, and fails with
// its last error once timeout has passed.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
