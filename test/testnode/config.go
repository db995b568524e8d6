package testnode

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// Image names the harness imports into its containerd.
const (
	PauseImage   = "tiercache.local/pause:1"
	corednsImage = "tiercache.local/coredns:1.14.7"
)

// layout is where one node keeps its files, all under work.
type layout struct {
	work   string
	cgroup string // the pods' cgroup root, "/" + base(work)
}

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.work}, elem...)...)
}

func (l layout) containerdSock() string { return l.path("containerd.sock") }
func (l layout) kubeconfig() string     { return l.path("pki", kubeconfigF) }
func (l layout) bridge() string         { return "tcn" + filepath.Base(l.work)[len(prefix):] }

// writeConfigs writes every component's configuration file.
func (l layout) writeConfigs(p *pki, tools Tools) error {
	files := map[string]func() ([]byte, error){
		"pki/" + kubeconfigF:              func() ([]byte, error) { return l.kubeconfigFile(p), nil },
		"containerd.toml":                 func() ([]byte, error) { return l.containerdConfig(tools), nil },
		"cni/net.d/10-tiercache.conflist": l.cniConfig,
		"kubelet.json":                    func() ([]byte, error) { return l.kubeletConfig(p) },
		"kube-proxy.json":                 l.kubeProxyConfig,
		"resolv.conf":                     func() ([]byte, error) { return []byte("options ndots:1\n"), nil },
	}
	for name, render := range files {
		b, err := render()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		path := l.path(name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (l layout) kubeconfigFile(p *pki) []byte {
	return fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters:
- name: node
  cluster:
    server: https://%s:%d
    certificate-authority: %s
users:
- name: admin
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: node
  context: {cluster: node, user: admin}
current-context: node
`, NodeIP, apiPort, p.path(caCert), p.path(adminCert), p.path(adminKey))
}

// containerdConfig: a containerd of the node's own (socket, root, state,
// runc root), whose CRI never pulls the sandbox image, never lowers
// oom_score_adj (root here lacks CAP_SYS_RESOURCE) and keeps pods' network
// namespaces under its state directory.
func (l layout) containerdConfig(tools Tools) []byte {
	q := strconv.Quote
	return fmt.Appendf(nil, `version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %s

[plugins."io.containerd.internal.v1.opt"]
  path = %s

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %s
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %s
        Root = %s
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %s
    conf_dir = %s
`, q(l.path("containerd/root")), q(l.path("containerd/state")), q(l.containerdSock()),
		q(l.path("containerd/opt")), q(PauseImage), q(tools.Runc), q(l.path("runc")),
		q(tools.CNIBin), q(l.path("cni/net.d")))
}

// cniConfig: a bridge with host-local addresses from PodCIDR, masquerade,
// hairpin and port mappings. No loopback entry: containerd adds it.
func (l layout) cniConfig() ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "tiercache-node",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": l.bridge() + "p", "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"ranges":  [][]map[string]string{{{"subnet": PodCIDR.String()}}},
					"routes":  []map[string]string{{"dst": "0.0.0.0/0"}},
					"dataDir": l.path("cni/ipam"),
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}, "", "  ")
}

func (l layout) kubeletConfig(p *pki) ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// kubelet 1.35 refuses cgroup v1 unless told; PID 1 is not systemd.
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		"cgroupRoot":   l.cgroup,
		// Lowering oom_score_adj needs CAP_SYS_RESOURCE.
		"oomScoreAdj": 0,
		// Images cannot be pulled again: never collect them.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"evictionHard":                map[string]string{"memory.available": "100Mi"},
		"containerRuntimeEndpoint":    "unix://" + l.containerdSock(),
		"imageServiceEndpoint":        "unix://" + l.containerdSock(),
		"volumePluginDir":             l.path("flex"),
		"podLogsDir":                  l.path("pod-logs"),
		"clusterDNS":                  []string{DNSServiceIP.String()},
		"clusterDomain":               ClusterDomain,
		"resolvConf":                  l.path("resolv.conf"),
		"failSwapOn":                  false,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 10248,
		"readOnlyPort":                0,
		"authentication": map[string]any{
			"anonymous": map[string]bool{"enabled": false},
			"webhook":   map[string]bool{"enabled": false},
			"x509":      map[string]string{"clientCAFile": p.path(caCert)},
		},
		"authorization":                   map[string]string{"mode": "AlwaysAllow"},
		"syncFrequency":                   "5s",
		"fileCheckFrequency":              "5s",
		"nodeStatusUpdateFrequency":       "2s",
		"serializeImagePulls":             false,
		"shutdownGracePeriod":             "0s",
		"shutdownGracePeriodCriticalPods": "0s",
	}, "", "  ")
}

// kubeProxyConfig: iptables mode, leaving machine-wide sysctls alone
// (conntrack sizes and timeouts, route_localnet for localhost node ports).
func (l layout) kubeProxyConfig() ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"mode":               "iptables",
		"clientConnection":   map[string]string{"kubeconfig": l.kubeconfig()},
		"hostnameOverride":   NodeName,
		"bindAddress":        NodeIP.String(),
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"clusterCIDR":        PodCIDR.String(),
		"nodePortAddresses":  []string{NodeIP.String() + "/32"},
		"oomScoreAdj":        0,
		"iptables":           map[string]any{"localhostNodePorts": false, "minSyncPeriod": "0s", "syncPeriod": "30s"},
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0,
			"tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
	}, "", "  ")
}
