package pods

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

func newPurge(t *testing.T, url, token string) (*http.Request, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"urls":["/tagged/rotation-check"]}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	return req, nil
}

// barePod is an annotated pod of the app's image with extra spec lines.
func (s *suite) barePod(name, ports, extra string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
  namespace: %s
  annotations: {tiercache.io/tier: %s}
spec:
  terminationGracePeriodSeconds: 1
%s  containers:
  - name: app
    image: %s
    args: ["--listen=:8080"]
    ports: %s
`, name, appNS, tierName, extra, s.im.demoRef, ports)
}

// mistakes: what a user gets wrong gets a clear answer. A pod that runs
// as root, a pod without a named port, and a Service that targets the
// app's port by number (around the cache).
func (s *suite) mistakes(t *testing.T) {
	// A pod without a port named http: refused at admission, listing its
	// ports and saying what to do.
	out, err := s.apply(t, s.barePod("no-named-port", `[{containerPort: 8080}]`, ""))
	if err == nil {
		t.Fatalf("a pod without a named port was admitted:\n%s", out)
	}
	for _, want := range []string{`no container port named "http"`, "tiercache.io/port"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the refusal of a pod without a named port does not say %q:\n%s", want, out)
		}
	}
	t.Logf("a pod without a named port: %s", strings.TrimSpace(out))

	// A pod that runs as root at the pod level: the sidecar would
	// inherit uid 0 and refuse it; it runs as the image's user, and the
	// app as root, as asked.
	s.applyOK(t, s.barePod("as-root", `[{name: http, containerPort: 8080}]`, "  securityContext: {runAsUser: 0}\n"))
	var p corev1.Pod
	eventually(t, "the pod that runs as root Ready", 90*time.Second, func() error {
		if err := s.c.Get(t.Context(), client.ObjectKey{Namespace: appNS, Name: "as-root"}, &p); err != nil {
			return err
		}
		if !podReady(&p) {
			return fmt.Errorf("%s", podState(&p))
		}
		return nil
	})
	if u := p.Spec.InitContainers[0].SecurityContext.RunAsUser; u == nil || *u != inject.ImageUID {
		t.Fatalf("the root pod's sidecar runs as %v, want %d", u, inject.ImageUID)
	}
	if a, err := get(t.Context(), s.httpClient(false), podURL(p, 15180)+"/tagged/as-root"); err != nil || a.xcache != "MISS" {
		t.Fatalf("the root pod's sidecar: %q %v", a.xcache, err)
	}
	must(t, s.c.Delete(t.Context(), &p))

	// A Service around the cache: ServicesRouted False, naming the
	// Service and the targetPort to set, and a Warning Event on it.
	s.applyOK(t, `apiVersion: v1
kind: Service
metadata: {name: web-by-number, namespace: `+appNS+`}
spec:
  selector: {app: `+appName+`}
  ports: [{port: 80, targetPort: 8080}]
`)
	eventually(t, "ServicesRouted False", time.Minute, func() error {
		c := meta.FindStatusCondition(s.tier(t).Status.Conditions, v1alpha1.ConditionServicesRouted)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonServiceTargetsAppPort || !strings.Contains(c.Message, "web-by-number") {
			return fmt.Errorf("ServicesRouted %+v", c)
		}
		t.Logf("ServicesRouted: %s %s: %s", c.Status, c.Reason, c.Message)
		return nil
	})
	eventually(t, "a Warning Event on the Service", time.Minute, func() error {
		var evs corev1.EventList
		if err := s.c.List(t.Context(), &evs, client.InNamespace(appNS)); err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "Service" && e.InvolvedObject.Name == "web-by-number" && e.Type == corev1.EventTypeWarning {
				t.Logf("Event: %s %s: %s", e.Type, e.Reason, e.Message)
				return nil
			}
		}
		return fmt.Errorf("none among %d events", len(evs.Items))
	})
	s.kubectlOK(t, "delete", "service", "-n", appNS, "web-by-number")
	eventually(t, "ServicesRouted True again", time.Minute, func() error {
		c := meta.FindStatusCondition(s.tier(t).Status.Conditions, v1alpha1.ConditionServicesRouted)
		if c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ServicesRouted %+v", c)
		}
		return nil
	})
}

// reinstall: helm uninstall removes the operator and with its pods the
// sidecars' report Leases; a reinstall counts each pod once.
func (s *suite) reinstall(t *testing.T) {
	out, err := s.exec(t.Context(), 3*time.Minute, s.helm, "uninstall", release, "-n", releaseNS, "--wait", "--timeout", "2m")
	if err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	eventually(t, "no operator pod and no report Lease left", 90*time.Second, func() error {
		var pods corev1.PodList
		if err := s.c.List(t.Context(), &pods, client.InNamespace(releaseNS), client.MatchingLabels{"app.kubernetes.io/component": "operator"}); err != nil {
			return err
		}
		var leases coordinationv1.LeaseList
		// The sidecars' reports (label of internal/operator/report.go).
		if err := s.c.List(t.Context(), &leases, client.InNamespace(releaseNS), client.HasLabels{"tiercache.io/connected-report"}); err != nil {
			return err
		}
		var names []string
		for _, l := range leases.Items {
			names = append(names, l.Name)
		}
		if len(pods.Items) > 0 || len(leases.Items) > 0 {
			return fmt.Errorf("%d operator pods, Leases %v", len(pods.Items), names)
		}
		return nil
	})
	s.helmInstall(t)
	want := fmt.Sprint(len(s.appPods(t)))
	s.waitColumns(t, map[string]string{"READY": "True", "PODS": want, "CURRENT": want, "CONNECTED": want}, 2*time.Minute)
	// And it stays so: no stale report counts a pod twice.
	for range 10 {
		cols, err := s.getColumns(t, appNS, tierName)
		must(t, err)
		if cols["CONNECTED"] != want || cols["CURRENT"] != want {
			t.Fatalf("after the reinstall: %v, want %s pods counted once", cols, want)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
