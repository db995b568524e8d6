package testnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// startTimeout bounds Start as a whole.
const startTimeout = 4 * time.Minute

// Node is one running single-node cluster. Its methods may be called from
// the test's goroutine and any other until Teardown.
type Node struct {
	logf   func(format string, args ...any)
	failed func() bool // when it says so at the teardown, the logs are dumped first
	tools  Tools
	l      layout
	ns     namespaces
	pki    *pki

	mu    sync.Mutex
	procs []*proc // in start order

	rest   *rest.Config
	client kubernetes.Interface

	stopSignals func()
	once        sync.Once
	teardownErr error
}

// Start runs a node for the test and tears it down when the test ends
// (also when it fails, or the test binary gets SIGINT or SIGTERM). It
// returns once the node is Ready and CoreDNS answers.
func Start(t testing.TB) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var cannot *CannotRunError
	n, err := newNode(ctx, Options{Logf: t.Logf}, t.Failed)
	if errors.As(err, &cannot) {
		skipOrFail(t, cannot.Why)
	}
	if err != nil {
		t.Fatalf("testnode: %v", err)
	}
	n.stopSignals = n.onSignal()
	t.Cleanup(func() {
		if err := n.Teardown(); err != nil {
			t.Errorf("testnode: teardown: %v", err)
		}
	})
	err = n.up(ctx)
	if errors.As(err, &cannot) {
		skipOrFail(t, cannot.Why)
	}
	if err != nil {
		t.Fatalf("testnode: %v", err)
	}
	return n
}

// onSignal tears the node down when the test binary gets SIGINT or SIGTERM,
// then exits: t.Cleanup would not run.
func (n *Node) onSignal() (stop func()) {
	ch := make(chan os.Signal, 1)
	done := make(chan struct{})
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		select {
		case s := <-ch:
			fmt.Fprintf(os.Stderr, "testnode: %v: tearing the node down\n", s)
			if err := n.Teardown(); err != nil {
				fmt.Fprintf(os.Stderr, "testnode: teardown: %v\n", err)
			}
			os.Exit(2)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// Client is a clientset for the node's API server, as an admin.
func (n *Node) Client() kubernetes.Interface { return n.client }

// RESTConfig is the admin's client configuration; it dials through the
// node's network namespace.
func (n *Node) RESTConfig() *rest.Config { return rest.CopyConfig(n.rest) }

// Kubeconfig is an admin kubeconfig file for the API server at NodeIP,
// usable from inside the namespaces (Exec).
func (n *Node) Kubeconfig() string { return n.l.kubeconfig() }

// DialContext opens a connection from inside the node's network namespace;
// addr must be IP:port.
func (n *Node) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return dial(ctx, n.ns.net, network, addr)
}

// HTTPClient is an http.Client whose connections start inside the node's
// network namespace (URLs with IP addresses; see Resolver for names).
func (n *Node) HTTPClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: n.DialContext, DisableKeepAlives: true},
	}
}

// Resolver asks the cluster's DNS (CoreDNS through kube-dns's ClusterIP).
func (n *Node) Resolver() *net.Resolver {
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return n.DialContext(ctx, network, net.JoinHostPort(DNSServiceIP.String(), "53"))
		},
	}
}

// Exec runs a command inside the node's namespaces, with the node's
// kubeconfig in KUBECONFIG, and returns its combined output.
func (n *Node) Exec(ctx context.Context, args ...string) ([]byte, error) {
	line := n.ns.enter(args...)
	cmd := exec.CommandContext(ctx, line[0], line[1:]...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.l.kubeconfig(), "KUBECACHEDIR="+n.l.path("kubectl-cache"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return out, nil
}

// ImportImage loads an OCI image archive into the node's containerd, for
// pods with imagePullPolicy Never (or IfNotPresent and a tag other than
// latest).
func (n *Node) ImportImage(ctx context.Context, archive string) error {
	ctr := filepath.Join(n.tools.ContainerdBin, "ctr")
	return run(ctx, ctr, "-a", n.l.containerdSock(), "-n", "k8s.io", "images", "import", archive)
}

func (n *Node) addProc(p *proc) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.procs = append(n.procs, p)
}

// dumpLogs logs the end of every component's log.
func (n *Node) dumpLogs() {
	n.mu.Lock()
	procs := append([]*proc(nil), n.procs...)
	n.mu.Unlock()
	for _, p := range procs {
		n.logf("testnode: --- %s (%s), last lines:\n%s", p.name, p.log, p.tail(25))
	}
}

// clientFor builds the REST config and clientset that dial through the
// namespace.
func (n *Node) clientFor() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", n.l.kubeconfig())
	if err != nil {
		return err
	}
	cfg.Dial = n.DialContext
	cfg.Timeout = 15 * time.Second
	cfg.QPS, cfg.Burst = 50, 100
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	n.rest, n.client = cfg, c
	return nil
}
