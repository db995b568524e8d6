// Package testnode runs a real single-node Kubernetes cluster for tests:
// etcd, kube-apiserver, kube-controller-manager, kube-scheduler, a private
// containerd with runc and the CNI bridge, kubelet, kube-proxy (iptables
// mode) and CoreDNS as a Deployment. It is tooling, not part of the
// product: tests start a node with Start, and tools/democluster (`make
// demo-cluster`) with Up; nothing under cmd/ or internal/ imports it.
//
// Everything runs inside a network namespace and a mount namespace that the
// harness creates (unshare, kept alive by bind mounts of their files in the
// node's work directory): every component listens, routes and writes its
// iptables rules there, and the paths kubelet, libcni and containerd's
// shims write whatever their flags say (/var/lib/kubelet/device-plugins,
// /var/log/containers, /var/lib/cni/results, /run/containerd/s) land on a
// private /var and /run of the node's own. Pods' cgroups live under a
// cgroup root of the node's own in every v1 hierarchy. Teardown kills what
// runs in those namespaces and cgroups and unmounts the namespaces, which
// takes the bridge, veths, rules and mounts with them; a node left behind
// by a killed test binary is swept at the next start (Sweep, cleanup.go).
//
// Tests reach the cluster from their own process: Node.DialContext opens
// sockets from an OS thread that entered the node's network namespace, so
// client-go (Node.Client), http.Transport and net.Resolver go through it;
// Node.Exec runs a command inside the namespaces (nsenter).
//
// The binaries come from hack/node-tools.sh (`make test-node` sets the
// TIERCACHE_NODE_* variables it prints). Start skips the test with the
// reason when the machine cannot run a node (not Linux, not root, no
// namespaces, tools missing), and fails instead when
// TIERCACHE_REQUIRE_NODE=1; Up returns a *CannotRunError then. Start
// tears the node down when the test ends (or the binary gets SIGINT or
// SIGTERM); Up's caller calls Teardown itself (up.go).
package testnode

import (
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"
)

// Addresses inside the node's network namespace; nothing outside it sees
// them.
var (
	// NodeIP is held by a bridge without ports; the API server listens on it.
	NodeIP = netip.MustParseAddr("10.77.0.1")
	// PodCIDR is the CNI bridge's range.
	PodCIDR = netip.MustParsePrefix("10.244.0.0/24")
	// ServiceCIDR is the Services' range; the node routes it to its own
	// bridge so that its traffic to a ClusterIP reaches kube-proxy's DNAT.
	ServiceCIDR = netip.MustParsePrefix("10.96.0.0/24")
	// APIServiceIP is the kubernetes Service's ClusterIP.
	APIServiceIP = netip.MustParseAddr("10.96.0.1")
	// DNSServiceIP is kube-dns's ClusterIP (CoreDNS).
	DNSServiceIP = netip.MustParseAddr("10.96.0.10")
)

const (
	// NodeName is the node's name in the API.
	NodeName = "tiercache-node"
	// ClusterDomain is the cluster's DNS domain.
	ClusterDomain = "cluster.local"
	// apiPort is the API server's port on NodeIP.
	apiPort = 6443
	// prefix names everything the harness creates on the machine (its
	// work directory, cgroups and bridge), so a sweep finds a killed
	// run's leftovers by name.
	prefix = "tiercache-node-"
)

// Bounds on the harness's waits.
const (
	componentTimeout = 60 * time.Second  // one component answers its health check
	readyTimeout     = 120 * time.Second // the node Ready, CoreDNS answering
	stopTimeout      = 10 * time.Second  // SIGTERMed processes exit
	killTimeout      = 10 * time.Second  // SIGKILLed processes are gone
	commandTimeout   = 60 * time.Second  // one helper command (ip, mount, ctr)
)

// Tools are the paths of the node's binaries, from hack/node-tools.sh env.
type Tools struct {
	Etcd, APIServer, Kubectl string
	KubeBin                  string // kubelet, kube-controller-manager, kube-scheduler, kube-proxy
	ContainerdBin            string // containerd, containerd-shim-runc-v2, ctr
	Runc                     string
	CNIBin                   string
	Images                   string // pause.tar, coredns.tar, bin/imagebuild
}

// toolsFromEnv reads the TIERCACHE_NODE_* variables.
func toolsFromEnv() (Tools, error) {
	t := Tools{
		Etcd:          os.Getenv("TIERCACHE_NODE_ETCD"),
		APIServer:     os.Getenv("TIERCACHE_NODE_APISERVER"),
		Kubectl:       os.Getenv("TIERCACHE_NODE_KUBECTL"),
		KubeBin:       os.Getenv("TIERCACHE_NODE_KUBE_BIN"),
		ContainerdBin: os.Getenv("TIERCACHE_NODE_CONTAINERD_BIN"),
		Runc:          os.Getenv("TIERCACHE_NODE_RUNC"),
		CNIBin:        os.Getenv("TIERCACHE_NODE_CNI_BIN"),
		Images:        os.Getenv("TIERCACHE_NODE_IMAGES"),
	}
	for name, p := range map[string]string{
		"TIERCACHE_NODE_ETCD": t.Etcd, "TIERCACHE_NODE_APISERVER": t.APIServer,
		"TIERCACHE_NODE_KUBE_BIN": t.KubeBin, "TIERCACHE_NODE_CONTAINERD_BIN": t.ContainerdBin,
		"TIERCACHE_NODE_RUNC": t.Runc, "TIERCACHE_NODE_CNI_BIN": t.CNIBin, "TIERCACHE_NODE_IMAGES": t.Images,
	} {
		if p == "" {
			return t, fmt.Errorf("%s is not set (run through `make test-node`, or eval \"$(bash hack/node-tools.sh env)\")", name)
		}
		if _, err := os.Stat(p); err != nil {
			return t, fmt.Errorf("%s: %w (run bash hack/node-tools.sh)", name, err)
		}
	}
	return t, nil
}

// skipOrFail skips the test with why, or fails it when the node is
// required.
func skipOrFail(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("TIERCACHE_REQUIRE_NODE") == "1" {
		t.Fatalf("testnode: TIERCACHE_REQUIRE_NODE=1 but no node can run: %s", why)
	}
	t.Skipf("testnode: no Kubernetes node: %s (TIERCACHE_REQUIRE_NODE=1 makes this a failure)", why)
}

// canRun says why this machine cannot run a node, or "".
func canRun() string {
	if runtime.GOOS != "linux" {
		return "not Linux"
	}
	if os.Geteuid() != 0 {
		return "not root"
	}
	if _, err := os.Stat("/proc/self/ns/net"); err != nil {
		return "no network namespaces"
	}
	return ""
}
