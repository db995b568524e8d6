package operator

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
	"github.com/tiercache/tiercache/test/testkube"
)

// kubectlWaitReady runs kubectl wait --for=condition=Ready on the tier
// with a timeout, and returns its error and output.
func kubectlWaitReady(t *testing.T, ns, name string, timeout time.Duration) (string, error) {
	t.Helper()
	kubeconfig := testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	out, err := exec.Command(kubectlPath(t), "--kubeconfig", kubeconfig, "wait", "-n", ns, "ct/"+name,
		"--for=condition=Ready", "--timeout="+timeout.String()).CombinedOutput()
	return string(out), err
}

// waitReadyReason waits until the tier's Ready condition is st with
// reason and a message containing each of msgs.
func waitReadyReason(t *testing.T, c client.Client, key client.ObjectKey, st metav1.ConditionStatus, reason string, msgs ...string) {
	t.Helper()
	eventually(t, 60*time.Second, func() error {
		tier := tierOf(t, c, key)
		r := condition(tier, v1alpha1.ConditionReady)
		if tier.Status.ObservedGeneration != tier.Generation || r == nil || r.ObservedGeneration != tier.Generation || r.Status != st || r.Reason != reason {
			return fmt.Errorf("Ready %+v (generation %d), want %s %s", r, tier.Generation, st, reason)
		}
		for _, m := range msgs {
			if !strings.Contains(r.Message, m) {
				return fmt.Errorf("Ready message %q lacks %q", r.Message, m)
			}
		}
		return nil
	})
}

// TestReadyMeansEveryPodIsConnectedAndCurrent: kubectl wait
// --for=condition=Ready is a deploy gate. A tier without pods is Ready
// (nothing to wait for); with one pod whose sidecar runs the config and
// one whose real sidecar cannot reach the control plane, it is not, and
// says how many are connected; once that pod is gone it is Ready again.
func TestReadyMeansEveryPodIsConnectedAndCurrent(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "gate"}
	if err := c.Create(ctx, newTier(ns, "gate", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, key, metav1.ConditionTrue, v1alpha1.ReasonNoPods, "no pod is injected")
	if out, err := kubectlWaitReady(t, ns, "gate", 10*time.Second); err != nil {
		t.Fatalf("kubectl wait on a tier without pods: %v\n%s", err, out)
	}

	origin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer origin.Close()
	startSidecar(t, origin.URL, ns, "gate", "web-0", cluster.xdsAddr)
	waitReadyReason(t, c, key, metav1.ConditionTrue, v1alpha1.ReasonApplied, "all 1 injected pods")

	// web-1's sidecar runs, but its control-plane address answers nothing
	// (a NetworkPolicy, a wrong Service, an operator that is down).
	cut := createPod(t, ns, "web-1", "gate")
	tokenFile := filepath.Join(t.TempDir(), "token")
	tok, err := testkube.PodToken(ctx, c, cut, xdsAudience, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	testkube.WriteToken(t, tokenFile, tok)
	runSidecar(t, origin.URL, ns, "gate", "web-1", freeAddr(t), "--control-plane-token-file="+tokenFile, "--control-plane-ca="+cluster.caFile)
	waitReadyReason(t, c, key, metav1.ConditionFalse, v1alpha1.ReasonSidecarsNotConnected,
		"1 of 2 injected pods have a sidecar connected to the control plane (1 applied config version")
	if out, err := kubectlWaitReady(t, ns, "gate", 2*time.Second); err == nil {
		t.Fatalf("kubectl wait passed while a pod's sidecar is cut off from the control plane:\n%s", out)
	}
	checkGetColumns(t, ns, "gate", map[string]string{"READY": "False", "PODS": "2", "CURRENT": "1"})

	// The pod that could not connect goes: Ready again.
	if err := c.Delete(ctx, cut, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, key, metav1.ConditionTrue, v1alpha1.ReasonApplied, "all 1 injected pods")
	if out, err := kubectlWaitReady(t, ns, "gate", 10*time.Second); err != nil {
		t.Fatalf("kubectl wait once every pod is connected: %v\n%s", err, out)
	}
}

// TestANewSecretReferenceAsksForARestart: the projected Secrets of a pod
// are fixed at admission. After spec.purge.tokenSecretRef names a Secret
// on a running tier, its pod keeps the generated token: the tier is not
// Ready, names the pod and the field, and says to restart it; a pod
// admitted after the change mounts the new Secret, and once the old pod
// is gone the tier is Ready.
func TestANewSecretReferenceAsksForARestart(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "rotate"}
	if err := c.Create(ctx, newTier(ns, "rotate", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer origin.Close()
	startSidecar(t, origin.URL, ns, "rotate", "web-0", cluster.xdsAddr)
	waitReadyReason(t, c, key, metav1.ConditionTrue, v1alpha1.ReasonApplied, "all 1 injected pods")

	if err := c.Create(ctx, labelledSecret(ns, "purge", map[string]string{"token": "the-new-purge-token-0123"})); err != nil {
		t.Fatal(err)
	}
	tier := tierOf(t, c, key)
	tier.Spec.Purge.TokenSecretRef = secretRef("purge", "token")
	if err := c.Update(ctx, tier); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, key, metav1.ConditionFalse, v1alpha1.ReasonRestartRequired,
		"1 of 1 injected pods were admitted with other Secrets than the tier names now (spec.purge.tokenSecretRef)", "restart them", ": web-0")
	if out, err := kubectlWaitReady(t, ns, "rotate", 2*time.Second); err == nil {
		t.Fatalf("kubectl wait passed while the pod still mounts the old token:\n%s", out)
	}

	// The restart: a new pod (admitted with the new reference, its
	// sidecar connected) replaces the old one.
	startSidecar(t, origin.URL, ns, "rotate", "web-1", cluster.xdsAddr)
	var fresh corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-1"}, &fresh); err != nil {
		t.Fatal(err)
	}
	if got := projectedFiles(&fresh); !strings.Contains(got, inject.FilePurgeToken+"=purge/token") {
		t.Fatalf("a pod admitted after the change projects %q, want the purge token from Secret purge", got)
	}
	waitReadyReason(t, c, key, metav1.ConditionFalse, v1alpha1.ReasonRestartRequired, "1 of 2 injected pods", ": web-0")
	var old corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-0"}, &old); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, &old, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	waitReadyReason(t, c, key, metav1.ConditionTrue, v1alpha1.ReasonApplied, "all 1 injected pods")
	if out, err := kubectlWaitReady(t, ns, "rotate", 10*time.Second); err != nil {
		t.Fatalf("kubectl wait once the old pod is gone: %v\n%s", err, out)
	}
}
