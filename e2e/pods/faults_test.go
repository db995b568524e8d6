package pods

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// faults: under steady load through the Service, a rolling update of
// the app, a deleted pod, both operator pods killed, the Redis pod
// killed and a scale-out from 3 to 6; 0 client errors in each, for
// keep-alive and new-connection clients alike, and the new pods of the
// scale-out serve the keys already in L2 without asking their origin.
// Then pod creations during an operator rollout: none fails or is slow.
func (s *suite) faults(t *testing.T) {
	l := s.startLoad(4, 2)
	defer l.stop()
	// Warm: every load key is stored before the faults.
	time.Sleep(3 * time.Second)
	if r := l.take(); r.requests < 50 || r.failed() {
		t.Fatalf("warming up: %d requests in 3s, errors %v %v", r.requests, r.errors, r.samples)
	}

	fault := func(name string, do func(t *testing.T)) {
		began := time.Now()
		do(t)
		r := l.take()
		t.Logf("%s: %d requests in %.1fs, client errors %v", name, r.requests, time.Since(began).Seconds(), r.errors)
		if r.failed() || r.requests < 50 {
			t.Errorf("%s: %d requests, client errors %v: %v", name, r.requests, r.errors, r.samples)
		}
	}
	fault("rolling update of the app", func(t *testing.T) {
		s.kubectlOK(t, "rollout", "restart", "-n", appNS, "deployment/"+appName)
		s.waitRollout(t, appNS, appName, 3*time.Minute)
		s.waitAppReady(t, 3, time.Minute)
	})
	fault("a deleted app pod", func(t *testing.T) {
		s.deletePod(t, s.appPods(t)[0])
		s.waitAppReady(t, 3, 2*time.Minute)
	})
	fault("both operator pods killed", func(t *testing.T) {
		s.killPods(t, releaseNS, "app.kubernetes.io/component=operator", 2)
	})
	fault("the Redis pod killed", func(t *testing.T) {
		was := s.l2States(t)
		s.killPods(t, releaseNS, "app.kubernetes.io/component=redis", 1)
		// Once Redis is back, each pod closes its L2 breaker (until then
		// it drops its L2 writes at once) and resubscribes to
		// invalidations (it may have missed a purge meanwhile, so it
		// clears its L1 and drops the L2 writes it had queued). Keys
		// filled before both may never reach Redis: the scale-out below
		// fills its keys after.
		eventually(t, "every app pod back on L2 and resubscribed to invalidations", time.Minute, func() error {
			for name, st := range s.l2States(t) {
				if st.circuitOpen != 0 {
					return fmt.Errorf("%s: L2 circuit breaker open", name)
				}
				if w, ok := was[name]; ok && st.resubscribed <= w.resubscribed {
					return fmt.Errorf("%s: %v resubscriptions, as before Redis was killed", name, st.resubscribed)
				}
			}
			return nil
		})
	})
	var before []string
	for _, p := range s.appPods(t) {
		before = append(before, p.Name)
	}
	s.fillL2(t)
	fault("a scale-out from 3 to 6", func(t *testing.T) {
		s.kubectlOK(t, "scale", "-n", appNS, "deployment/"+appName, "--replicas=6")
		s.waitAppReady(t, 6, 3*time.Minute)
	})
	s.checkWarmFromL2(t, before)
	if t.Failed() {
		s.dumpLogs(t)
	}
	final := l.stop()
	if final.failed() {
		t.Errorf("after the faults: client errors %v: %v", final.errors, final.samples)
	}
	s.kubectlOK(t, "scale", "-n", appNS, "deployment/"+appName, "--replicas=3")
	s.waitAppReady(t, 3, 2*time.Minute)

	s.admissionsDuringOperatorRollout(t)
}

// killPods deletes the pods of a label selector at once, without a grace
// period (the processes are killed), and waits until want new ones are
// Ready.
func (s *suite) killPods(t *testing.T, ns, selector string, want int) {
	t.Helper()
	sel, err := labels.Parse(selector)
	must(t, err)
	var old corev1.PodList
	must(t, s.c.List(t.Context(), &old, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}))
	killed := map[string]bool{}
	for _, p := range old.Items {
		killed[p.Name] = true
	}
	s.kubectlOK(t, "delete", "pods", "-n", ns, "-l", selector, "--grace-period=0", "--force", "--wait=false")
	eventually(t, fmt.Sprintf("%d new %s pods Ready", want, selector), 2*time.Minute, func() error {
		var l corev1.PodList
		if err := s.c.List(t.Context(), &l, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
			return err
		}
		ready := 0
		for _, p := range l.Items {
			if killed[p.Name] {
				return fmt.Errorf("%s still there", p.Name)
			}
			if podReady(&p) {
				ready++
			}
		}
		if ready != want {
			return fmt.Errorf("%d of %d Ready", ready, want)
		}
		return nil
	})
}

// warmKeys are the keys put in L2 before the scale-out; /bytes, which
// the load never asks for, so that the origin's count of that route on
// a new pod counts only them.
const warmKeys = 8

func warmURL(k int) string { return fmt.Sprintf("/bytes/warm-%d?ttl=600&swr=0", k) }

// fillL2 fills the warm keys through one pod and waits until each is in
// Redis: a HEAD on another pod is an L2 hit. (A HEAD that misses is
// passed to the origin and its answer not stored, so the other pod's L1
// never holds the key and only L2 can answer the HEAD as a hit.)
func (s *suite) fillL2(t *testing.T) {
	t.Helper()
	pods := s.appPods(t)
	nc := s.httpClient(false)
	for k := range warmKeys {
		if _, err := get(t.Context(), nc, podURL(pods[0], 15180)+warmURL(k)); err != nil {
			t.Fatal(err)
		}
		eventually(t, "warm key in L2", 10*time.Second, func() error {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodHead, podURL(pods[1], 15180)+warmURL(k), nil)
			if err != nil {
				return err
			}
			req.Host = serviceHost
			resp, err := nc.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			if x := resp.Header.Get("X-Cache"); resp.StatusCode != http.StatusOK || x != "HIT; layer=l2" {
				return fmt.Errorf("HEAD on %s: %s, X-Cache %q", pods[1].Name, resp.Status, x)
			}
			return nil
		})
	}
}

// checkWarmFromL2: every new pod of the scale-out serves the keys that
// were in L2 as hits (from L2, or from L1 when its warm start preloaded
// them from L2), and its origin was asked for none of them.
func (s *suite) checkWarmFromL2(t *testing.T, before []string) {
	t.Helper()
	nc := s.httpClient(false)
	news := 0
	for _, p := range s.appPods(t) {
		if slices.Contains(before, p.Name) {
			continue
		}
		news++
		for k := range warmKeys {
			a, err := get(t.Context(), nc, podURL(p, 15180)+warmURL(k))
			if err != nil {
				t.Fatal(err)
			}
			// layer=l2, or l1 when the warm start preloaded it from L2.
			if !strings.HasPrefix(a.xcache, "HIT") {
				t.Errorf("new pod %s: %s: X-Cache %q, want a hit (from L2)", p.Name, warmURL(k), a.xcache)
			}
		}
		st, err := s.originStats(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if n := st["bytes 200"]; n != 0 {
			out, err := s.exec(context.Background(), 30*time.Second, s.kubectl, "logs", "-n", appNS, p.Name, "-c", "tiercache")
			t.Logf("%s: kubectl logs: %v", p.Name, err)
			if resp, err := s.httpClient(false).Get(podURL(p, 15190) + "/metrics"); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				for line := range strings.Lines(string(b)) {
					if strings.Contains(line, "tiercache_l2") || strings.Contains(line, "tiercache_requests_total") || strings.Contains(line, "warm") {
						t.Logf("%s: %s", p.Name, strings.TrimSpace(line))
					}
				}
			}
			for line := range strings.Lines(out) {
				if strings.Contains(line, "warm-") || !strings.Contains(line, `"msg":"access"`) {
					t.Logf("%s: %s", p.Name, strings.TrimSpace(line))
				}
			}
			t.Errorf("new pod %s: its origin served %d of the keys already in L2; want 0 (stats %v)", p.Name, n, st)
		} else {
			t.Logf("new pod %s: 0 origin requests for the keys in L2 (origin stats %v)", p.Name, st)
		}
	}
	if news != 3 {
		t.Errorf("%d new pods after the scale-out, want 3", news)
	}
}

// admissionsDuringOperatorRollout: a bounded loop of annotated pod
// creations (server-side dry runs: admission, mutation included, without
// scheduling) while both operator replicas are replaced; none may fail
// or take more than slowAdmission.
func (s *suite) admissionsDuringOperatorRollout(t *testing.T) {
	const (
		slowAdmission = 3 * time.Second
		maxCreates    = 400
	)
	s.kubectlOK(t, "rollout", "restart", "-n", releaseNS, "deployment/"+release+"-operator")
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	var rolloutErr error
	go func() {
		defer wg.Done()
		defer close(done)
		rolloutErr = s.rollout(t, releaseNS, release+"-operator", 3*time.Minute)
	}()
	var n, failed, slow int
	var samples []string
	var worst time.Duration
loop:
	for n < maxCreates {
		select {
		case <-done:
			break loop
		default:
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: appNS, GenerateName: "admission-",
				Annotations: map[string]string{"tiercache.io/tier": tierName}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: s.im.demoRef,
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
				TerminationGracePeriodSeconds: ptr.To[int64](1)},
		}
		began := time.Now()
		err := s.c.Create(t.Context(), pod, client.DryRunAll)
		took := time.Since(began)
		worst = max(worst, took)
		n++
		switch {
		case err != nil:
			failed++
			if len(samples) < 5 {
				samples = append(samples, err.Error())
			}
		case took > slowAdmission:
			slow++
		case len(pod.Spec.InitContainers) == 0:
			failed++
			if len(samples) < 5 {
				samples = append(samples, "admitted without the sidecar")
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	if rolloutErr != nil {
		t.Fatal(rolloutErr)
	}
	t.Logf("operator rollout: %d pod admissions, %d failed, %d slower than %s, the slowest %s", n, failed, slow, slowAdmission, worst)
	if failed > 0 || slow > 0 || n < 20 {
		t.Errorf("during the operator rollout: %d admissions, %d failed, %d slow: %v", n, failed, slow, samples)
	}
}

// l2State is what an app pod's metrics say of its L2.
type l2State struct {
	// resubscribed: invalidation subscriptions lost and made again
	// (l2_errors_total{op="subscribe"}).
	resubscribed float64
	circuitOpen  float64 // l2_circuit_open
}

// l2States reads each app pod's l2State.
func (s *suite) l2States(t *testing.T) map[string]l2State {
	t.Helper()
	out := map[string]l2State{}
	for _, p := range s.appPods(t) {
		resp, err := s.httpClient(false).Get(podURL(p, 15190) + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		var st l2State
		seen := 0
		for line := range strings.Lines(string(b)) {
			for prefix, v := range map[string]*float64{
				`tiercache_l2_errors_total{op="subscribe"} `: &st.resubscribed,
				"tiercache_l2_circuit_open ":                 &st.circuitOpen,
			} {
				if rest, ok := strings.CutPrefix(line, prefix); ok {
					n, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
					if err != nil {
						t.Fatalf("%s: %q: %v", p.Name, line, err)
					}
					*v = n
					seen++
				}
			}
		}
		if seen != 2 {
			t.Fatalf("%s: its metrics lack l2_errors_total{op=\"subscribe\"} or l2_circuit_open", p.Name)
		}
		out[p.Name] = st
	}
	return out
}
