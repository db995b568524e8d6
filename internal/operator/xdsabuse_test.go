package operator

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// Anyone who reaches the xDS port (no pod, no token of their own) must not
// make the operator send a TokenReview per stream by sending a new
// made-up token each time: a TokenReview is a write the API server's
// flow control charges to the operator's own identity, so a loop of them
// would starve the operator's reconciles and status writes, for every
// tenant. A token that is not a JWT, or whose (unverified) claims cannot
// pass, costs no review; reviews of unseen tokens are bounded
// (TestReviewsOfUnseenTokensAreBounded).
func TestMadeUpTokensCostNoTokenReview(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	conn := xdsConn(t)
	const n = 50
	before := tokenReviews(t, reviewRefused) + tokenReviews(t, reviewError)
	for i := range n {
		if _, err := xdsAttempt(t, conn, fmt.Sprintf("made-up-%d", i), ns+"/web-0", ns+"/web", ""); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("made-up token %d: got %v, want Unauthenticated", i, err)
		}
	}
	if got := tokenReviews(t, reviewRefused) + tokenReviews(t, reviewError) - before; got != 0 {
		t.Errorf("%d streams with made-up tokens that are not JWTs sent %v TokenReviews to the API server, want 0", n, got)
	}

	// JWT-shaped, with claims that cannot pass: another audience,
	// expired, bound to no pod.
	before = tokenReviews(t, reviewRefused) + tokenReviews(t, reviewError)
	exp := time.Now().Add(5 * time.Minute).Unix()
	for i, claims := range []string{
		fmt.Sprintf(`{"aud":["kubernetes"],"exp":%d,"kubernetes.io":{"pod":{"name":"web-0","uid":"u"}}}`, exp),
		fmt.Sprintf(`{"aud":[%q],"exp":%d,"kubernetes.io":{"pod":{"name":"web-0","uid":"u"}}}`, xdsAudience, time.Now().Add(-time.Minute).Unix()),
		fmt.Sprintf(`{"aud":%q,"exp":%d}`, xdsAudience, exp),
	} {
		if _, err := xdsAttempt(t, conn, forgedJWT(claims, i), ns+"/web-0", ns+"/web", ""); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("forged JWT %s: got %v, want Unauthenticated", claims, err)
		}
	}
	if got := tokenReviews(t, reviewRefused) + tokenReviews(t, reviewError) - before; got != 0 {
		t.Errorf("JWTs whose claims cannot pass sent %v TokenReviews to the API server, want 0", got)
	}
}

// forgedJWT is a JWT with the claims and a junk signature.
func forgedJWT(claims string, i int) string {
	return base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"RS256"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(claims)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf("junk-signature-%d", i)))
}

// Forged JWTs need the API server to tell them apart only when they claim
// an injected pod the operator knows, with its UID: others cost no
// review. Reviews for one pod are bounded by a bucket of its own, and all
// reviews by a shared one; over either a stream is refused with
// Unavailable (a real sidecar retries).
func TestReviewsOfUnseenTokensAreBounded(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	if err := c.Create(context.Background(), newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, ns, "web-0", "web")
	a, err := newTokenAuthenticator(c, c, xdsAudience, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(5 * time.Minute).Unix()
	attempt := func(podName, uid string, i int) error {
		claims := fmt.Sprintf(`{"aud":[%q],"exp":%d,"kubernetes.io":{"namespace":%q,"pod":{"name":%q,"uid":%q}}}`, xdsAudience, exp, ns, podName, uid)
		md := metadata.Pairs(controlplane.AuthorizationKey, "Bearer "+forgedJWT(claims, i))
		_, err := a.Authenticate(metadata.NewIncomingContext(context.Background(), md), &corev3.Node{Id: ns + "/" + podName, Cluster: ns + "/web"})
		return err
	}
	reviews := func() float64 { return testutil.ToFloat64(a.counter.WithLabelValues(reviewRefused)) }

	// Claims of pods the operator does not know, or of a known pod
	// with another UID: refused at once, no review.
	for i := range 20 {
		if err := attempt(fmt.Sprintf("ghost-%d", i), "u", i); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a token claiming an unknown pod: %v, want PermissionDenied", err)
		}
		if err := attempt("web-0", fmt.Sprintf("not-its-uid-%d", i), i); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("a token claiming a known pod with another UID: %v, want PermissionDenied", err)
		}
	}
	if got := reviews(); got != 0 {
		t.Fatalf("tokens claiming no known pod cost %v TokenReviews, want 0", got)
	}

	// Claims of the known pod: its own bucket.
	var unavailable int
	for i := range podReviewBurst + 10 {
		switch err := attempt("web-0", string(pod.UID), i); status.Code(err) {
		case codes.Unauthenticated: // reviewed: the API server refused the forgery
		case codes.Unavailable:
			unavailable++
		default:
			t.Fatalf("forged JWT %d: %v", i, err)
		}
	}
	if got := reviews(); got != podReviewBurst || unavailable != 10 {
		t.Errorf("%d forged JWTs claiming one pod: %v TokenReviews and %d refused as Unavailable, want %d and 10", podReviewBurst+10, got, unavailable, podReviewBurst)
	}

	// The shared bucket bounds every pod's reviews together.
	a.perPod = podLimits{}
	a.limit = rate.NewLimiter(0.001, 2)
	unavailable = 0
	for i := range 5 {
		if status.Code(attempt("web-0", string(pod.UID), 100+i)) == codes.Unavailable {
			unavailable++
		}
	}
	if unavailable != 3 {
		t.Errorf("5 forged JWTs with a shared bucket of 2: %d refused as Unavailable, want 3", unavailable)
	}
}

// The pod annotation tiercache.io/tier is free text that anyone who may
// edit their own pod can change at any time (the webhook sees CREATE
// only). Were the control plane to serve whatever tier key it names, two
// streams under 150 kB keys would make the replica's sidecar
// report (one JSON annotation of its Lease) larger than the API server
// allows: the report would go stale and the leader would count 0
// sidecars for EVERY tier of the cluster, and each key would stay a
// metric series. A pod is served only a tier its label and annotation
// agree on and that exists as a CacheTier of its namespace.
func TestAPodsEditedTierAnnotationCannotBreakOtherTiersCounts(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()

	// A victim tier in its own namespace, with one connected sidecar.
	victimNS := namespace(t, c)
	if err := c.Create(ctx, newTier(victimNS, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	victimPod := createPod(t, victimNS, "web-0", "web")
	victimTok := podToken(t, victimPod, xdsAudience)
	conn := xdsConn(t)
	eventually(t, 30*time.Second, func() error {
		_, err := xdsAttempt(t, conn, victimTok, victimNS+"/web-0", victimNS+"/web", "")
		return err
	})
	holdStream(t, conn, victimTok, victimNS+"/web-0", victimNS+"/web")
	victimConnected := func() (int32, error) {
		var tier v1alpha1.CacheTier
		err := c.Get(ctx, client.ObjectKey{Namespace: victimNS, Name: "web"}, &tier)
		return tier.Status.ConnectedSidecars, err
	}
	eventually(t, 30*time.Second, func() error {
		if n, err := victimConnected(); err != nil || n != 1 {
			return fmt.Errorf("victim connectedSidecars = %d (%v), want 1", n, err)
		}
		return nil
	})

	// The attacker: an ordinary injected pod of their own namespace,
	// re-annotated (and relabelled where the API server lets it: label
	// values are short) after injection.
	ns := namespace(t, c)
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	pod := createPod(t, ns, "web-0", "web")
	tok := podToken(t, pod, xdsAudience)
	for _, tier := range []string{strings.Repeat("x", 150_000) + "0", strings.Repeat("x", 150_000) + "1", "ghost"} {
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			t.Fatal(err)
		}
		p.Annotations[inject.AnnotationTier] = tier
		if len(tier) <= 63 {
			p.Labels[inject.LabelTier] = tier
		}
		if err := c.Update(ctx, &p); err != nil {
			t.Fatalf("re-annotating the attacker's own pod: %v", err)
		}
		// Once the operator's cache has the edit, and before: refused.
		for range 3 {
			if holdStream(t, conn, tok, ns+"/web-0", ns+"/"+tier) {
				t.Fatalf("a stream for tier key %.20q... (%d bytes) was accepted", tier, len(tier))
			}
		}
	}

	attackAt := time.Now()
	deadline := attackAt.Add(10 * time.Second)
	var last string
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var leases coordinationv1.LeaseList
		if err := c.List(ctx, &leases, client.InNamespace(operatorNS), client.MatchingLabels{labelConnectedReport: "true"}); err != nil {
			t.Fatal(err)
		}
		renewed := len(leases.Items) > 0
		for _, l := range leases.Items {
			if l.Spec.RenewTime == nil || !l.Spec.RenewTime.After(attackAt.Add(2*time.Second)) {
				renewed = false
			}
		}
		n, err := victimConnected()
		if renewed && err == nil && n == 1 {
			last = ""
			break
		}
		last = fmt.Sprintf("connected-sidecar reports renewed after the attack: %v; victim tier connectedSidecars = %d (%v)", renewed, n, err)
	}
	if last != "" {
		t.Errorf("streams from one tenant pod with edited tier annotations broke the connected counts of every tier: %s", last)
	}

	// And no key the pod named is a metric series.
	series := connectedSeriesWhere(t, func(tier string) bool { return strings.HasPrefix(tier, ns+"/xxxx") || tier == ns+"/ghost" })
	if len(series) != 0 {
		t.Errorf("tiercache_connected_sidecars has %d series for tier keys naming no CacheTier", len(series))
	}
}

// holdStream opens an ADS stream as id/cluster with tok and keeps it open
// until the test ends. It reports false when the control plane refused it
// (within 2s), true when it was counted as a connected sidecar of cluster.
func holdStream(t *testing.T, conn *grpc.ClientConn, tok, id, cluster string) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(context.Background(), controlplane.AuthorizationKey, "Bearer "+tok))
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		Node: &corev3.Node{Id: id, Cluster: cluster}, ResourceNames: []string{cluster}, TypeUrl: controlplane.ResourceTypeURL,
	}); err != nil {
		cancel()
		t.Fatal(err)
	}
	refused := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				refused <- err
				return
			}
		}
	}()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		select {
		case <-refused:
			cancel()
			return false
		default:
		}
		if connectedSeries(t, cluster) > 0 {
			t.Cleanup(func() {
				cancel()
				<-refused
			})
			return true
		}
	}
	cancel()
	<-refused
	return false
}

// connectedSeries is tiercache_connected_sidecars{namespace,tier} of the
// suite's operator, for the tier key namespace/name.
func connectedSeries(t *testing.T, tier string) float64 {
	t.Helper()
	return connectedSeriesWhere(t, func(v string) bool { return v == tier })[tier]
}

// connectedSeriesWhere returns the tiercache_connected_sidecars series of
// the suite's operator whose tier key (namespace/tier labels) match
// accepts, by tier key.
func connectedSeriesWhere(t *testing.T, match func(tier string) bool) map[string]float64 {
	t.Helper()
	mfs, err := cluster.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "tiercache_connected_sidecars" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if v := labelValue(m, "namespace") + "/" + labelValue(m, "tier"); match(v) {
				out[v] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// A pod that its owner annotates by hand (no tiercache.io/tier label, so
// not in the operator's pod cache, but annotated tiercache.io/injected and
// tiercache.io/tier) is not served, and a reconnect loop with the pod's
// own valid token costs neither a TokenReview nor a read of the API
// server.
func TestAHandAnnotatedPodIsRefusedWithoutAReview(t *testing.T) {
	c := needCluster(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t, c)
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	// Created without the tier annotation (so the webhook never sees it),
	// annotated afterwards (the webhook sees CREATE only).
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hand", Annotations: map[string]string{inject.AnnotationInjected: "true"}},
		Spec:       corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "example.test/app"}}},
	}
	if err := c.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Annotations[inject.AnnotationTier] = "web"
	if err := c.Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// The operator's pod cache, as newManager builds it: injected pods
	// (labelled) only.
	req, err := labels.NewRequirement(inject.LabelTier, selection.Exists, nil)
	if err != nil {
		t.Fatal(err)
	}
	podCache, err := cache.New(cluster.cfg, cache.Options{
		Scheme:   c.Scheme(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {Label: labels.NewSelector().Add(*req)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = podCache.Start(ctx) }()
	if _, err := podCache.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	if !podCache.WaitForCacheSync(ctx) {
		t.Fatal("pod cache did not sync")
	}
	a, err := newTokenAuthenticator(c, podCache, xdsAudience, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := metadata.Pairs(controlplane.AuthorizationKey, "Bearer "+podToken(t, pod, xdsAudience))
	node := &corev3.Node{Id: ns + "/hand", Cluster: ns + "/web"}
	const n = 20
	for i := range n {
		if _, err := a.Authenticate(metadata.NewIncomingContext(ctx, md), node); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("stream %d of a hand-annotated pod: %v, want PermissionDenied", i, err)
		}
	}
	if got := testutil.ToFloat64(a.counter.WithLabelValues(reviewAuthenticated)); got != 0 {
		t.Errorf("%d streams of one hand-annotated pod sent %v TokenReviews, want 0", n, got)
	}
}
