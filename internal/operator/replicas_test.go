package operator

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/test/testkube"
)

// TestSidecarStatusAcrossReplicasAndALeaderChange runs a second operator
// replica beside the suite's (which leads), with sidecars on each: real
// ones that apply every config, one whose Redis CA is not PEM (it refuses
// a config with L2 TLS), and a raw xDS client that ACKs its first config
// and then never answers (stuck on it). The leader's status must count
// all of them by what they run; when the leader stops, the other replica
// takes over and its status converges on what is still connected; with
// the first replica back and then the second gone, it converges again,
// and the NACKs the gone replica heard go with it.
func TestSidecarStatusAcrossReplicasAndALeaderChange(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "shared"}
	if err := c.Create(ctx, newTier(ns, "shared", v1alpha1.CacheTierSpec{
		Rules: []v1alpha1.Rule{{Name: "page", Match: v1alpha1.Match{Path: "/page"}, Bypass: true}},
	})); err != nil {
		t.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer origin.Close()

	secondXDS := freeAddr(t)
	stopSecond := startReplica(t, "second", secondXDS)

	startSidecar(t, origin.URL, ns, "shared", "web-0", cluster.xdsAddr)
	startSidecar(t, origin.URL, ns, "shared", "web-1", secondXDS)
	startSidecar(t, origin.URL, ns, "shared", "web-2", secondXDS, "--redis-ca-cert=not a certificate")
	stuck := createPod(t, ns, "web-3", "shared")
	stuckSidecar(t, xdsConn(t), podToken(t, stuck, xdsAudience), ns+"/web-3", ns+"/shared")

	// All four run the first config: Ready, Applied.
	v1 := waitSidecars(t, c, key, want{total: 4, current: 4, replicas: 2, ready: metav1.ConditionTrue, reason: v1alpha1.ReasonApplied,
		message: "all 4 injected pods have a connected sidecar that applied config version"})
	if got := tierOf(t, c, key).Status.Sidecars.Versions; len(got) != 1 || got[0] != (v1alpha1.VersionCount{Version: v1[:12], Sidecars: 4}) {
		t.Errorf("versions %+v, want all 4 on %.12s (the configHash is the pushed version)", got, v1)
	}

	// The second config turns L2 TLS on: web-2 refuses it, web-3 never
	// answers; the tier is not Ready and says why.
	tier := tierOf(t, c, key)
	tier.Spec.L2 = &v1alpha1.L2Spec{Addresses: []string{"127.0.0.1:1"}, TLS: &v1alpha1.L2TLS{Enabled: true}}
	if err := c.Update(ctx, tier); err != nil {
		t.Fatal(err)
	}
	v2 := waitSidecars(t, c, key, want{total: 4, current: 2, behind: 1, rejected: 1, replicas: 2, nacks: 1,
		ready: metav1.ConditionFalse, reason: v1alpha1.ReasonConfigRejected,
		message: "1 of 4 connected sidecars refused config version", lastNACK: "refused by " + ns + "/web-2"})
	if v2 == v1 {
		t.Fatal("the config hash did not change with L2")
	}
	got := tierOf(t, c, key).Status.Sidecars.Versions
	wantVersions := []v1alpha1.VersionCount{{Version: v1[:12], Sidecars: 2}, {Version: v2[:12], Sidecars: 2}}
	if v2[:12] < v1[:12] {
		wantVersions[0], wantVersions[1] = wantVersions[1], wantVersions[0]
	}
	if fmt.Sprint(got) != fmt.Sprint(wantVersions) {
		t.Errorf("versions %+v, want %+v", got, wantVersions)
	}
	checkGetColumns(t, ns, "shared", map[string]string{"READY": "False", "PODS": "4", "CURRENT": "2", "BEHIND": "1", "REJECTED": "1"})

	// The leader stops (it gives up the leader Lease and deletes its
	// report). The second replica leads, and counts what is still
	// connected: its own two sidecars.
	first := leaderOf(t, c)
	if first == "" {
		t.Fatal("no leader")
	}
	if err := stopSuiteOperator(); err != nil {
		t.Fatal(err)
	}
	restarted := false
	restart := func() {
		if restarted {
			return
		}
		restarted = true
		if err := startSuiteOperator(); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(restart)
	second := waitLeaderChange(t, c, first)
	waitSidecars(t, c, key, want{total: 2, current: 1, rejected: 1, replicas: 1, nacks: 1,
		ready: metav1.ConditionFalse, reason: v1alpha1.ReasonConfigRejected, message: "1 of 2 connected sidecars refused", lastNACK: ns + "/web-2"})

	// The first replica comes back, without leading: web-0 reconnects to
	// it (web-3 is gone), and the second replica's status counts it.
	restart()
	waitSidecars(t, c, key, want{total: 3, current: 2, rejected: 1, replicas: 2, nacks: 1,
		ready: metav1.ConditionFalse, reason: v1alpha1.ReasonConfigRejected, message: "1 of 3 connected sidecars refused", lastNACK: ns + "/web-2"})
	if holder := leaderOf(t, c); holder != second {
		t.Fatalf("leader %q, want the second replica (%s) still", holder, second)
	}

	// The second replica stops: the first leads again and counts its own
	// sidecar. The NACK was heard by the second replica: its count went
	// with it (status.nacks is a sum over the running replicas). The
	// sidecars of web-1 and web-2 knew only the second replica: their
	// pods are there, not connected, so the tier is not Ready.
	stopSecond()
	waitLeaderChange(t, c, second)
	waitSidecars(t, c, key, want{total: 1, current: 1, replicas: 1, ready: metav1.ConditionFalse, reason: v1alpha1.ReasonSidecarsNotConnected,
		message: "1 of 4 injected pods have a sidecar connected to the control plane (1 applied config version " + v2[:12]})
}

// TestAnExpiredReportStopsCounting: a replica that died without deleting
// its report (a Lease in the operator's namespace) is counted while the
// report is fresh, not once it is older than its lease duration, and the
// leader deletes it one lease duration later.
func TestAnExpiredReportStopsCounting(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	hash := waitSidecars(t, c, key, want{total: 0, replicas: 1, ready: metav1.ConditionTrue, reason: v1alpha1.ReasonNoPods,
		message: "no pod is injected"})

	// What a dead replica left: 5 sidecars of the tier, 3 on its current
	// version, 2 on an old one, renewed just now for 5 seconds.
	rep, _, err := encodeReport(map[string]controlplane.Sidecars{
		ns + "/web": {Connected: 5, Applied: map[string]int{hash: 3, strings.Repeat("0", 64): 2}},
	}, maxReportBytes)
	if err != nil {
		t.Fatal(err)
	}
	const duration = 5 * time.Second
	now := metav1.NewMicroTime(time.Now())
	dead := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: connectedLeasePrefix + "dead-" + ns,
			Labels: map[string]string{labelConnectedReport: "true"}, Annotations: map[string]string{annotationSidecars: string(rep)}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("dead"), RenewTime: &now, LeaseDurationSeconds: ptr.To(int32(duration / time.Second))},
	}
	if err := c.Create(ctx, dead); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), dead) })
	waitSidecars(t, c, key, want{total: 5, current: 3, behind: 2, replicas: 2, ready: metav1.ConditionFalse, reason: v1alpha1.ReasonSidecarsBehind,
		message: "3 of 5 connected sidecars applied config version " + hash[:12] + "; 2 still run an older one"})

	// Once it expired it does not count, while it is still there...
	waitSidecars(t, c, key, want{total: 0, replicas: 1, ready: metav1.ConditionTrue, reason: v1alpha1.ReasonNoPods, message: "no pod is injected"})
	dropped := time.Now()
	if dropped.Before(now.Add(duration)) {
		t.Errorf("the report stopped counting before it expired")
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(dead), &coordinationv1.Lease{}); err != nil {
		t.Errorf("the report stopped counting %s after its renewal, only once it was gone (%v): an expired report must not count", dropped.Sub(now.Time), err)
	}
	// ...and a lease duration later the leader deletes it.
	eventually(t, 30*time.Second, func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(dead), &coordinationv1.Lease{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the expired report is still there (%v)", err)
	})
	if gone := time.Now(); gone.Before(now.Add(2 * duration)) {
		t.Errorf("the report was deleted %s after its renewal, before a lease duration passed after its expiry", gone.Sub(now.Time))
	}
}

// want is a tier's expected sidecar status.
type want struct {
	total, current, behind, rejected, replicas int32
	nacks                                      int64
	ready                                      metav1.ConditionStatus
	reason, message, lastNACK                  string
}

// waitSidecars waits until the tier's status says w, and returns its
// configHash.
func waitSidecars(t *testing.T, c client.Client, key client.ObjectKey, w want) string {
	t.Helper()
	var hash string
	eventually(t, 60*time.Second, func() error {
		tier := tierOf(t, c, key)
		s := tier.Status
		hash = s.ConfigHash
		if s.ObservedGeneration != tier.Generation || hash == "" {
			return fmt.Errorf("status of generation %d not written yet: %+v", tier.Generation, s)
		}
		got := v1alpha1.SidecarCounts{}
		if s.Sidecars != nil {
			got = *s.Sidecars
			got.Versions = nil
		}
		exp := v1alpha1.SidecarCounts{Total: w.total, Current: w.current, Behind: w.behind, Rejected: w.rejected, Replicas: w.replicas}
		if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", exp) || s.ConnectedSidecars != w.total {
			return fmt.Errorf("sidecars %+v, connectedSidecars %d; want %+v", got, s.ConnectedSidecars, exp)
		}
		if s.NACKs != w.nacks || !strings.Contains(s.LastNACK, w.lastNACK) || (w.nacks == 0) != (s.LastNACK == "") {
			return fmt.Errorf("nacks %d, lastNACK %q; want %d naming %q", s.NACKs, s.LastNACK, w.nacks, w.lastNACK)
		}
		r := condition(tier, v1alpha1.ConditionReady)
		if r == nil || r.Status != w.ready || r.Reason != w.reason || !strings.Contains(r.Message, w.message) {
			return fmt.Errorf("Ready %+v, want %s %s with %q", r, w.ready, w.reason, w.message)
		}
		return nil
	})
	return hash
}

func tierOf(t *testing.T, c client.Client, key client.ObjectKey) *v1alpha1.CacheTier {
	t.Helper()
	var tier v1alpha1.CacheTier
	if err := c.Get(context.Background(), key, &tier); err != nil {
		t.Fatal(err)
	}
	return &tier
}

// leaderOf is the holder of the operators' leader election Lease ("" when
// none holds it). Replicas in one process share a host name: the holder
// identities differ by their random suffix only.
func leaderOf(t *testing.T, c client.Client) string {
	t.Helper()
	var l coordinationv1.Lease
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: operatorNS, Name: "tiercache-operator.tiercache.io"}, &l); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(l.Spec.HolderIdentity, "")
}

// waitLeaderChange waits for a leader other than from, and returns it.
func waitLeaderChange(t *testing.T, c client.Client, from string) string {
	t.Helper()
	var h string
	eventually(t, 60*time.Second, func() error {
		if h = leaderOf(t, c); h == "" || h == from {
			return fmt.Errorf("leader %q, want another than %q", h, from)
		}
		return nil
	})
	return h
}

// startReplica runs another operator replica (it does not lead while the
// suite's does) serving xDS on xdsAddr, until the returned function or
// the end of the test stops it.
func startReplica(t *testing.T, name, xdsAddr string) func() {
	t.Helper()
	wo := cluster.env.WebhookInstallOptions
	opCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- RunWith(opCtx, []string{
			"--namespace=" + operatorNS,
			"--replica-name=" + name,
			"--cert-mode=external",
			"--webhook-host=127.0.0.1",
			"--webhook-port=" + strconv.Itoa(freePort(t)),
			"--webhook-cert-dir=" + wo.LocalServingCertDir,
			"--metrics-bind-address=0",
			"--health-probe-bind-address=127.0.0.1:0",
			"--xds-listen=" + xdsAddr,
			"--xds-ca-file=" + cluster.caFile,
			"--status-refresh=1s",
			// Stopped at once: shutdown_test.go tests the delay.
			"--shutdown-delay=0",
		}, Env{Getenv: func(string) string { return "" }, Stderr: logSink(), RestConfig: cluster.cfg, SkipNameValidation: true, Registerer: prometheus.NewRegistry()})
	}()
	stopped := false
	stopIt := func() {
		if stopped {
			return
		}
		stopped = true
		stop()
		select {
		case err := <-done:
			if err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("operator replica %s: %v", name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("operator replica %s did not stop within 30s", name)
		}
	}
	t.Cleanup(stopIt)
	return stopIt
}

// stuckSidecar opens an ADS stream as id/cluster with tok, ACKs the first
// config it is sent, and never answers another: a sidecar stuck on its
// first config. The stream lasts until the test ends or the control plane
// goes.
func stuckSidecar(t *testing.T, conn *grpc.ClientConn, tok, id, tierKey string) {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), controlplane.AuthorizationKey, "Bearer "+tok))
	var stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	eventually(t, 30*time.Second, func() error {
		s, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
		if err != nil {
			return err
		}
		req := &discoveryv3.DiscoveryRequest{Node: &corev3.Node{Id: id, Cluster: tierKey}, ResourceNames: []string{tierKey}, TypeUrl: controlplane.ResourceTypeURL}
		if err := s.Send(req); err != nil {
			return err
		}
		resp, err := s.Recv()
		if err != nil {
			return err // not served yet: the operator's cache may not hold the pod
		}
		req.VersionInfo, req.ResponseNonce = resp.GetVersionInfo(), resp.GetNonce()
		if err := s.Send(req); err != nil {
			return err
		}
		stream = s
		return nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			if _, err := stream.Recv(); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// checkGetColumns runs kubectl get ct (with the extra arguments, such as
// -o wide) and checks the named columns of the tier's row.
func checkGetColumns(t *testing.T, ns, name string, want map[string]string, extra ...string) {
	t.Helper()
	kubeconfig := testkube.Kubeconfig(t, cluster.env, testkube.Admin)
	out, err := exec.Command(kubectlPath(t), append([]string{"--kubeconfig", kubeconfig, "get", "ct", "-n", ns, name}, extra...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl get ct: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("kubectl get ct printed %q, want a header and a row", out)
	}
	header, row := strings.Fields(lines[0]), strings.Fields(lines[1])
	if len(header) != len(row) {
		t.Fatalf("kubectl get ct: header %q, row %q", lines[0], lines[1])
	}
	got := map[string]string{}
	for i, h := range header {
		got[h] = row[i]
	}
	for col, v := range want {
		if got[col] != v {
			t.Errorf("kubectl get ct: %s = %q, want %q\n%s", col, got[col], v, out)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(freePort(t))
}

// operatorPod creates a pod in the operator's namespace, standing for an
// operator replica's (envtest runs no kubelet: it only exists).
func operatorPod(t *testing.T, c client.Client, name string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "operator", Image: "example.test/operator"}}},
	}
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), p, client.GracePeriodSeconds(0)) })
	return p
}

// TestAReportIsOwnedByItsOperatorPod: a replica's report names the
// replica's pod as its owner, so that the garbage collector deletes it
// with the pod even when the replica could not (helm uninstall deletes
// the operator's RBAC while its pods stop).
func TestAReportIsOwnedByItsOperatorPod(t *testing.T) {
	c := needCluster(t)
	name := "operator-" + strings.ToLower(strconv.FormatInt(time.Now().UnixNano(), 36))
	pod := operatorPod(t, c, name)
	startReplica(t, name, freeAddr(t))
	eventually(t, 30*time.Second, func() error {
		var l coordinationv1.Lease
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: operatorNS, Name: connectedLeasePrefix + name}, &l); err != nil {
			return err
		}
		if len(l.OwnerReferences) != 1 || l.OwnerReferences[0].Kind != "Pod" || l.OwnerReferences[0].Name != name || l.OwnerReferences[0].UID != pod.UID {
			return fmt.Errorf("owner references %+v, want the pod %s (%s)", l.OwnerReferences, name, pod.UID)
		}
		return nil
	})
}

// TestAReportOfAGoneOperatorPodStopsCounting: what an uninstall leaves
// behind. Reports of replicas whose pods are gone (deleted while they
// could not delete their reports) do not count the moment the leader
// sees it, long before they expire, and are deleted; a report whose pod
// is there counts.
func TestAReportOfAGoneOperatorPodStopsCounting(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: ns, Name: "web"}
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	hash := waitSidecars(t, c, key, want{replicas: 1, ready: metav1.ConditionTrue, reason: v1alpha1.ReasonNoPods})

	suffix := strings.ToLower(strconv.FormatInt(time.Now().UnixNano(), 36))
	live := operatorPod(t, c, "live-"+suffix)
	gone := operatorPod(t, c, "gone-"+suffix)
	if err := c.Delete(ctx, gone, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	// Reports renewed just now, for a minute.
	report := func(owner *corev1.Pod, sidecars int) *coordinationv1.Lease {
		rep, _, err := encodeReport(map[string]controlplane.Sidecars{ns + "/web": {Connected: sidecars, Applied: map[string]int{hash: sidecars}}}, maxReportBytes)
		if err != nil {
			t.Fatal(err)
		}
		now := metav1.NewMicroTime(time.Now())
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: operatorNS, Name: connectedLeasePrefix + owner.Name,
				Labels: map[string]string{labelConnectedReport: "true"}, Annotations: map[string]string{annotationSidecars: string(rep)},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod", Name: owner.Name, UID: owner.UID}}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(owner.Name), RenewTime: &now, LeaseDurationSeconds: ptr.To(int32(60))},
		}
		if err := c.Create(ctx, l); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), l) })
		return l
	}
	start := time.Now()
	stale := report(gone, 5)
	report(live, 2)

	eventually(t, 15*time.Second, func() error {
		err := c.Get(ctx, client.ObjectKeyFromObject(stale), &coordinationv1.Lease{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("the report of the gone pod is still there (%v)", err)
	})
	waitSidecars(t, c, key, want{total: 2, current: 2, replicas: 2, ready: metav1.ConditionTrue, reason: v1alpha1.ReasonNoPods})
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the stale report stopped counting after %s: it must not wait for its expiry", took)
	}
}
