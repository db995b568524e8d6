package operator

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

func TestSidecarCounts(t *testing.T) {
	cur, old, older := version('c'), version('a'), version('b')
	s := func(v string) string { return v[:12] }
	cases := map[string]struct {
		tally sidecarTally
		hash  string
		want  v1alpha1.SidecarCounts
	}{
		"sidecars on the current version are current": {
			tally: sidecarTally{Replicas: 2, Connected: 3, Applied: map[string]int{s(cur): 3}},
			hash:  cur,
			want:  v1alpha1.SidecarCounts{Total: 3, Current: 3, Replicas: 2, Versions: []v1alpha1.VersionCount{{Version: s(cur), Sidecars: 3}}},
		},
		"a sidecar that refused the current version is rejected, not behind": {
			tally: sidecarTally{Replicas: 1, Connected: 3, Applied: map[string]int{s(cur): 2, s(old): 1}, Rejected: map[string]int{s(cur): 1}},
			hash:  cur,
			want: v1alpha1.SidecarCounts{Total: 3, Current: 2, Rejected: 1, Replicas: 1,
				Versions: []v1alpha1.VersionCount{{Version: s(cur), Sidecars: 2}, {Version: s(old), Sidecars: 1}}},
		},
		"a sidecar that refused an older version and was not sent the current one yet is behind": {
			tally: sidecarTally{Replicas: 1, Connected: 2, Applied: map[string]int{s(cur): 1, s(older): 1}, Rejected: map[string]int{s(old): 1}},
			hash:  cur,
			want: v1alpha1.SidecarCounts{Total: 2, Current: 1, Behind: 1, Replicas: 1,
				Versions: []v1alpha1.VersionCount{{Version: s(older), Sidecars: 1}, {Version: s(cur), Sidecars: 1}}},
		},
		"a sidecar that named no version is behind, listed as unknown": {
			tally: sidecarTally{Replicas: 1, Connected: 2, Applied: map[string]int{"": 1, s(cur): 1}},
			hash:  cur,
			want: v1alpha1.SidecarCounts{Total: 2, Current: 1, Behind: 1, Replicas: 1,
				Versions: []v1alpha1.VersionCount{{Version: "unknown", Sidecars: 1}, {Version: s(cur), Sidecars: 1}}},
		},
		"sidecars on versions a report left out are behind": {
			tally: sidecarTally{Replicas: 1, Connected: 10, Applied: map[string]int{s(cur): 4}},
			hash:  cur,
			want:  v1alpha1.SidecarCounts{Total: 10, Current: 4, Behind: 6, Replicas: 1, Versions: []v1alpha1.VersionCount{{Version: s(cur), Sidecars: 4}}},
		},
		"the parts never exceed the whole": {
			tally: sidecarTally{Replicas: 1, Connected: 2, Applied: map[string]int{s(cur): 2}, Rejected: map[string]int{s(cur): 2}},
			hash:  cur,
			want:  v1alpha1.SidecarCounts{Total: 2, Current: 2, Replicas: 1, Versions: []v1alpha1.VersionCount{{Version: s(cur), Sidecars: 2}}},
		},
		"without a config hash (never valid) every sidecar is behind": {
			tally: sidecarTally{Replicas: 1, Connected: 1, Applied: map[string]int{s(old): 1}},
			want:  v1alpha1.SidecarCounts{Total: 1, Behind: 1, Replicas: 1, Versions: []v1alpha1.VersionCount{{Version: s(old), Sidecars: 1}}},
		},
		"no report names the tier": {
			tally: sidecarTally{Replicas: 3},
			hash:  cur,
			want:  v1alpha1.SidecarCounts{Replicas: 3},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := sidecarCounts(c.tally, c.hash)
			if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", c.want) {
				t.Errorf("sidecarCounts =\n %+v\nwant\n %+v", got, c.want)
			}
			if got.Current+got.Behind+got.Rejected != got.Total {
				t.Errorf("current %d + behind %d + rejected %d != total %d", got.Current, got.Behind, got.Rejected, got.Total)
			}
		})
	}
}

func TestSidecarCountsListAtMostEightVersionsMostCommonFirst(t *testing.T) {
	applied := map[string]int{}
	for i := range 12 {
		applied[fmt.Sprintf("%012x", i)] = i + 1
	}
	got := sidecarCounts(sidecarTally{Connected: 78, Applied: applied}, "")
	if len(got.Versions) != statusVersions {
		t.Fatalf("%d versions listed, want %d", len(got.Versions), statusVersions)
	}
	for i, v := range got.Versions {
		if want := fmt.Sprintf("%012x", 11-i); v.Version != want || v.Sidecars != int32(12-i) {
			t.Errorf("versions[%d] = %+v, want %s with %d", i, v, want, 12-i)
		}
	}
}

func TestReadiness(t *testing.T) {
	hash := version('c')
	restart := []podRestart{{Pod: "web-1", Fields: []string{"spec.purge.tokenSecretRef"}}, {Pod: "web-0", Fields: []string{"spec.l2.passwordSecretRef", "spec.purge.tokenSecretRef"}}}
	cases := map[string]struct {
		counts   v1alpha1.SidecarCounts
		pods     int32
		restart  []podRestart
		lastNACK string
		status   metav1.ConditionStatus
		reason   string
		message  string
	}{
		"a tier without pods is Ready: there is nothing to wait for (a Deployment scaled to 0 is Available)": {
			status: metav1.ConditionTrue, reason: v1alpha1.ReasonNoPods,
			message: "config version cccccccccccc is published; no pod is injected for this tier",
		},
		"a tier whose pods' sidecars all applied the config is Ready": {
			counts: v1alpha1.SidecarCounts{Total: 3, Current: 3}, pods: 3, status: metav1.ConditionTrue, reason: v1alpha1.ReasonApplied,
			message: "all 3 injected pods have a connected sidecar that applied config version cccccccccccc",
		},
		"pods whose sidecars are not connected make the tier not Ready": {
			counts: v1alpha1.SidecarCounts{}, pods: 2, status: metav1.ConditionFalse, reason: v1alpha1.ReasonSidecarsNotConnected,
			message: "0 of 2 injected pods have a sidecar connected to the control plane (0 applied config version cccccccccccc, 0 run an older one); the others are starting or cannot reach the control plane: see their sidecars' tiercache_control_plane_connected and logs",
		},
		"some pods connected and current is not enough": {
			counts: v1alpha1.SidecarCounts{Total: 2, Current: 2}, pods: 3, status: metav1.ConditionFalse, reason: v1alpha1.ReasonSidecarsNotConnected,
			message: "2 of 3 injected pods have a sidecar connected to the control plane (2 applied config version cccccccccccc, 0 run an older one)",
		},
		"a sidecar that refused the config makes the tier not Ready, with the refusal": {
			counts: v1alpha1.SidecarCounts{Total: 4, Current: 2, Behind: 1, Rejected: 1}, pods: 5, restart: restart, lastNACK: "version cccccccccccc refused by shop/web-2: l2.tls: bad CA",
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonConfigRejected,
			message: "1 of 4 connected sidecars refused config version cccccccccccc and keep their last good config; 2 applied it, 1 run an older one; last refusal: version cccccccccccc refused by shop/web-2: l2.tls: bad CA",
		},
		"pods admitted with other Secrets make the tier not Ready, naming them and the fields": {
			counts: v1alpha1.SidecarCounts{Total: 2, Current: 2}, pods: 2, restart: restart,
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonRestartRequired,
			message: "2 of 2 injected pods were admitted with other Secrets than the tier names now (spec.l2.passwordSecretRef, spec.purge.tokenSecretRef): a pod's volumes are fixed at admission, so they keep using the old ones until restarted; restart them (kubectl rollout restart their workload): web-1, web-0",
		},
		"a sidecar still on an older config makes the tier not Ready": {
			counts: v1alpha1.SidecarCounts{Total: 3, Current: 1, Behind: 2}, pods: 3,
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonSidecarsBehind,
			message: "1 of 3 connected sidecars applied config version cccccccccccc; 2 still run an older one",
		},
		"a sidecar of a leaving pod still on an older config makes the tier not Ready": {
			counts: v1alpha1.SidecarCounts{Total: 3, Current: 2, Behind: 1}, pods: 2,
			status: metav1.ConditionFalse, reason: v1alpha1.ReasonSidecarsBehind,
			message: "2 of 3 connected sidecars applied config version cccccccccccc; 1 still run an older one",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			st, reason, msg := readiness(c.counts, c.pods, c.restart, hash, c.lastNACK)
			if st != c.status || reason != c.reason || !strings.HasPrefix(msg, c.message) {
				t.Errorf("readiness = %s %s %q\nwant %s %s %q", st, reason, msg, c.status, c.reason, c.message)
			}
		})
	}
}

func TestRestartMessageNamesAtMostTenPods(t *testing.T) {
	var restart []podRestart
	for i := range 13 {
		restart = append(restart, podRestart{Pod: fmt.Sprintf("web-%02d", i), Fields: []string{"spec.l2.tls.caSecretRef"}})
	}
	msg := restartMessage(restart, 20)
	if !strings.HasPrefix(msg, "13 of 20 injected pods") || !strings.HasSuffix(msg, "web-08, web-09 and 3 more") || strings.Contains(msg, "web-10") {
		t.Errorf("message %q: want 13 of 20, ten names and 3 more", msg)
	}
}

func TestTallyAddsUpReplicas(t *testing.T) {
	early := &nackReport{Version: "a", Node: "shop/web-0", Message: "early", At: time.Unix(100, 0)}
	late := &nackReport{Version: "b", Node: "shop/web-1", Message: "late", At: time.Unix(200, 0)}
	var tally sidecarTally
	tally.add(tierReport{Connected: 2, Applied: map[string]int{"a": 1, "b": 1}, NACKs: 3, LastNACK: late})
	tally.add(tierReport{Connected: 3, Applied: map[string]int{"b": 3}, Rejected: map[string]int{"b": 1}, NACKs: 1, LastNACK: early})
	tally.add(tierReport{})
	if tally.Connected != 5 || tally.Applied["a"] != 1 || tally.Applied["b"] != 4 || tally.Rejected["b"] != 1 || tally.NACKs != 4 {
		t.Errorf("tally = %+v", tally)
	}
	if tally.LastNACK != late || !strings.Contains(tally.LastNACK.String(), "refused by shop/web-1: late") {
		t.Errorf("last NACK %v, want the latest of all replicas", tally.LastNACK)
	}
}
