package pods

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// bodyStoreAndRotation: the body store on the pods' emptyDir, memory-
// then disk-backed, serving a large body as a file; then the purge token
// rotated through the generated Secret while the pods serve, and a
// changed Secret reference reported as RestartRequired until the pods
// are restarted, as docs/operator.md says.
func (s *suite) bodyStoreAndRotation(t *testing.T) {
	l := s.startLoad(2, 1)
	defer l.stop()
	for _, medium := range []string{"Memory", "Disk"} {
		s.applyOK(t, s.tierManifest(bypassHello+fmt.Sprintf("  bodyStore: {size: 64Mi, medium: %s}\n", medium)))
		// A body store applies to pods created after it.
		s.kubectlOK(t, "rollout", "restart", "-n", appNS, "deployment/"+appName)
		s.waitRollout(t, appNS, appName, 3*time.Minute)
		pods := s.waitAppReady(t, 3, time.Minute)
		s.checkBodyStore(t, pods[0], medium)
	}
	if r := l.take(); r.failed() {
		t.Errorf("during the body store rollouts: %d requests, client errors %v: %v", r.requests, r.errors, r.samples)
	}

	// Rotation of the generated purge token: the kubelet projects the new
	// value, the sidecars take it; the plugin reads it from the Secret.
	secretName := inject.GeneratedSecretName(tierName)
	var sec corev1.Secret
	must(t, s.c.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: secretName}, &sec))
	old := string(sec.Data[inject.KeyPurgeToken])
	newToken := strings.Repeat("c0ffee", 8)
	sec.Data[inject.KeyPurgeToken] = []byte(newToken)
	must(t, s.c.Update(t.Context(), &sec))
	for _, p := range s.appPods(t) {
		eventually(t, p.Name+" takes the rotated purge token", 120*time.Second, func() error {
			if st := s.purgeStatus(t, p, newToken); st != 200 {
				time.Sleep(time.Second) // the kubelet syncs the volume in its own time
				return fmt.Errorf("purge with the new token: %d", st)
			}
			return nil
		})
		if st := s.purgeStatus(t, p, old); st != 401 {
			t.Fatalf("%s: a purge with the old token: %d, want 401", p.Name, st)
		}
	}
	s.kubectlOK(t, "tiercache", "purge", tierName, "-n", appNS, "--url", "/tagged/after-rotation")

	// A changed Secret reference: the running pods keep their volume;
	// the tier says which must restart, and a restart ends it.
	s.applyOK(t, `apiVersion: v1
kind: Secret
metadata:
  name: own-purge-token
  namespace: `+appNS+`
  labels: {tiercache.io/allow-reference: "true"}
stringData: {token: "`+strings.Repeat("feed", 8)+`"}
`)
	s.applyOK(t, s.tierManifest(bypassHello+"  purge: {tokenSecretRef: {name: own-purge-token, key: token}}\n"))
	eventually(t, "Ready False (RestartRequired) naming the pods", 30*time.Second, func() error {
		ct := s.tier(t)
		r := meta.FindStatusCondition(ct.Status.Conditions, v1alpha1.ConditionReady)
		if r == nil || r.Reason != v1alpha1.ReasonRestartRequired || !strings.Contains(r.Message, s.appPods(t)[0].Name) {
			return fmt.Errorf("Ready %+v", r)
		}
		t.Logf("Ready: %s %s: %s", r.Status, r.Reason, r.Message)
		return nil
	})
	s.kubectlOK(t, "rollout", "restart", "-n", appNS, "deployment/"+appName)
	s.waitRollout(t, appNS, appName, 3*time.Minute)
	s.waitAppReady(t, 3, time.Minute)
	s.waitColumns(t, map[string]string{"READY": "True"}, time.Minute)
	for _, p := range s.appPods(t) {
		if st := s.purgeStatus(t, p, strings.Repeat("feed", 8)); st != 200 {
			t.Fatalf("%s after the restart: a purge with the referenced token: %d", p.Name, st)
		}
	}
	if r := l.stop(); r.failed() {
		t.Errorf("during the rotations: %d requests, client errors %v: %v", r.requests, r.errors, r.samples)
	}
}

// checkBodyStore: a body above the threshold is served as a file from the
// pod's body-store emptyDir (tmpfs for Memory, the node's disk for Disk),
// then hit.
func (s *suite) checkBodyStore(t *testing.T, p corev1.Pod, medium string) {
	t.Helper()
	nc := s.httpClient(false)
	u := podURL(p, 15180) + "/bytes/big-" + strings.ToLower(medium) + "?size=1048576&ttl=600"
	if a, err := get(t.Context(), nc, u); err != nil || a.xcache != "MISS" || len(a.body) != 1<<20 {
		t.Fatalf("%s: %q, %d bytes, %v", u, a.xcache, len(a.body), err)
	}
	eventually(t, "the big body a hit", 10*time.Second, func() error {
		a, err := get(t.Context(), nc, u)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(a.xcache, "HIT") || len(a.body) != 1<<20 {
			return fmt.Errorf("%q, %d bytes", a.xcache, len(a.body))
		}
		return nil
	})
	dir := filepath.Join(s.n.KubeletDir(), "pods", string(p.UID), "volumes", "kubernetes.io~empty-dir", inject.BodiesVolumeName)
	out, err := s.exec(t.Context(), 30*time.Second, "sh", "-c", "find "+dir+" -type f -size +1000k | wc -l; findmnt -n -o FSTYPE --target "+dir)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(out)
	if len(f) != 2 || f[0] == "0" {
		t.Fatalf("%s (%s): no body file in %s: %q", p.Name, medium, dir, out)
	}
	wantTmpfs := medium == "Memory"
	if (f[1] == "tmpfs") != wantTmpfs {
		t.Fatalf("%s: the body store's emptyDir (medium %s) is on %s", p.Name, medium, f[1])
	}
	t.Logf("%s: medium %s: %s body file(s) in the emptyDir, on %s", p.Name, medium, f[0], f[1])
}

// purgeStatus sends a purge straight to a pod's admin port with token and
// returns the status.
func (s *suite) purgeStatus(t *testing.T, p corev1.Pod, token string) int {
	t.Helper()
	req, err := newPurge(t, podURL(p, 15190)+"/purge", token)
	must(t, err)
	resp, err := s.httpClient(false).Do(req)
	must(t, err)
	resp.Body.Close()
	return resp.StatusCode
}
