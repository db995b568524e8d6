package testnode

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// TestANodeRunsPodsServicesAndDNS: the node gets Ready; a 2-replica
// Deployment whose pods have a native sidecar (an init container with
// restartPolicy Always) runs, the app reaching its sidecar at start; its
// ClusterIP Service answers through kube-proxy and its name resolves
// through CoreDNS; and after the teardown the machine has no link, mount,
// iptables rule, cgroup or directory more than before.
func TestANodeRunsPodsServicesAndDNS(t *testing.T) {
	Sweep(t)
	before := snapshotMachine(t)
	n := Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	archive := n.BuildImage(t, "github.com/tiercache/tiercache/test/testnode/hello", "tiercache.local/hello:1")
	if err := n.ImportImage(ctx, archive); err != nil {
		t.Fatal(err)
	}
	if err := n.waitServiceAccount(ctx, metav1.NamespaceDefault); err != nil {
		t.Fatal(err)
	}
	c := n.Client()
	if _, err := c.AppsV1().Deployments("default").Create(ctx, helloDeployment(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := c.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": "hello"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	err = poll(ctx, 90*time.Second, "2 hello pods Running and Ready", nil, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=hello"})
		if err != nil {
			return false, err
		}
		ready := 0
		var states []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && podReady(&p) {
				ready++
			}
			states = append(states, fmt.Sprintf("%s %s %s", p.Name, p.Status.Phase, containerStates(&p)))
		}
		return ready == 2, fmt.Errorf("%d of 2 ready: %v", ready, states)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("2 pods Running and Ready %.1fs after the Deployment was created", time.Since(start).Seconds())

	// The Service, through kube-proxy's rules; they may lag the
	// endpoints a moment.
	url := "http://" + svc.Spec.ClusterIP + "/"
	var body string
	err = poll(ctx, 30*time.Second, "the Service at "+url, nil, func(ctx context.Context) (bool, error) {
		b, err := get(ctx, n.HTTPClient(), url)
		body = b
		return err == nil, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(body, "hello from hello-") || !strings.Contains(body, "(reached http://127.0.0.1:8081/ at start: sidecar from hello-") {
		t.Fatalf("the Service answered %q; want the app, which reached its sidecar at start", body)
	}
	t.Logf("the Service answered: %s", strings.TrimSpace(body))

	name := "hello.default.svc." + ClusterDomain
	addrs, err := n.Resolver().LookupHost(ctx, name)
	if err != nil || !slices.Contains(addrs, svc.Spec.ClusterIP) {
		t.Fatalf("%s resolved to %v (%v); want %s", name, addrs, err, svc.Spec.ClusterIP)
	}

	if err := n.Teardown(); err != nil {
		t.Fatal(err)
	}
	after := snapshotMachine(t)
	for what, b := range before {
		if a := after[what]; a != b {
			t.Errorf("the node left %s behind:\nbefore:\n%s\nafter:\n%s", what, b, a)
		}
	}
}

func helloDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "hello"}
	image := "tiercache.local/hello:1"
	probe := func(port string) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromString(port)}},
			PeriodSeconds: 1,
		}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "hello"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					InitContainers: []corev1.Container{{
						Name:            "sidecar",
						Image:           image,
						ImagePullPolicy: corev1.PullNever,
						RestartPolicy:   ptr.To(corev1.ContainerRestartPolicyAlways),
						Args:            []string{"-listen", ":8081", "-text", "sidecar"},
						StartupProbe:    &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8081)}}, PeriodSeconds: 1},
					}},
					Containers: []corev1.Container{{
						Name:            "app",
						Image:           image,
						ImagePullPolicy: corev1.PullNever,
						Args:            []string{"-listen", ":8080", "-wait-for", "http://127.0.0.1:8081/"},
						Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
						ReadinessProbe:  probe("http"),
					}},
				},
			},
		},
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func containerStates(p *corev1.Pod) string {
	var s []string
	for _, c := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case c.State.Running != nil:
			s = append(s, c.Name+"=running")
		case c.State.Waiting != nil:
			s = append(s, c.Name+"=waiting:"+c.State.Waiting.Reason+":"+c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s = append(s, c.Name+"=terminated:"+c.State.Terminated.Reason)
		}
	}
	return strings.Join(s, ",")
}

func get(ctx context.Context, c *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(b), fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), nil
}

// snapshotMachine is what a node must leave as it found it, seen from the
// test's own namespaces: links, mount points, iptables rules, the sysctls
// kubelet sets, cgroups and directories named with the harness's prefix,
// and what is in the paths kubelet, libcni and containerd write whatever
// their flags say.
func snapshotMachine(t *testing.T) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	snap := map[string]string{}
	links, err := exec.CommandContext(ctx, "ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for line := range strings.Lines(string(links)) {
		if f := strings.Fields(line); len(f) > 1 {
			names = append(names, f[1])
		}
	}
	snap["links"] = strings.Join(names, " ")
	var mounts []string
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mi)) {
		if f := strings.Fields(line); len(f) > 4 {
			mounts = append(mounts, f[4])
		}
	}
	slices.Sort(mounts)
	snap["mounts"] = strings.Join(mounts, "\n")
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.CommandContext(ctx, save).Output()
		if err != nil {
			t.Fatalf("%s: %v", save, err)
		}
		var rules []string
		for line := range strings.Lines(string(out)) {
			if !strings.HasPrefix(line, "#") {
				rules = append(rules, strings.TrimSpace(line))
			}
		}
		snap[save] = strings.Join(rules, "\n")
	}
	var sysctls []string
	for _, k := range kubeletSysctls {
		v, err := os.ReadFile(filepath.Join("/proc/sys", k))
		if err != nil {
			t.Fatal(err)
		}
		sysctls = append(sysctls, k+"="+strings.TrimSpace(string(v)))
	}
	snap["sysctls"] = strings.Join(sysctls, "\n")
	var owned []string
	for _, dir := range append(cgroupHierarchies(), os.TempDir(), "/var/lib/cni", "/var/lib/kubelet", "/var/log/containers", "/var/log/pods", "/run/containerd") {
		m, _ := filepath.Glob(filepath.Join(dir, "*"))
		for _, p := range m {
			if strings.HasPrefix(filepath.Base(p), prefix) || !strings.HasPrefix(dir, "/sys/") && dir != os.TempDir() {
				owned = append(owned, p)
			}
		}
	}
	snap["files and cgroups"] = strings.Join(owned, "\n")
	return snap
}
