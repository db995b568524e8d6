package operator

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// The tests of this package run the whole operator (RunWith) against a
// real API server and etcd started by envtest, with the CRD from
// config/crd and the webhook registrations from config/webhook. The
// binaries come from hack/k8s-tools.sh (make test exports
// KUBEBUILDER_ASSETS).

const operatorNS = "tiercache-system"

// cluster is the shared API server of the package's tests.
var cluster struct {
	env    *envtest.Environment
	cfg    *rest.Config
	client client.Client
	stop   context.CancelFunc
	done   chan error
	// xdsAddr is where the operator under test serves the control plane
	// (TLS with envtest's webhook certificate, whose CA is in caFile;
	// sidecars authenticate with tokens of audience xdsAudience).
	xdsAddr string
	caFile  string
	// reg holds the operator's own metrics.
	reg *prometheus.Registry
	// args are the operator's, for a restart (startSuiteOperator).
	args []string
}

const xdsAudience = "tiercache-xds"

// TestMain runs the tests, then, once the API server has stopped,
// checks that they left no goroutine behind.
func TestMain(m *testing.M) {
	code := runMain(m)
	if code == 0 {
		if err := goleak.Find(leakIgnores...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// leakIgnores are the controller-runtime goroutines that a stopped
// manager leaves blocked for good, through bugs of the libraries, not
// of the operator (each started and stopped manager may leave one):
var leakIgnores = []goleak.Option{
	// The cache wraps each metadata watch in watch.Filter
	// (newGVKFixupWatcher), whose loop sends every event on an
	// unbuffered channel with no way out: when the reflector stops
	// reading at shutdown with an event in flight, it blocks forever
	// (kubernetes/kubernetes#113254).
	goleak.IgnoreTopFunction("k8s.io/apimachinery/pkg/watch.(*filteredWatch).loop"),
	// The controller's priority queue hands a ready item to a waiting
	// worker without watching for shutdown: a worker that returned on
	// shutdown is still counted as waiting, and the queue's send to it
	// never completes (GetWithPriority, handleReadyItems).
	goleak.IgnoreTopFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleReadyItems.func1.1"),
	// The same bug's second goroutine: that send holds the queue's lock,
	// so the queue's loop for waiting items, woken once more before
	// shutdown, blocks for good taking it.
	goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue.(*priorityqueue[...]).handleWaitingItems.func1"),
}

func runMain(m *testing.M) int {
	// The process-wide loggers are set once, before any operator runs
	// (Run does this in the real command).
	ctrl.SetLogger(newLogger(logSink()))
	klog.SetLogger(newLogger(logSink()))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		if os.Getenv("TIERCACHE_REQUIRE_ENVTEST") != "" {
			fmt.Fprintln(os.Stderr, "KUBEBUILDER_ASSETS is not set: run `make test`, or `eval $(bash hack/k8s-tools.sh env)` first")
			return 1
		}
		fmt.Fprintln(os.Stderr, "skipping the API-server tests: KUBEBUILDER_ASSETS is not set (make test sets it)")
		return m.Run()
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd")},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths: []string{filepath.Join("..", "..", "config", "webhook")},
		},
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping envtest:", err)
		}
	}()
	scheme, err := newScheme()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster.env, cluster.cfg, cluster.client = env, cfg, c
	ctx := context.Background()
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: operatorNS}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}

	wo := env.WebhookInstallOptions
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// The certificate names localhost: sidecars connect by that name.
	cluster.xdsAddr = "localhost:" + strconv.Itoa(xl.Addr().(*net.TCPAddr).Port)
	xl.Close()
	caDir, err := os.MkdirTemp("", "tiercache-ca-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(caDir)
	cluster.caFile = filepath.Join(caDir, "ca.crt")
	if err := os.WriteFile(cluster.caFile, wo.LocalServingCAData, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cluster.args = []string{
		"--namespace=" + operatorNS,
		"--cert-mode=external",
		"--webhook-host=" + wo.LocalServingHost,
		"--webhook-port=" + strconv.Itoa(wo.LocalServingPort),
		"--webhook-cert-dir=" + wo.LocalServingCertDir,
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:0",
		"--sidecar-image=example.test/tiercache-sidecar:test",
		"--allowed-sidecar-images=example.test/approved/*",
		"--control-plane-address=tiercache-xds.tiercache-system.svc:18000",
		"--xds-listen=" + cluster.xdsAddr,
		"--xds-ca-file=" + cluster.caFile,
		"--status-refresh=1s",
		// Stopped at once: shutdown_test.go tests the delay.
		"--shutdown-delay=0",
	}
	if err := startSuiteOperator(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if err := stopSuiteOperator(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	return code
}

// startSuiteOperator runs the suite's operator (with cluster.args, a new
// metrics registry) and waits until its webhooks answer: the API server
// calls them with failurePolicy Fail.
func startSuiteOperator() error {
	cluster.reg = prometheus.NewRegistry()
	opCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWith(opCtx, cluster.args, Env{Getenv: func(string) string { return "" }, Stderr: logSink(), RestConfig: cluster.cfg, SkipNameValidation: true, Registerer: cluster.reg})
	}()
	cluster.stop, cluster.done = stop, done
	wo := cluster.env.WebhookInstallOptions
	addr := net.JoinHostPort(wo.LocalServingHost, strconv.Itoa(wo.LocalServingPort))
	for deadline := time.Now().Add(60 * time.Second); ; {
		// A full handshake, so the server logs no aborted one.
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a liveness probe of the test's own server
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case err := <-done:
			return fmt.Errorf("the operator exited before its webhook server started: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return fmt.Errorf("the operator's webhook server did not start within 60s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stopSuiteOperator stops the suite's operator (it gives up the leader
// Lease and deletes its sidecar report) and waits for it to return.
func stopSuiteOperator() error {
	cluster.stop()
	select {
	case err := <-cluster.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("operator: %v", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("operator did not stop within 30s")
	}
}

// logSink is where the operator under test logs: stderr with
// TIERCACHE_TEST_LOG=1, else nowhere.
func logSink() io.Writer {
	if os.Getenv("TIERCACHE_TEST_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}

// needCluster skips (or, under make test, fails) a test without envtest.
func needCluster(t *testing.T) client.Client {
	t.Helper()
	if cluster.client == nil {
		t.Skip("no API server: KUBEBUILDER_ASSETS is not set")
	}
	return cluster.client
}

// eventually retries f until it returns nil or the timeout passes, then
// fails with f's last error.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		if err = f(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %v", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T, c client.Client) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := c.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

func errorf(format string, a ...any) error { return fmt.Errorf(format, a...) }

func intstrName(s string) intstr.IntOrString { return intstr.FromString(s) }
