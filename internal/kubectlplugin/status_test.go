package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/test/testredis"
)

func statusJSON(t *testing.T, r result) statusReport {
	t.Helper()
	if r.err != nil {
		t.Fatalf("status: %v (printed %s)", r.err, r.out)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("status -o json printed %q: %v", r.out, err)
	}
	return rep
}

func line(t *testing.T, rep statusReport, name string) sidecarStatus {
	t.Helper()
	for _, l := range rep.Sidecars {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("status lists %+v, not %s", rep.Sidecars, name)
	return sidecarStatus{}
}

var configInfo = regexp.MustCompile(`(?m)^tiercache_config_info\{version="([0-9a-f]+)"\} 1$`)

// version reads the config version the sidecar reports in its metrics.
func (n *node) version(t *testing.T) string {
	t.Helper()
	resp, err := n.hc.Get("http://" + n.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := configInfo.FindSubmatch(b)
	if m == nil {
		t.Fatalf("no tiercache_config_info in the metrics of %s", n.admin)
	}
	return string(m[1])
}

func TestStatusReadsEachPodsMetricsThroughTheAPIServer(t *testing.T) {
	ip := podIP(t)
	ns := namespace(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	o := newOrigin(t)
	current := startSidecar(t, o.URL, ip, "", smallL1)
	behind := startSidecar(t, o.URL, ip, "", smallL1+"defaults: {staleIfError: 1h}\n")
	setStatus(t, tier, v1alpha1.CacheTierStatus{
		ObservedGeneration: 1, ConfigHash: current.version(t), L2Mode: "none", InjectedPods: 4, ConnectedSidecars: 3, NACKs: 2,
		Sidecars: &v1alpha1.SidecarCounts{Total: 3, Current: 1, Behind: 1, Rejected: 1, Replicas: 2, Versions: []v1alpha1.VersionCount{
			{Version: behind.version(t)[:12], Sidecars: 2}, {Version: current.version(t)[:12], Sidecars: 1},
		}},
		LastNACK:   "version abc from shop/web-x: l1.maxSize: must be at least 1Mi",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonPublished, LastTransitionTime: metav1.Now()}},
	})
	createPod(t, tier, "web-1", true, current.adminPort(t), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-2", true, behind.adminPort(t), ip, corev1.PodRunning, false)
	createPod(t, tier, "web-3", true, closedPort(t, ip), ip, corev1.PodRunning, true)
	createPod(t, tier, "web-4", true, 1, "", "", false)
	createPod(t, tier, "web-5", false, 0, "", "", false)
	current.expect(t, "/a", "MISS")
	current.expect(t, "/a", "HIT")
	current.expect(t, "/b", "MISS")
	current.expect(t, "/a", "HIT")

	rep := statusJSON(t, run(t, Options{}, "status", "web", "-n", ns, "-o", "json"))
	if rep.Tier != ns+"/web" || rep.ConfigHash != current.version(t) || rep.InjectedPods != 4 || rep.ConnectedSidecars != 3 ||
		rep.NACKs != 2 || !strings.Contains(rep.LastNACK, "l1.maxSize") || len(rep.Conditions) != 1 || len(rep.Sidecars) != 5 ||
		rep.SidecarCounts == nil || rep.SidecarCounts.Rejected != 1 || len(rep.SidecarCounts.Versions) != 2 {
		t.Fatalf("status %+v, want the tier's status and five pods", rep)
	}
	l := line(t, rep, "web-1")
	if l.Config != configCurrent || l.Requests != 4 || l.HitRatio == nil || *l.HitRatio != 0.5 || l.L2 != "off" || l.Error != "" || l.Ready == nil || !*l.Ready {
		t.Fatalf("web-1: %+v, want current, 4 requests, hit ratio 0.5, L2 off, ready", l)
	}
	if l := line(t, rep, "web-2"); l.Config != configBehind || l.Version != behind.version(t) || l.HitRatio != nil || l.Requests != 0 || *l.Ready {
		t.Fatalf("web-2: %+v, want behind with its own version, no hit ratio before a request, not ready", l)
	}
	if l := line(t, rep, "web-3"); !strings.HasPrefix(l.Error, "metrics unavailable: pod proxy: ") || !strings.Contains(l.Error, "connection refused") || l.Config != "" {
		t.Fatalf("web-3: %+v, want its metrics listed as unavailable", l)
	}
	if l := line(t, rep, "web-4"); l.State != "not scheduled" || l.Error != "" {
		t.Fatalf("web-4: %+v, want not scheduled", l)
	}
	if l := line(t, rep, "web-5"); l.State != "not injected" {
		t.Fatalf("web-5: %+v, want not injected", l)
	}

	t.Run("the table shows each pod on a line", func(t *testing.T) {
		r := run(t, Options{}, "status", "web", "-n", ns)
		if r.err != nil {
			t.Fatal(r.err)
		}
		t.Logf("kubectl tiercache status web:\n%s", r.out)
		for _, want := range []*regexp.Regexp{
			regexp.MustCompile(`(?m)^CacheTier ` + ns + `/web \(generation 1, observed 1\)$`),
			regexp.MustCompile(`(?m)^  Ready: +True \(Published\)$`),
			regexp.MustCompile(`(?m)^  Sidecars: +4 injected, 3 connected to the control plane: 1 current, 1 behind, 1 rejected \(reports of 2 operator replicas\)$`),
			regexp.MustCompile(`(?m)^  Versions: +` + behind.version(t)[:12] + ` \(2\), ` + current.version(t)[:12] + ` \(1\)$`),
			regexp.MustCompile(`(?m)^  NACKs: +2, last: version abc`),
			regexp.MustCompile(`(?m)^SIDECAR +READY +CONFIG +HIT RATIO +REQUESTS +L2 +CONTROL PLANE +NACKS$`),
			regexp.MustCompile(`(?m)^web-1 +true +current +50\.0% +4 +off +- +0$`),
			regexp.MustCompile(`(?m)^web-2 +false +behind \(` + behind.version(t)[:12] + `\) +- +0 +off`),
			regexp.MustCompile(`(?m)^web-3 +true +metrics unavailable`),
			regexp.MustCompile(`(?m)^web-4 +false +not scheduled`),
			regexp.MustCompile(`(?m)^web-5 +false +not injected`),
			regexp.MustCompile(`(?m)^web-3: metrics unavailable: pod proxy: error trying to reach service: .*connection refused$`),
		} {
			if !want.MatchString(r.out) {
				t.Errorf("status printed:\n%s\nno line matches %s", r.out, want)
			}
		}
	})
}

func TestStatusReportsTheL2StateOfSidecarsAtAddresses(t *testing.T) {
	ns := namespace(t)
	rs := testredis.Start(t)
	tier := createTier(t, ns, "web", v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{rs.Addr()}}})
	setStatus(t, tier, v1alpha1.CacheTierStatus{L2Mode: "standalone"})
	o := newOrigin(t)
	sc := startSidecar(t, o.URL, "127.0.0.1", "", smallL1, "--redis-addr", rs.Addr(), "--tier", "web", "--pod-namespace", ns)
	sc.expect(t, "/a", "MISS")

	status := func() sidecarStatus {
		rep := statusJSON(t, run(t, Options{}, "status", "web", "-n", ns, "--address", sc.admin, "-o", "json"))
		if len(rep.Sidecars) != 1 {
			t.Fatalf("status lists %+v, want the one address", rep.Sidecars)
		}
		return rep.Sidecars[0]
	}
	if l := status(); l.Name != sc.admin || l.L2 != "ok" || l.Config != configUnknown || l.Ready != nil {
		t.Fatalf("with Redis up: %+v, want L2 ok, config unknown (the tier has no hash yet), no pod readiness", l)
	}

	rs.Stop()
	var l sidecarStatus
	for i := 0; ; i++ {
		sc.get(t, fmt.Sprintf("/down-%d", i))
		if l = status(); l.L2 == "circuit open" {
			break
		}
		if i == 200 {
			t.Fatalf("after 200 requests with Redis down: %+v, want the circuit open", l)
		}
	}
	if l.L2Errors == 0 {
		t.Fatalf("circuit open without L2 errors: %+v", l)
	}
}

func TestStatusNamesAMissingTierAndAnUnreadableAddress(t *testing.T) {
	ns := namespace(t)
	r := run(t, Options{}, "status", "nope", "-n", ns)
	if r.code() != 1 || !strings.Contains(r.err.Error(), `CacheTier "nope" not found in namespace "`+ns+`"`) {
		t.Fatalf("status of a missing tier: exit %d, err %v", r.code(), r.err)
	}
	createTier(t, ns, "web", v1alpha1.CacheTierSpec{})
	origin := newOrigin(t) // not a sidecar: its /metrics is no metrics page
	addr := strings.TrimPrefix(origin.URL, "http://")
	rep := statusJSON(t, run(t, Options{}, "status", "web", "-n", ns, "--address", addr, "--address", "127.0.0.1:1", "-o", "json"))
	if !strings.HasPrefix(line(t, rep, addr).Error, "metrics unavailable: parsing the metrics page") ||
		!strings.Contains(line(t, rep, "127.0.0.1:1").Error, "connection refused") {
		t.Fatalf("status %+v, want the origin and the closed port listed as unreadable", rep.Sidecars)
	}
}

func TestParseMetrics(t *testing.T) {
	page := func(lines ...string) []byte { return []byte(strings.Join(lines, "\n") + "\n") }
	up, down := true, false
	cases := []struct {
		name string
		page []byte
		want sidecarMetrics
		err  string
	}{
		{
			name: "a sidecar's page gives its version, requests and the hits among them",
			page: page(
				`# TYPE tiercache_requests_total counter`,
				`tiercache_requests_total{layer="l1",result="hit"} 6`,
				`tiercache_requests_total{layer="l2",result="hit"} 1`,
				`tiercache_requests_total{layer="l1",result="stale"} 1`,
				`tiercache_requests_total{layer="origin",result="miss"} 2`,
				`tiercache_requests_total{layer="none",result="bypass"} 0`,
				`# TYPE tiercache_config_info gauge`,
				`tiercache_config_info{version="abc123"} 1`,
				`# TYPE tiercache_l2_circuit_open gauge`,
				`tiercache_l2_circuit_open 0`,
			),
			want: sidecarMetrics{ConfigVersion: "abc123", Requests: 10, Served: 8},
		},
		{
			name: "requests are summed over labels it does not know (a rule label)",
			page: page(
				`# TYPE tiercache_requests_total counter`,
				`tiercache_requests_total{layer="l1",result="hit",rule="api"} 3`,
				`tiercache_requests_total{layer="l1",result="hit",rule="static"} 4`,
				`tiercache_requests_total{layer="origin",result="miss",rule="static"} 1`,
			),
			want: sidecarMetrics{Requests: 8, Served: 7},
		},
		{
			name: "only the version whose value is 1 is in effect",
			page: page(
				`tiercache_requests_total{result="miss"} 1`,
				`# TYPE tiercache_config_info gauge`,
				`tiercache_config_info{version="old"} 0`,
				`tiercache_config_info{version="new"} 1`,
			),
			want: sidecarMetrics{ConfigVersion: "new", Requests: 1},
		},
		{
			name: "an open circuit, L2 errors and dropped writes are read",
			page: page(
				`tiercache_requests_total{result="miss"} 1`,
				`# TYPE tiercache_l2_circuit_open gauge`,
				`tiercache_l2_circuit_open 1`,
				`# TYPE tiercache_l2_errors_total counter`,
				`tiercache_l2_errors_total{op="get"} 5`,
				`tiercache_l2_errors_total{op="set"} 2`,
				`# TYPE tiercache_l2_dropped_writes_total counter`,
				`tiercache_l2_dropped_writes_total 3`,
			),
			want: sidecarMetrics{Requests: 1, CircuitOpen: true, L2Errors: 7, L2DroppedWrites: 3},
		},
		{
			name: "a connected control plane and refused configs are read",
			page: page(
				`tiercache_requests_total{result="miss"} 1`,
				`# TYPE tiercache_control_plane_connected gauge`,
				`tiercache_control_plane_connected 1`,
				`# TYPE tiercache_config_nacks_total counter`,
				`tiercache_config_nacks_total 2`,
			),
			want: sidecarMetrics{Requests: 1, ControlPlane: &up, NACKs: 2},
		},
		{
			name: "a disconnected control plane is told from none",
			page: page(
				`tiercache_requests_total{result="miss"} 1`,
				`# TYPE tiercache_control_plane_connected gauge`,
				`tiercache_control_plane_connected 0`,
			),
			want: sidecarMetrics{Requests: 1, ControlPlane: &down},
		},
		{
			name: "a page without tiercache_requests_total is not a sidecar's",
			page: page(`# TYPE go_goroutines gauge`, `go_goroutines 12`),
			err:  "not a Tiercache sidecar's metrics",
		},
		{
			name: "a page larger than 8 MiB is refused before it is parsed",
			page: append(page(`tiercache_requests_total{result="miss"} 1`), strings.Repeat("# padding\n", maxMetricsBodyBytes/10+1)...),
			err:  "is larger than",
		},
		{
			name: "text that is no metrics page is an error",
			page: []byte("<html>502 Bad Gateway</html>\n"),
			err:  "parsing the metrics page",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseMetrics(c.page)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got.ControlPlane != nil) != fmt.Sprint(c.want.ControlPlane != nil) ||
				(got.ControlPlane != nil && *got.ControlPlane != *c.want.ControlPlane) {
				t.Fatalf("control plane %v, want %v", got.ControlPlane, c.want.ControlPlane)
			}
			got.ControlPlane, c.want.ControlPlane = nil, nil
			if got != c.want {
				t.Fatalf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestHitRatioIsNotDefinedBeforeTheFirstRequest(t *testing.T) {
	m := sidecarMetrics{}
	if r := m.HitRatio(); r != -1 {
		t.Fatalf("hit ratio of no requests %v, want -1 (none)", r)
	}
	m = sidecarMetrics{Requests: 4, Served: 1}
	if r := m.HitRatio(); r != 0.25 {
		t.Fatalf("hit ratio %v, want 0.25", r)
	}
}
