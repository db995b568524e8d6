package kubectlplugin

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/version"
)

func TestVersionNeedsNoCluster(t *testing.T) {
	build := version.Get()
	line := "kubectl-tiercache " + build.String() + "\n"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"--version prints the plugin's build on one line", []string{"--version"}, line},
		{"--version is the root's flag: a command refuses it", []string{"status", "--version"}, ""},
		{"version --client prints it as the client's", []string{"version", "--client"}, "Client: " + line},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, Options{}, c.args...)
			if c.want == "" {
				// cobra's --version is the root's flag only: a
				// subcommand refuses it as unknown.
				if r.code() != 2 {
					t.Errorf("exit %d, err %v; want the usage error of an unknown flag", r.code(), r.err)
				}
				return
			}
			if r.err != nil || r.out != c.want {
				t.Errorf("printed %q, err %v; want %q", r.out, r.err, c.want)
			}
		})
	}

	t.Run("-o json has kubectl version's shape", func(t *testing.T) {
		r := runArgs(t, Options{}, "version", "--client", "-o", "json")
		var got struct {
			ClientVersion map[string]string `json:"clientVersion"`
		}
		if err := json.Unmarshal([]byte(r.out), &got); r.err != nil || err != nil {
			t.Fatalf("version -o json: %v; parsing %q: %v", r.err, r.out, err)
		}
		want := map[string]string{"version": build.Version, "revision": build.Revision, "goVersion": build.GoVersion}
		for k, v := range want {
			if got.ClientVersion[k] != v {
				t.Errorf("clientVersion.%s = %q, want %q (all: %v)", k, got.ClientVersion[k], v, got.ClientVersion)
			}
		}
	})

	t.Run("-v is not --version", func(t *testing.T) {
		if r := runArgs(t, Options{}, "-v"); r.code() != 2 {
			t.Errorf("-v: exit %d, out %q; want the usage error of an unknown flag (kubectl users read -v as verbosity)", r.code(), r.out)
		}
	})
}

// TestVersionWithoutAClusterPrintsTheClientThenFails: as kubectl version,
// the client's line comes first and an unreachable cluster is an error.
func TestVersionWithoutAClusterPrintsTheClientThenFails(t *testing.T) {
	r := runArgs(t, Options{}, "--kubeconfig", filepath.Join(t.TempDir(), "none"), "version")
	if r.code() != 1 || !strings.HasPrefix(r.out, "Client: kubectl-tiercache ") || strings.Contains(r.out, "Operator:") {
		t.Errorf("exit %d, printed %q (%v); want the client's line, then exit 1", r.code(), r.out, r.err)
	}
}

// TestVersionReadsTheOperatorsAndEverySidecarsBuild: the operator pods'
// and the sidecars' builds come from their tiercache_build_info, read
// through the API server's pod proxy; a pod that does not run, or whose
// metrics cannot be read, is listed with the reason.
func TestVersionReadsTheOperatorsAndEverySidecarsBuild(t *testing.T) {
	ip := podIP(t)
	c := needCluster(t)
	sys, ns := namespace(t), namespace(t)

	// An operator pod of another build, its metrics served by a real
	// registry with the operator's collector.
	opBuild := version.Info{Version: "9.9.9", Revision: "feedbeef", GoVersion: "go1.99"}
	reg := prometheus.NewRegistry()
	reg.MustRegister(opBuild.Collector())
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	opPort := int32(l.Addr().(*net.TCPAddr).Port)
	op := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sys, Name: "tiercache-operator-0", Labels: map[string]string{
			"app.kubernetes.io/name": "tiercache", "app.kubernetes.io/component": "operator"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "operator", Image: "example.test/tiercache:9.9.9",
			Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: opPort}}}}},
	}
	ctx := context.Background()
	if err := c.Create(ctx, op); err != nil {
		t.Fatal(err)
	}
	op.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if err := c.Status().Update(ctx, op); err != nil {
		t.Fatal(err)
	}

	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	sc := startSidecar(t, newOrigin(t).URL, ip, "", smallL1)
	createPod(t, tier, "web-1", true, sc.adminPort(t), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-2", true, closedPort(t, ip), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-3", true, 1, "", "", false)

	r := run(t, Options{}, "version", "-n", ns, "-o", "json")
	if r.err != nil {
		t.Fatalf("version: %v\n%s", r.err, r.errOut)
	}
	var rep versionReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.out)
	}
	var ours []podVersion
	for _, l := range rep.Operator {
		if l.Namespace == sys {
			ours = append(ours, l)
		}
	}
	if len(ours) != 1 || ours[0].Info != opBuild || ours[0].Image != "example.test/tiercache:9.9.9" || ours[0].Error != "" {
		t.Errorf("operator lines %+v, want tiercache-operator-0 at %v", ours, opBuild)
	}
	if len(rep.Sidecars) != 3 {
		t.Fatalf("sidecars %+v, want web-1, web-2, web-3", rep.Sidecars)
	}
	if s := rep.Sidecars[0]; s.Pod != "web-1" || s.Info != version.Get() || s.Tier != "web" || s.Error != "" {
		t.Errorf("web-1: %+v, want the sidecar's own build %v", s, version.Get())
	}
	if s := rep.Sidecars[1]; s.Pod != "web-2" || !strings.Contains(s.Error, "connection refused") {
		t.Errorf("web-2: %+v, want its metrics unreadable (connection refused)", s)
	}
	if s := rep.Sidecars[2]; s.Pod != "web-3" || s.Error != "not scheduled" {
		t.Errorf("web-3: %+v, want not scheduled", s)
	}

	table := run(t, Options{}, "version", "-n", ns)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^Operator: ` + sys + `/tiercache-operator-0 9\.9\.9 \(revision feedbeef, go1\.99\)$`),
		regexp.MustCompile(`(?m)^Sidecars: .*\(1\)`),
		regexp.MustCompile(`(?m)^` + ns + ` +web-1 +web +` + regexp.QuoteMeta(version.Get().Version) + ` `),
		regexp.MustCompile(`(?m)^` + ns + ` +web-3 +web +- +not scheduled +example\.test/tiercache:1$`),
	} {
		if !want.MatchString(table.out) {
			t.Errorf("version printed:\n%s\nno line matches %s", table.out, want)
		}
	}
}
