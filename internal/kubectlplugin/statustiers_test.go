package kubectlplugin

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

func tierLines(t *testing.T, r result) map[string]tierLine {
	t.Helper()
	if r.err != nil {
		t.Fatalf("status: %v\n%s", r.err, r.errOut)
	}
	var rep struct {
		Tiers []tierLine `json:"tiers"`
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, r.out)
	}
	lines := map[string]tierLine{}
	for _, l := range rep.Tiers {
		lines[l.Namespace+"/"+l.Tier] = l
	}
	return lines
}

// TestStatusWithoutATierListsEveryTier: `status` alone lists the
// namespace's tiers and `status -A` every namespace's, each with Ready, its
// reason and the status counts, and a status older than the spec says so.
func TestStatusWithoutATierListsEveryTier(t *testing.T) {
	shop, blog := namespace(t), namespace(t)
	web := createTier(t, shop, "web", v1alpha1.CacheTierSpec{})
	setStatus(t, web, v1alpha1.CacheTierStatus{
		ObservedGeneration: 1, L2Mode: "none", InjectedPods: 3, ConnectedSidecars: 2,
		Sidecars: &v1alpha1.SidecarCounts{Total: 2, Current: 1, Behind: 1, Replicas: 1},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
			Reason: "SidecarsNotConnected", Message: "2 of 3 injected pods have a connected sidecar", LastTransitionTime: metav1.Now()}},
	})
	createTier(t, shop, "api", v1alpha1.CacheTierSpec{})
	posts := createTier(t, blog, "posts", v1alpha1.CacheTierSpec{})
	setStatus(t, posts, v1alpha1.CacheTierStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady,
		Status: metav1.ConditionTrue, Reason: "NoPods", Message: "no pod is injected for this tier", LastTransitionTime: metav1.Now()}}})

	here := tierLines(t, run(t, Options{}, "status", "-n", shop, "-o", "json"))
	if len(here) != 2 {
		t.Fatalf("status -n %s listed %v, want web and api only", shop, here)
	}
	w := here[shop+"/web"]
	if w.Ready != "False" || w.Reason != "SidecarsNotConnected" || !strings.Contains(w.Message, "2 of 3") ||
		w.Pods != 3 || w.Connected != 2 || w.Current != 1 || w.Behind != 1 || w.Rejected != 0 || w.L2Mode != "none" || w.Stale {
		t.Errorf("web: %+v, want its Ready condition and counts", w)
	}
	if a := here[shop+"/api"]; a.Ready != "-" || !a.Stale || a.Pods != 0 {
		t.Errorf("api (never reconciled): %+v, want Ready -, status stale, 0 pods", a)
	}

	all := tierLines(t, run(t, Options{}, "status", "-A", "-o", "json"))
	for _, name := range []string{shop + "/web", shop + "/api", blog + "/posts"} {
		if _, ok := all[name]; !ok {
			t.Errorf("status -A does not list %s", name)
		}
	}
	if p := all[blog+"/posts"]; p.Ready != "True" || p.Reason != "NoPods" {
		t.Errorf("posts: %+v, want Ready True (NoPods)", p)
	}

	table := run(t, Options{}, "status", "-n", shop)
	if table.err != nil {
		t.Fatal(table.err)
	}
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^NAMESPACE +TIER +READY +REASON +PODS +CONNECTED +CURRENT +BEHIND +REJECTED +L2$`),
		regexp.MustCompile(`(?m)^` + shop + ` +web +False +SidecarsNotConnected +3 +2 +1 +1 +0 +none$`),
		regexp.MustCompile(`(?m)^` + shop + ` +api +- +- \(status of an older generation\) +0 +0 +0 +0 +0 +-$`),
	} {
		if !want.MatchString(table.out) {
			t.Errorf("status printed:\n%s\nno line matches %s", table.out, want)
		}
	}
	empty := namespace(t)
	if r := run(t, Options{}, "status", "-n", empty); r.err != nil || !strings.Contains(r.out, "No CacheTiers in namespace "+empty) {
		t.Errorf("status in an empty namespace: %q, %v", r.out, r.err)
	}
}

func TestStatusAllNamespacesRefusesATierOrAddresses(t *testing.T) {
	for _, args := range [][]string{
		{"status", "web", "-A"},
		{"status", "--address", "127.0.0.1:9090"},
		{"status", "a", "b"},
	} {
		r := runArgs(t, Options{}, args...)
		if r.code() != 2 || r.err == nil {
			t.Errorf("%v: exit %d (%v), want a usage error (2)", args, r.code(), r.err)
		}
	}
}
