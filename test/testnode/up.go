package testnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// CannotRunError says why this machine cannot run a node: not Linux, not
// root, no namespaces, or the node's tools missing.
type CannotRunError struct{ Why string }

func (e *CannotRunError) Error() string { return "this machine cannot run a Kubernetes node: " + e.Why }

// Options configure Up.
type Options struct {
	// Tools are the node's binaries; the zero value reads them from the
	// TIERCACHE_NODE_* variables that `hack/node-tools.sh env` prints.
	Tools Tools
	// Logf gets the harness's progress, and the end of every component's
	// log when the start fails; nil discards them.
	Logf func(format string, args ...any)
}

// Up starts a node outside a test (tools/democluster runs it for `make
// demo-cluster`) and returns once it is Ready and CoreDNS answers. The
// caller owns the node: it calls Teardown, also on SIGINT and SIGTERM,
// which Up leaves to it (cancelling ctx stops a start halfway). When Up
// fails it has torn down what it started; an error that is a
// *CannotRunError means the machine cannot run a node at all.
func Up(ctx context.Context, o Options) (*Node, error) {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	n, err := newNode(ctx, o, nil)
	if err != nil {
		return nil, err
	}
	if err := n.up(ctx); err != nil {
		if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
			n.dumpLogs() // not when the caller cancelled
		}
		return nil, errors.Join(err, n.Teardown())
	}
	return n, nil
}

// newNode checks that the machine can run a node, sweeps the nodes of
// killed runs and makes this one's work directory. failed, when not nil,
// makes the teardown dump the components' logs when it says so.
func newNode(ctx context.Context, o Options, failed func() bool) (*Node, error) {
	if why := canRun(); why != "" {
		return nil, &CannotRunError{Why: why}
	}
	tools := o.Tools
	if tools == (Tools{}) {
		var err error
		if tools, err = toolsFromEnv(); err != nil {
			return nil, &CannotRunError{Why: err.Error()}
		}
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	sweep(ctx, logf)
	work := filepath.Join(os.TempDir(), prefix+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(work, 0o755); err != nil {
		return nil, fmt.Errorf("%v (another node of this process still running?)", err)
	}
	return &Node{
		logf:   logf,
		failed: failed,
		tools:  tools,
		l:      layout{work: work, cgroup: "/" + filepath.Base(work)},
		ns:     newNamespaces(work),
	}, nil
}

// up makes the namespaces and starts the components in order.
func (n *Node) up(ctx context.Context) error {
	if err := n.ns.create(ctx, n.l.work); err != nil {
		return &CannotRunError{Why: fmt.Sprintf("cannot create network and mount namespaces: %v", err)}
	}
	start := time.Now()
	for _, phase := range []struct {
		name string
		run  func(context.Context) error
	}{
		{"network", n.setupNetwork},
		{"cgroups", n.setupCgroups},
		{"files", n.setupFiles},
		{"etcd", n.startEtcd},
		{"kube-apiserver", n.startAPIServer},
		{"controllers", n.startControllers},
		{"containerd", n.startContainerd},
		{"kubelet", n.startKubelet},
		{"kube-proxy", n.startKubeProxy},
		{"node Ready", n.waitNodeReady},
		{"CoreDNS", n.startCoreDNS},
	} {
		if err := phase.run(ctx); err != nil {
			return fmt.Errorf("%s: %w", phase.name, err)
		}
	}
	n.logf("testnode: node Ready and DNS answering %.1fs after the namespaces were made", time.Since(start).Seconds())
	return nil
}

// NetNS is the file of the node's network namespace: `nsenter
// --net=<NetNS>` runs a command where the API server, the Services and
// the pods are reachable (with Kubeconfig for kubectl).
func (n *Node) NetNS() string { return n.ns.net }

// LogDir holds every component's log, <name>.log, until the teardown.
func (n *Node) LogDir() string { return n.l.path("logs") }
