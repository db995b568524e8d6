package operator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	dto "github.com/prometheus/client_model/go"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/test/testkube"
)

// xdsConn is a gRPC connection to the suite's control plane over TLS,
// trusting the suite's CA: the network position of any pod.
func xdsConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	ca, err := os.ReadFile(cluster.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := grpc.NewClient(cluster.xdsAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "localhost",
	})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// xdsAttempt opens a stream with token (none when ""), sends one request
// as node id/cluster (a NACK carrying nackText when it is not ""), and
// returns the first response or the stream's error.
func xdsAttempt(t *testing.T, conn *grpc.ClientConn, token, id, cluster, nackText string) (*discoveryv3.DiscoveryResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, controlplane.AuthorizationKey, "Bearer "+token)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: id, Cluster: cluster},
		ResourceNames: []string{cluster},
		TypeUrl:       controlplane.ResourceTypeURL,
	}
	if nackText != "" {
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: nackText}
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	_ = stream.CloseSend()
	return resp, err
}

func podToken(t *testing.T, p *corev1.Pod, audience string) string {
	t.Helper()
	tok, err := testkube.PodToken(context.Background(), cluster.client, p, audience, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tokenReviews reads tiercache_xds_token_reviews_total{result} of the
// suite's operator.
func tokenReviews(t *testing.T, result string) float64 {
	t.Helper()
	return counterValue(t, cluster.reg, "tiercache_xds_token_reviews_total", result)
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestXDSServesAPodOnlyItsOwnTier: the control plane authenticates every
// stream with the pod's projected token (TokenReview against the real API
// server) and serves a pod only the tier of its own annotation, in its own
// namespace; refused streams get nothing, and their NACKs and connections
// are not recorded.
func TestXDSServesAPodOnlyItsOwnTier(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	nsA, nsB := namespace(t, c), namespace(t, c)
	for _, tier := range []*v1alpha1.CacheTier{newTier(nsA, "web", v1alpha1.CacheTierSpec{}), newTier(nsB, "web", v1alpha1.CacheTierSpec{}), newTier(nsB, "admin", v1alpha1.CacheTierSpec{})} {
		if err := c.Create(ctx, tier); err != nil {
			t.Fatal(err)
		}
	}
	podA := createPod(t, nsA, "web-0", "web")
	podB := createPod(t, nsB, "web-0", "web")
	tokA, tokB := podToken(t, podA, xdsAudience), podToken(t, podB, xdsAudience)
	// A pod that was not injected (no annotation), with a valid token.
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "plain"},
		Spec:       corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "example.test/app"}}},
	}
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	// A token of the ServiceAccount bound to no pod.
	unbound := &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{xdsAudience}}}
	if err := c.SubResource("token").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: nsB, Name: "app"}}, unbound); err != nil {
		t.Fatal(err)
	}
	conn := xdsConn(t)
	// Both namespaces' tiers are published before anyone asks.
	eventually(t, 30*time.Second, func() error {
		if _, err := xdsAttempt(t, conn, tokB, nsB+"/web-0", nsB+"/web", ""); err != nil {
			return err
		}
		_, err := xdsAttempt(t, conn, tokA, nsA+"/web-0", nsA+"/web", "")
		return err
	})

	const attack = "attacker text"
	refusals := []struct {
		name, token, id, cluster string
		code                     codes.Code
		says                     string
	}{
		{"a pod of namespace a claiming tier b/web is denied", tokA, nsA + "/web-0", nsB + "/web", codes.PermissionDenied, "differs from the pod's tier"},
		{"a pod of namespace a claiming to be a pod of b is denied", tokA, nsB + "/web-0", nsB + "/web", codes.PermissionDenied, "node.id"},
		{"a stream without a token is unauthenticated", "", nsB + "/web-0", nsB + "/web", codes.Unauthenticated, "no authorization metadata"},
		{"a token of another audience is unauthenticated", podToken(t, podB, "other-audience"), nsB + "/web-0", nsB + "/web", codes.Unauthenticated, "audience"},
		{"a garbage token is unauthenticated", "not-a-token", nsB + "/web-0", nsB + "/web", codes.Unauthenticated, "not a JWT"},
		{"a forged token with plausible claims is unauthenticated", forgedJWT(fmt.Sprintf(`{"aud":[%q],"exp":%d,"kubernetes.io":{"namespace":%q,"pod":{"name":"web-0","uid":%q}}}`, xdsAudience, time.Now().Add(time.Hour).Unix(), nsB, podB.UID), 0), nsB + "/web-0", nsB + "/web", codes.Unauthenticated, "refused by the API server"},
		{"a token bound to no pod is unauthenticated", unbound.Status.Token, nsB + "/web-0", nsB + "/web", codes.Unauthenticated, "not bound to a pod"},
		{"a pod annotated for web asking for admin is denied", tokB, nsB + "/web-0", nsB + "/admin", codes.PermissionDenied, "differs from the pod's tier"},
		{"a pod that was not injected is denied", podToken(t, plain, xdsAudience), nsB + "/plain", nsB + "/web", codes.PermissionDenied, "not an injected pod"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := xdsAttempt(t, conn, tc.token, tc.id, tc.cluster, attack)
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got response %v, error %v; want %s saying %q", resp, err, tc.code, tc.says)
			}
		})
	}

	// The legitimate pod gets its tier, and its NACK is recorded.
	resp, err := xdsAttempt(t, conn, tokB, nsB+"/web-0", nsB+"/web", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetResources()) != 1 {
		t.Fatalf("the legitimate pod got %d resources", len(resp.GetResources()))
	}
	var tec corev3.TypedExtensionConfig
	if err := resp.GetResources()[0].UnmarshalTo(&tec); err != nil || tec.GetName() != nsB+"/web" {
		t.Fatalf("the legitimate pod got resource %q (err %v), want %s/web", tec.GetName(), err, nsB)
	}
	if _, err := xdsAttempt(t, conn, tokB, nsB+"/web-0", nsB+"/web", "the real sidecar's reason"); err != nil {
		t.Fatal(err)
	}
	// Once the real NACK is in the status, none of the refused ones is.
	for _, tier := range []string{"web", "admin"} {
		var want int64
		if tier == "web" {
			want = 1
		}
		eventually(t, 30*time.Second, func() error {
			var got v1alpha1.CacheTier
			if err := c.Get(ctx, client.ObjectKey{Namespace: nsB, Name: tier}, &got); err != nil {
				return err
			}
			if got.Status.NACKs != want || strings.Contains(got.Status.LastNACK, attack) {
				return fmt.Errorf("tier %s: nacks %d, lastNACK %q; want %d without %q", tier, got.Status.NACKs, got.Status.LastNACK, want, attack)
			}
			return nil
		})
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs, client.InNamespace(nsB)); err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, attack) {
			t.Errorf("an Event carries a refused stream's text: %s", e.Message)
		}
	}
}

// TestTokenReviewsAreCached: reconnects with one token cost one
// TokenReview; reconnects with a refused token cost one too.
func TestTokenReviewsAreCached(t *testing.T) {
	c := needCluster(t)
	ns, pod, _, conn := servedPod(t, c)

	const n = 10
	okBefore, refusedBefore := tokenReviews(t, reviewAuthenticated), tokenReviews(t, reviewRefused)
	fresh := podToken(t, pod, xdsAudience)
	for range n {
		if _, err := xdsAttempt(t, conn, fresh, ns+"/web-0", ns+"/web", ""); err != nil {
			t.Fatal(err)
		}
	}
	forged := forgedJWT(fmt.Sprintf(`{"aud":[%q],"exp":%d,"kubernetes.io":{"namespace":%q,"pod":{"name":"web-0","uid":%q}}}`, xdsAudience, time.Now().Add(time.Hour).Unix(), ns, pod.UID), 1)
	for range n {
		if _, err := xdsAttempt(t, conn, forged, ns+"/web-0", ns+"/web", ""); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("a forged token got %v", err)
		}
	}
	if got := tokenReviews(t, reviewAuthenticated) - okBefore; got != 1 {
		t.Errorf("%d streams with one token sent %v TokenReviews, want 1", n, got)
	}
	if got := tokenReviews(t, reviewRefused) - refusedBefore; got != 1 {
		t.Errorf("%d streams with one forged token sent %v TokenReviews, want 1", n, got)
	}
}

// countingReader counts the Gets that reach the API server.
type countingReader struct {
	client.Reader
	gets atomic.Int64
}

func (r *countingReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	r.gets.Add(1)
	return r.Reader.Get(ctx, key, obj, opts...)
}

// TestARefusedPodIsNotReadAgainAndAgain: retries with the token of a pod
// that may not be served read that pod once, not once per stream.
func TestARefusedPodIsNotReadAgainAndAgain(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	if err := c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"}}); err != nil {
		t.Fatal(err)
	}
	plain := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "plain"},
		Spec:       corev1.PodSpec{ServiceAccountName: "app", Containers: []corev1.Container{{Name: "app", Image: "example.test/app"}}},
	}
	if err := c.Create(ctx, plain); err != nil {
		t.Fatal(err)
	}
	pods := &countingReader{Reader: c}
	a, err := newTokenAuthenticator(c, pods, xdsAudience, nil)
	if err != nil {
		t.Fatal(err)
	}
	md := metadata.Pairs(controlplane.AuthorizationKey, "Bearer "+podToken(t, plain, xdsAudience))
	node := &corev3.Node{Id: ns + "/plain", Cluster: ns + "/web"}
	for range 10 {
		_, err := a.Authenticate(metadata.NewIncomingContext(ctx, md), node)
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not an injected pod") {
			t.Fatalf("got %v, want PermissionDenied: not an injected pod", err)
		}
	}
	if n := pods.gets.Load(); n != 1 {
		t.Errorf("10 refused streams read the pod %d times, want 1", n)
	}
}

// servedPod creates a namespace with the tier web and its injected pod
// web-0, and waits until the control plane serves the pod; it returns the
// namespace, the pod, its token and the connection it was served on.
func servedPod(t *testing.T, c client.Client) (ns string, pod *corev1.Pod, tok string, conn *grpc.ClientConn) {
	t.Helper()
	ns = namespace(t, c)
	if err := c.Create(context.Background(), newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	pod = createPod(t, ns, "web-0", "web")
	tok = podToken(t, pod, xdsAudience)
	conn = xdsConn(t)
	eventually(t, 30*time.Second, func() error {
		_, err := xdsAttempt(t, conn, tok, ns+"/web-0", ns+"/web", "")
		return err
	})
	return ns, pod, tok, conn
}
