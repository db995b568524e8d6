package testnode

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// setupNetwork gives the namespace its loopback and a bridge without ports
// holding NodeIP (the kernel here has no dummy links), routes ServiceCIDR
// to it (the route lookup happens before kube-proxy's DNAT) and turns
// forwarding on (in this namespace only).
func (n *Node) setupNetwork(ctx context.Context) error {
	br := n.l.bridge()
	for _, s := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", br, "type", "bridge"},
		{"ip", "addr", "add", NodeIP.String() + "/32", "dev", br},
		{"ip", "link", "set", br, "up"},
		{"ip", "route", "add", ServiceCIDR.String(), "dev", br, "src", NodeIP.String()},
		{"sysctl", "-qw", "net.ipv4.ip_forward=1"},
	} {
		if err := run(ctx, n.ns.enter(s...)...); err != nil {
			return err
		}
	}
	return nil
}

// setupCgroups makes the pods' cgroup root in every hierarchy and saves the
// machine-wide sysctls kubelet sets, for the teardown to put back.
func (n *Node) setupCgroups(context.Context) error {
	if err := saveSysctls(n.l.path("sysctls")); err != nil {
		return err
	}
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, n.l.cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		// A new cpuset has no CPUs and no memory nodes: give it its
		// parent's.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			b, err := os.ReadFile(filepath.Join(h, f))
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
			}
		}
	}
	return nil
}

func (n *Node) setupFiles(context.Context) error {
	p, err := newPKI(n.l.path("pki"))
	if err != nil {
		return err
	}
	n.pki = p
	if err := n.l.writeConfigs(p, n.tools); err != nil {
		return err
	}
	return n.clientFor()
}

func (n *Node) start(name string, env []string, args ...string) (*proc, error) {
	p, err := startProc(n.ns, n.l.work, name, env, args...)
	if err != nil {
		return nil, err
	}
	n.addProc(p)
	return p, nil
}

func (n *Node) startEtcd(ctx context.Context) error {
	p, err := n.start("etcd", nil, n.tools.Etcd,
		"--data-dir", n.l.path("etcd"),
		"--listen-client-urls", "http://127.0.0.1:2379",
		"--advertise-client-urls", "http://127.0.0.1:2379",
		"--listen-peer-urls", "http://127.0.0.1:2380",
		"--unsafe-no-fsync", "--log-level", "warn")
	if err != nil {
		return err
	}
	return n.waitHTTP(ctx, p, "http://127.0.0.1:2379/health")
}

func (n *Node) startAPIServer(ctx context.Context) error {
	pk := n.pki.path
	p, err := n.start("kube-apiserver", nil, n.tools.APIServer,
		"--etcd-servers", "http://127.0.0.1:2379",
		"--bind-address", NodeIP.String(), "--advertise-address", NodeIP.String(),
		"--secure-port", strconv.Itoa(apiPort),
		"--tls-cert-file", pk(serverCert), "--tls-private-key-file", pk(serverKey),
		"--client-ca-file", pk(caCert),
		// The node's hostname resolves nowhere: logs, exec and
		// port-forward reach kubelet at NodeIP.
		"--kubelet-preferred-address-types", "InternalIP",
		"--kubelet-client-certificate", pk(adminCert), "--kubelet-client-key", pk(adminKey),
		"--service-cluster-ip-range", ServiceCIDR.String(),
		"--service-account-issuer", "https://kubernetes.default.svc."+ClusterDomain,
		"--service-account-key-file", pk(saPub), "--service-account-signing-key-file", pk(saKey),
		"--authorization-mode", "Node,RBAC", "--allow-privileged",
		// kubectl logs, exec and port-forward reach the kubelet at the
		// node IP (its hostname resolves nowhere).
		"--kubelet-preferred-address-types", "InternalIP",
		"--cert-dir", n.l.path("apiserver-certs"), "--profiling=false")
	if err != nil {
		return err
	}
	return poll(ctx, componentTimeout, "kube-apiserver /readyz", p, func(ctx context.Context) (bool, error) {
		_, err := n.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, err
	})
}

func (n *Node) startControllers(ctx context.Context) error {
	kc := n.l.kubeconfig()
	bin := n.tools.KubeBin
	cm, err := n.start("kube-controller-manager", nil, filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--leader-elect=false", "--bind-address", "127.0.0.1",
		"--service-account-private-key-file", n.pki.path(saKey), "--root-ca-file", n.pki.path(caCert),
		"--use-service-account-credentials=false",
		"--flex-volume-plugin-dir", n.l.path("flex"),
		"--cert-dir", n.l.path("controller-manager-certs"))
	if err != nil {
		return err
	}
	sched, err := n.start("kube-scheduler", nil, filepath.Join(bin, "kube-scheduler"),
		"--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
		"--leader-elect=false", "--bind-address", "127.0.0.1",
		"--cert-dir", n.l.path("scheduler-certs"))
	if err != nil {
		return err
	}
	if err := n.waitHTTPS(ctx, cm, "https://127.0.0.1:10257/healthz"); err != nil {
		return err
	}
	return n.waitHTTPS(ctx, sched, "https://127.0.0.1:10259/healthz")
}

func (n *Node) startContainerd(ctx context.Context) error {
	env := []string{"PATH=" + strings.Join([]string{n.tools.ContainerdBin, filepath.Dir(n.tools.Runc), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}, ":")}
	p, err := n.start("containerd", env, filepath.Join(n.tools.ContainerdBin, "containerd"),
		"--config", n.l.path("containerd.toml"), "--log-level", "warn")
	if err != nil {
		return err
	}
	ctr := filepath.Join(n.tools.ContainerdBin, "ctr")
	if err := poll(ctx, componentTimeout, "containerd", p, func(ctx context.Context) (bool, error) {
		err := run(ctx, ctr, "-a", n.l.containerdSock(), "version")
		return err == nil, err
	}); err != nil {
		return err
	}
	for _, img := range []string{"pause.tar", "coredns.tar"} {
		if err := n.ImportImage(ctx, filepath.Join(n.tools.Images, img)); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) startKubelet(ctx context.Context) error {
	p, err := n.start("kubelet", nil, filepath.Join(n.tools.KubeBin, "kubelet"),
		"--config", n.l.path("kubelet.json"),
		"--kubeconfig", n.l.kubeconfig(),
		"--root-dir", n.l.path("kubelet"),
		"--cert-dir", n.l.path("kubelet-pki"),
		"--node-ip", NodeIP.String(),
		"--hostname-override", NodeName)
	if err != nil {
		return err
	}
	return n.waitHTTP(ctx, p, "http://127.0.0.1:10248/healthz")
}

func (n *Node) startKubeProxy(ctx context.Context) error {
	p, err := n.start("kube-proxy", nil, filepath.Join(n.tools.KubeBin, "kube-proxy"),
		"--config", n.l.path("kube-proxy.json"))
	if err != nil {
		return err
	}
	return n.waitHTTP(ctx, p, "http://127.0.0.1:10256/healthz")
}

func (n *Node) waitNodeReady(ctx context.Context) error {
	return poll(ctx, readyTimeout, "node "+NodeName+" Ready", nil, func(ctx context.Context) (bool, error) {
		node, err := n.client.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Errorf("condition Ready is %s: %s", c.Status, c.Message)
			}
		}
		return false, errors.New("no Ready condition yet")
	})
}

// waitHTTP waits for url (in the namespace) to answer 200.
func (n *Node) waitHTTP(ctx context.Context, p *proc, url string) error {
	return n.waitGet(ctx, p, url, n.HTTPClient())
}

// waitHTTPS waits for a component's self-signed healthz (its certificate
// is made at start and signed by nobody the harness knows).
func (n *Node) waitHTTPS(ctx context.Context, p *proc, url string) error {
	c := n.HTTPClient()
	c.Transport.(*http.Transport).TLSClientConfig = insecureTLS()
	return n.waitGet(ctx, p, url, c)
}

func (n *Node) waitGet(ctx context.Context, p *proc, url string, c *http.Client) error {
	return poll(ctx, componentTimeout, p.name+" "+url, p, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp.StatusCode == http.StatusOK, fmt.Errorf("%s: %s", resp.Status, b)
	})
}

// poll calls check every 200 ms until it says done, for at most limit;
// it gives up early when p (if any) exits. The error names what was
// awaited and the last thing check said.
func poll(ctx context.Context, limit time.Duration, what string, p *proc, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		if p != nil {
			if done, err := p.exited(); done {
				return fmt.Errorf("waiting for %s: %s exited (%v); its log ends:\n%s", what, p.name, err, p.tail(30))
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		ok, err := check(cctx)
		ccancel()
		if ok {
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up after %v: %v", what, limit, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
