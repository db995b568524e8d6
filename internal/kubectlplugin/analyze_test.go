package kubectlplugin

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// TestAnalyzeNamesWhatDefeatsTheCache: analyze turns the tier's status
// into findings (errors for what breaks serving, warnings for what
// weakens it), prints the ACL line of an L2 without its own user, says
// nothing of a healthy tier, and exits 1 only on an error.
func TestAnalyzeNamesWhatDefeatsTheCache(t *testing.T) {
	ns := namespace(t)
	now := metav1.Now()
	cond := func(typ string, st metav1.ConditionStatus, reason, msg string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, LastTransitionTime: now}
	}
	bad := createTier(t, ns, "web", v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}}})
	setStatus(t, bad, v1alpha1.CacheTierStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
		cond(v1alpha1.ConditionValid, metav1.ConditionTrue, v1alpha1.ReasonRendered, "ok"),
		cond(v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonSidecarsNotConnected, "2 of 3 injected pods have a connected sidecar"),
		cond(v1alpha1.ConditionServicesRouted, metav1.ConditionFalse, v1alpha1.ReasonServiceTargetsAppPort, "Service web port http targets the application's port 8080 by number"),
		cond(v1alpha1.ConditionSidecarImagesMatch, metav1.ConditionFalse, v1alpha1.ReasonOtherImages, "1 of 3 injected pods run another sidecar image"),
	}})
	onePod := createTier(t, ns, "api", v1alpha1.CacheTierSpec{})
	setStatus(t, onePod, v1alpha1.CacheTierStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
		cond(v1alpha1.ConditionReady, metav1.ConditionTrue, v1alpha1.ReasonApplied, "all"),
		cond(v1alpha1.ConditionPurgesReachEveryPod, metav1.ConditionTrue, v1alpha1.ReasonAtMostOnePod, "1 pod"),
	}})
	replicas := createTier(t, ns, "img", v1alpha1.CacheTierSpec{})
	setStatus(t, replicas, v1alpha1.CacheTierStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
		cond(v1alpha1.ConditionPurgesReachEveryPod, metav1.ConditionFalse, v1alpha1.ReasonL1OnlyReplicas, "3 pods cache in L1 only"),
	}})

	r := run(t, Options{}, "analyze", "-n", ns, "-o", "json")
	if r.code() != 1 {
		t.Errorf("analyze exit %d (%v), want 1: web has errors", r.code(), r.err)
	}
	var rep struct {
		Tiers []tierFindings `json:"tiers"`
	}
	if err := json.Unmarshal([]byte(r.out), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.out)
	}
	got := map[string][]string{}
	for _, tf := range rep.Tiers {
		for _, f := range tf.Findings {
			got[tf.Tier] = append(got[tf.Tier], f.Level+" "+f.What+" "+f.Reason)
		}
		if _, ok := got[tf.Tier]; !ok {
			got[tf.Tier] = nil
		}
	}
	want := map[string]string{
		ns + "/web": "error Ready SidecarsNotConnected|error ServicesRouted ServiceTargetsAppPort|warning SidecarImagesMatch OtherImages|warning L2ACL ",
		ns + "/api": "",
		ns + "/img": "warning PurgesReachEveryPod L1OnlyReplicas",
	}
	for tier, w := range want {
		if g := strings.Join(got[tier], "|"); g != w {
			t.Errorf("%s: findings %q, want %q", tier, g, w)
		}
	}
	var acl string
	for _, tf := range rep.Tiers {
		for _, f := range tf.Findings {
			if f.What == "L2ACL" {
				acl = f.Fix
			}
		}
	}
	prefix := "tc:" + ns + "/web:"
	if !strings.HasPrefix(acl, "ACL SETUSER tc-"+ns+"-web reset on >PASSWORD ~"+prefix+"* &"+prefix+"inval -@all +hello") {
		t.Errorf("the L2 finding's fix is %q, want the tier's ACL SETUSER", acl)
	}

	if r := run(t, Options{}, "analyze", "api", "-n", ns); r.code() != 0 || !strings.Contains(r.out, ns+"/api: no findings") {
		t.Errorf("analyze api: exit %d, %q; want no findings, exit 0", r.code(), r.out)
	}
	if r := run(t, Options{}, "analyze", "img", "-n", ns); r.code() != 0 ||
		!strings.Contains(r.out, "  warning PurgesReachEveryPod (L1OnlyReplicas): 3 pods cache in L1 only") {
		t.Errorf("analyze img: exit %d, %q; want the warning, exit 0", r.code(), r.out)
	}
	if r := runArgs(t, Options{}, "analyze", "web", "-A"); r.code() != 2 {
		t.Errorf("analyze web -A: exit %d, want a usage error", r.code())
	}
}
