package operator

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

func TestPurgesReach(t *testing.T) {
	for name, c := range map[string]struct {
		l2     bool
		relay  bool
		pods   int
		st     metav1.ConditionStatus
		reason string
	}{
		"L2 reaches every pod":         {true, true, 5, metav1.ConditionTrue, v1alpha1.ReasonThroughL2},
		"one L1-only pod is every pod": {false, false, 1, metav1.ConditionTrue, v1alpha1.ReasonAtMostOnePod},
		"no pod yet":                   {false, false, 0, metav1.ConditionTrue, v1alpha1.ReasonAtMostOnePod},
		"two L1-only pods hear one another through the relay":          {false, true, 2, metav1.ConditionTrue, v1alpha1.ReasonThroughRelay},
		"two L1-only pods do not hear another without a control plane": {false, false, 2, metav1.ConditionFalse, v1alpha1.ReasonL1OnlyReplicas},
	} {
		st, reason, msg := purgesReach(c.l2, c.relay, c.pods)
		if st != c.st || reason != c.reason || msg == "" {
			t.Errorf("%s: %s %s %q, want %s %s", name, st, reason, msg, c.st, c.reason)
		}
	}
}

func TestSidecarImages(t *testing.T) {
	pod := func(image string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{InitContainers: []corev1.Container{{Name: "istio-proxy", Image: "istio"}, {Name: inject.ContainerName, Image: image}}}}
	}
	if st, reason, _ := sidecarImages("img:2", []*corev1.Pod{pod("img:2"), pod("img:2")}); st != metav1.ConditionTrue || reason != v1alpha1.ReasonTierImage {
		t.Errorf("same image: %s %s", st, reason)
	}
	st, reason, msg := sidecarImages("img:2", []*corev1.Pod{pod("img:2"), pod("img:1"), pod("img:1"), pod("other:9")})
	if st != metav1.ConditionFalse || reason != v1alpha1.ReasonOtherImages ||
		!strings.HasPrefix(msg, "3 of 4 injected pods run another sidecar image than img:2: img:1 (2), other:9 (1);") {
		t.Errorf("mixed images: %s %s %q", st, reason, msg)
	}
}

// TestStatusSaysWhatPodsDefeat: an L1-only tier with two pods says that
// purges reach every pod through the relay, and through L2 once it has
// it; a pod that
// runs another sidecar image than the tier's is counted, with the image.
func TestStatusSaysWhatPodsDefeat(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	want := func(cond string, st metav1.ConditionStatus, reason, msg string) {
		t.Helper()
		eventually(t, 30*time.Second, func() error {
			r := condition(tierOf(t, c, key), cond)
			if r == nil || r.Status != st || r.Reason != reason || !strings.Contains(r.Message, msg) {
				return fmt.Errorf("%s %+v, want %s %s with %q", cond, r, st, reason, msg)
			}
			return nil
		})
	}
	createPod(t, ns, "web-0", "web")
	want(v1alpha1.ConditionPurgesReachEveryPod, metav1.ConditionTrue, v1alpha1.ReasonAtMostOnePod, "1 pod")
	want(v1alpha1.ConditionSidecarImagesMatch, metav1.ConditionTrue, v1alpha1.ReasonTierImage, "every injected pod")
	createPod(t, ns, "web-1", "web")
	// The operator under test serves the control plane: its relay carries
	// the purges of an L1-only tier to every pod.
	want(v1alpha1.ConditionPurgesReachEveryPod, metav1.ConditionTrue, v1alpha1.ReasonThroughRelay, "2 pods cache in L1 only")

	// A pod admitted with an older image (labelled for the tier, its
	// sidecar already there).
	always := corev1.ContainerRestartPolicyAlways
	old := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-old", Labels: map[string]string{inject.LabelTier: "web"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: inject.ContainerName, Image: "example.test/tiercache:0.0.1", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "app", Image: "example.test/app"}},
		},
	}
	if err := c.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	want(v1alpha1.ConditionSidecarImagesMatch, metav1.ConditionFalse, v1alpha1.ReasonOtherImages, "1 of 3 injected pods run another sidecar image")
	want(v1alpha1.ConditionSidecarImagesMatch, metav1.ConditionFalse, v1alpha1.ReasonOtherImages, "example.test/tiercache:0.0.1 (1)")

	tier := tierOf(t, c, key)
	tier.Spec.L2 = &v1alpha1.L2Spec{Addresses: []string{"redis.invalid:6379"}}
	if err := c.Update(ctx, tier); err != nil {
		t.Fatal(err)
	}
	want(v1alpha1.ConditionPurgesReachEveryPod, metav1.ConditionTrue, v1alpha1.ReasonThroughL2, "through L2")
}
