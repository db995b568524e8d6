package operator

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/sidecar"
	"github.com/tiercache/tiercache/test/testkube"
)

// The invalidation relay against the suite's operator: real API server,
// real TokenReviews, real sidecars connected to the operator's control
// plane over TLS with their pods' tokens.

const relayPurgeToken = "relay-test-purge-token-0123456789"

// relaySecrets writes a secrets directory with the tier's invalidation
// key and the purge token, as the operator's projected volume holds.
func relaySecrets(t *testing.T, key string) string {
	t.Helper()
	dir := t.TempDir()
	for name, v := range map[string]string{"invalidation-key": key, "purge-token": relayPurgeToken} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

type relayPod struct {
	name  string
	addrs sidecar.Addrs
}

func (p relayPod) get(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + p.addrs.Serve + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.Header.Get("X-Cache")
}

func (p relayPod) purge(t *testing.T, path string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+p.addrs.Admin+"/purge", strings.NewReader(`{"urls":["`+path+`"]}`))
	req.Header.Set("Authorization", "Bearer "+relayPurgeToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("purge %s via %s: %d %s", path, p.name, resp.StatusCode, b)
	}
}

func (p relayPod) purges(t *testing.T) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addrs.Admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "tiercache_purges_total "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// appliedBy waits until every pod's purge count passed before's and
// reports whether they all did within 5s.
func appliedBy(t *testing.T, pods []relayPod, before []float64) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for i, p := range pods {
		for p.purges(t) <= before[i] {
			if time.Now().After(deadline) {
				return false
			}
			time.Sleep(time.Millisecond)
		}
	}
	return true
}

func purgesOf(t *testing.T, pods []relayPod) []float64 {
	out := make([]float64, len(pods))
	for i, p := range pods {
		out[i] = p.purges(t)
	}
	return out
}

// TestRelayPurgeReachesEveryPodOfItsTierOnly: three sidecars of an
// L1-only tier and one of another tier, each authenticated by its pod's
// token; a purge through one reaches the other two, never the other
// tier's; and it is measured to the last pod (docs/benchmarks.md).
func TestRelayPurgeReachesEveryPodOfItsTierOnly(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	for _, name := range []string{"web", "admin"} {
		if err := c.Create(ctx, newTier(ns, name, v1alpha1.CacheTierSpec{})); err != nil {
			t.Fatal(err)
		}
	}
	origin := newRelayOrigin(t)
	webKey, adminKey := relaySecrets(t, "web-key-0123456789abcdef0123456789"), relaySecrets(t, "admin-key-0123456789abcdef012345678")
	var web []relayPod
	for i := range 3 {
		name := fmt.Sprint("web-", i)
		web = append(web, relayPod{name, startSidecar(t, origin, ns, "web", name, cluster.xdsAddr, "--secrets-dir="+webKey)})
	}
	admin := relayPod{"admin-0", startSidecar(t, origin, ns, "admin", "admin-0", cluster.xdsAddr, "--secrets-dir="+adminKey)}

	// Until every sidecar has subscribed, a purge may miss one.
	eventually(t, 60*time.Second, func() error {
		before := purgesOf(t, web)
		web[0].purge(t, "/warm-up")
		if !appliedBy(t, web, before) {
			return fmt.Errorf("a warm-up purge did not reach every web pod")
		}
		return nil
	})
	adminBefore := admin.purges(t)
	fill := func(path string) {
		for _, p := range append(slices.Clone(web), admin) {
			p.get(t, path)
			if x := p.get(t, path); x != "HIT; layer=l1" {
				t.Fatalf("GET %s via %s: %q, want an L1 hit", path, p.name, x)
			}
		}
	}
	fill("/x")
	before := purgesOf(t, web)
	web[1].purge(t, "/x")
	if !appliedBy(t, web, before) {
		t.Fatal("the purge did not reach every pod of the tier")
	}
	for _, p := range web {
		if x := p.get(t, "/x"); x != "MISS" {
			t.Errorf("%s still serves /x: %q", p.name, x)
		}
	}
	if x := admin.get(t, "/x"); x != "HIT; layer=l1" || admin.purges(t) != adminBefore {
		t.Errorf("the other tier's pod applied the purge: X-Cache %q, purges %v (was %v)", x, admin.purges(t), adminBefore)
	}

	// Latency to the last pod: purge through each pod in turn, timed
	// until the last one applied it (polled every millisecond).
	const rounds = 30
	var took []time.Duration
	for i := range rounds {
		before := purgesOf(t, web)
		start := time.Now()
		web[i%len(web)].purge(t, fmt.Sprint("/l", i))
		if !appliedBy(t, web, before) {
			t.Fatalf("round %d: the purge did not reach every pod", i)
		}
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("relay: purge to the last of %d pods, %d rounds: p50 %s, max %s", len(web), rounds,
		took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
	if got := counterEvent(t, "published"); got < rounds {
		t.Errorf("tiercache_relay_messages_total{event=published} = %v, want at least %d", got, rounds)
	}
}

// TestRelayAuthenticatesLikeXDS: a pod's token publishes into its own
// tier only; no token, no relay.
func TestRelayAuthenticatesLikeXDS(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	for _, name := range []string{"web", "admin"} {
		if err := c.Create(ctx, newTier(ns, name, v1alpha1.CacheTierSpec{})); err != nil {
			t.Fatal(err)
		}
	}
	pod := createPod(t, ns, "web-0", "web")
	tok, err := testkube.PodToken(ctx, cluster.client, pod, xdsAudience, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	testkube.WriteToken(t, tokenFile, tok)
	ca, err := os.ReadFile(cluster.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	dial := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: "localhost"}))}
	publish := func(tier, tokenFile string) error {
		rc, err := controlplane.NewRelayClient(controlplane.RelayClientOptions{Target: cluster.xdsAddr, Namespace: ns, Pod: "web-0", Tier: tier, TokenFile: tokenFile, DialOptions: dial})
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		return rc.Publish(ctx, []byte(`{"from":"x","all":true}`))
	}
	eventually(t, 30*time.Second, func() error { return publish("web", tokenFile) })
	if err := publish("admin", tokenFile); status.Code(err) != codes.PermissionDenied {
		t.Errorf("web-0's token publishing into tier admin: %v, want PermissionDenied", err)
	}
	if err := publish("web", ""); status.Code(err) != codes.Unauthenticated {
		t.Errorf("publishing without a token: %v, want Unauthenticated", err)
	}
}

// counterEvent reads tiercache_relay_messages_total{event} of the suite's
// operator.
func counterEvent(t *testing.T, event string) float64 {
	t.Helper()
	mfs, err := cluster.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tiercache_relay_messages_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelValue(m, "event") == event {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// newRelayOrigin answers every GET fresh for 5 minutes.
func newRelayOrigin(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// saToken requests a token of ServiceAccount ns/name for the API
// server's own audience, as the kubelet mounts it.
func saToken(t *testing.T, ns, name string) string {
	t.Helper()
	tok, err := testkube.ServiceAccountToken(context.Background(), cluster.client, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestRelayPeersAreTheOperatorsOwnServiceAccount: another replica is
// admitted with a token of the operator's ServiceAccount (a TokenReview
// says so), and nobody else.
func TestRelayPeersAreTheOperatorsOwnServiceAccount(t *testing.T) {
	c := needCluster(t)
	ns := namespace(t, c)
	own := saToken(t, ns, "tiercache-operator")
	user, err := serviceAccountUser(own)
	if err != nil || user != "system:serviceaccount:"+ns+":tiercache-operator" {
		t.Fatalf("own user %q, %v", user, err)
	}
	a := newPeerAuthenticator(c, user)
	call := func(tok string) error {
		ctx := context.Background()
		if tok != "" {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(controlplane.AuthorizationKey, "Bearer "+tok))
		}
		_, err := a.Authenticate(ctx)
		return err
	}
	if err := call(own); err != nil {
		t.Fatalf("the operator's own token: %v", err)
	}
	for name, tc := range map[string]struct {
		tok  string
		code codes.Code
	}{
		"another ServiceAccount of the namespace is denied": {saToken(t, ns, "app"), codes.PermissionDenied},
		"a forged token is unauthenticated":                 {forgedJWT(`{"sub":"`+user+`"}`, 0), codes.Unauthenticated},
		"no token is unauthenticated":                       {"", codes.Unauthenticated},
	} {
		if err := call(tc.tok); status.Code(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
	}
}

// TestRelayPeersAreTheOtherOperatorPods: the replicas are found by the
// chart's labels in the operator's namespace, this one and pods without
// an address left out.
func TestRelayPeersAreTheOtherOperatorPods(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	op := map[string]string{"app.kubernetes.io/name": "tiercache", "app.kubernetes.io/component": "operator"}
	for _, p := range []struct {
		name, ip string
		labels   map[string]string
	}{
		{"op-self", "10.0.0.1", op},
		{"op-other", "10.0.0.2", op},
		{"op-starting", "", op},
		{"app", "10.0.0.3", map[string]string{"app.kubernetes.io/name": "shop"}},
	} {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: p.labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "example.test/c"}}},
		}
		if err := c.Create(ctx, pod); err != nil {
			t.Fatal(err)
		}
		if p.ip != "" {
			pod.Status.PodIP = p.ip
			if err := c.Status().Update(ctx, pod); err != nil {
				t.Fatal(err)
			}
		}
	}
	sel, err := labels.Parse("app.kubernetes.io/name=tiercache,app.kubernetes.io/component=operator")
	if err != nil {
		t.Fatal(err)
	}
	peers, err := relayPeers{pods: c, ns: ns, self: "op-self", selector: sel, port: "18000"}.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []controlplane.Peer{{Name: "op-other", Addr: "10.0.0.2:18000"}}; !slices.Equal(peers, want) {
		t.Fatalf("peers %v, want %v", peers, want)
	}
}

// startRelayReplica serves a control plane as a replica of the operator does
// (sidecars and peers checked by TokenReview against the suite's API
// server), in plaintext on loopback, relaying with the replicas peers
// returns, presenting peerToken.
func startRelayReplica(t *testing.T, operatorUser, peerToken string, peers func() []controlplane.Peer) string {
	t.Helper()
	auth, err := newTokenAuthenticator(cluster.client, cluster.client, xdsAudience, nil)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := controlplane.NewRelay(controlplane.RelayOptions{Logger: slog.New(slog.DiscardHandler), PeerAuth: newPeerAuthenticator(cluster.client, operatorUser).Authenticate})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := controlplane.NewServer(controlplane.Options{Logger: slog.New(slog.DiscardHandler), Authenticate: auth.Authenticate, Relay: relay, ShutdownTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served, linked := make(chan error, 1), make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	go func() {
		linked <- relay.RunPeers(ctx, controlplane.PeerOptions{
			Peers: func(context.Context) ([]controlplane.Peer, error) { return peers(), nil },
			Every: 50 * time.Millisecond, Token: func() (string, error) { return peerToken, nil },
			Backoff: controlplane.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := errors.Join(<-served, <-linked); err != nil {
			t.Errorf("replica: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestRelayReachesThePodsOfEveryReplica: two replicas, each checking
// sidecars and the other replica by TokenReview, sidecars split between
// them: a purge through either reaches every pod.
func TestRelayReachesThePodsOfEveryReplica(t *testing.T) {
	c := needCluster(t)
	ctx := context.Background()
	ns := namespace(t, c)
	if err := c.Create(ctx, newTier(ns, "web", v1alpha1.CacheTierSpec{})); err != nil {
		t.Fatal(err)
	}
	opToken := saToken(t, ns, "tiercache-operator")
	user, err := serviceAccountUser(opToken)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var addrs [2]string
	peerOf := func(i int) func() []controlplane.Peer {
		return func() []controlplane.Peer {
			mu.Lock()
			defer mu.Unlock()
			if addrs[1-i] == "" {
				return nil
			}
			return []controlplane.Peer{{Name: fmt.Sprint("replica-", 1-i), Addr: addrs[1-i]}}
		}
	}
	a := startRelayReplica(t, user, opToken, peerOf(0))
	b := startRelayReplica(t, user, opToken, peerOf(1))
	mu.Lock()
	addrs = [2]string{a, b}
	mu.Unlock()

	origin := newRelayOrigin(t)
	secrets := relaySecrets(t, "web-key-0123456789abcdef0123456789")
	var pods []relayPod
	for i := range 4 {
		name := fmt.Sprint("web-", i)
		p := createPod(t, ns, name, "web")
		tokenFile := filepath.Join(t.TempDir(), "token")
		tok, err := testkube.PodToken(ctx, cluster.client, p, xdsAudience, 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		testkube.WriteToken(t, tokenFile, tok)
		pods = append(pods, relayPod{name, runSidecar(t, origin, ns, "web", name, addrs[i%2], "--control-plane-token-file="+tokenFile, "--secrets-dir="+secrets)})
	}
	eventually(t, 60*time.Second, func() error {
		before := purgesOf(t, pods)
		pods[0].purge(t, "/warm-up")
		if !appliedBy(t, pods, before) {
			return fmt.Errorf("a warm-up purge did not reach every pod")
		}
		return nil
	})
	for i, via := range []relayPod{pods[0], pods[1]} {
		path := fmt.Sprint("/r", i)
		for _, p := range pods {
			p.get(t, path)
			if x := p.get(t, path); x != "HIT; layer=l1" {
				t.Fatalf("GET %s via %s: %q", path, p.name, x)
			}
		}
		before := purgesOf(t, pods)
		via.purge(t, path)
		if !appliedBy(t, pods, before) {
			t.Fatalf("a purge through %s did not reach every pod", via.name)
		}
		for _, p := range pods {
			if x := p.get(t, path); x != "MISS" {
				t.Errorf("%s still serves %s after a purge through %s: %q", p.name, path, via.name, x)
			}
		}
	}
}

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRelayPeersDialTheControlPlaneOverTLS: a replica dials another by
// address and checks its certificate for the name the sidecars check;
// the suite's operator, which takes no peers (no --relay-peers), answers
// over TLS that it takes none.
func TestRelayPeersDialTheControlPlaneOverTLS(t *testing.T) {
	needCluster(t)
	dial, err := relayPeerDial(Options{XDSTLS: true, XDSCAFile: cluster.caFile, ControlPlaneAddress: cluster.xdsAddr})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	r, err := controlplane.NewRelay(controlplane.RelayOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(cluster.xdsAddr)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.RunPeers(ctx, controlplane.PeerOptions{
			Peers: func(context.Context) ([]controlplane.Peer, error) {
				return []controlplane.Peer{{Name: "suite", Addr: "127.0.0.1:" + port}}, nil
			},
			DialOptions: dial, Token: func() (string, error) { return "peer-token", nil },
		})
	}()
	defer func() { cancel(); <-done }()
	eventually(t, 20*time.Second, func() error {
		if !strings.Contains(logs.String(), "this replica takes no peers") {
			return fmt.Errorf("no answer from the suite's control plane yet; log: %s", logs.String())
		}
		return nil
	})
}
