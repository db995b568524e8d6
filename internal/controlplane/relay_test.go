package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// relayTokens are the credentials of the relay tests: one per tier.
func relayTokens() *tokenTable {
	return &tokenTable{tokens: map[string]Identity{
		"tok-a": {Tier: "shop/a"},
		"tok-b": {Tier: "shop/b"},
	}}
}

// startRelayServer serves a Server with a Relay (authenticated with tt)
// on a loopback port.
func startRelayServer(t *testing.T, tt *tokenTable, ro RelayOptions) (*testServer, *Relay) {
	t.Helper()
	if ro.Logger == nil {
		ro.Logger = quiet
	}
	r, err := NewRelay(ro)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Relay: r}
	if tt != nil {
		opts.Authenticate = tt.authenticate
	}
	return startServer(t, "127.0.0.1:0", opts), r
}

// relaySidecar is a RelayClient subscribed in the background, recording
// what it receives and every subscription.
type relaySidecar struct {
	*RelayClient
	msgs       chan string
	subscribed chan time.Time
	stop       func()
}

func startRelaySidecar(t *testing.T, addr, tier, pod, token string, opts ...func(*RelayClientOptions)) *relaySidecar {
	t.Helper()
	o := RelayClientOptions{Target: addr, Namespace: "shop", Pod: pod, Tier: tier, Logger: quiet,
		Backoff: Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}}
	if token != "" {
		o.TokenFile = filepath.Join(t.TempDir(), "token")
		writeToken(t, o.TokenFile, token)
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := NewRelayClient(o)
	if err != nil {
		t.Fatal(err)
	}
	rs := &relaySidecar{RelayClient: c, msgs: make(chan string, 100), subscribed: make(chan time.Time, 100)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Subscribe(ctx, func(b []byte) { rs.msgs <- string(b) }, func(since time.Time) { rs.subscribed <- since })
	}()
	var once sync.Once
	rs.stop = func() {
		once.Do(func() {
			cancel()
			<-done
			_ = c.Close()
		})
	}
	t.Cleanup(rs.stop)
	return rs
}

func (rs *relaySidecar) waitSubscribed(t *testing.T) {
	t.Helper()
	select {
	case <-rs.subscribed:
	case <-time.After(waitLong):
		t.Fatalf("not subscribed within %s", waitLong)
	}
}

func (rs *relaySidecar) next(t *testing.T, what string) string {
	t.Helper()
	select {
	case m := <-rs.msgs:
		return m
	case <-time.After(waitLong):
		t.Fatalf("%s: no message within %s", what, waitLong)
		return ""
	}
}

func relayPublish(t *testing.T, c *RelayClient, msg string) {
	t.Helper()
	if err := c.Publish(context.Background(), []byte(msg)); err != nil {
		t.Fatalf("publish %q: %v", msg, err)
	}
}

func TestRelayDeliversWithinItsTierOnly(t *testing.T) {
	srv, r := startRelayServer(t, relayTokens(), RelayOptions{})
	a1 := startRelaySidecar(t, srv.addr, "a", "a1", "tok-a")
	a2 := startRelaySidecar(t, srv.addr, "a", "a2", "tok-a")
	b1 := startRelaySidecar(t, srv.addr, "b", "b1", "tok-b")
	for _, s := range []*relaySidecar{a1, a2, b1} {
		s.waitSubscribed(t)
	}
	relayPublish(t, a1.RelayClient, "purge a 1")
	relayPublish(t, a1.RelayClient, "purge a 2")
	relayPublish(t, b1.RelayClient, "purge b")
	for _, s := range []*relaySidecar{a1, a2} {
		// The sender gets its own messages too (the purger skips them):
		// in order.
		if m := s.next(t, "tier a"); m != "purge a 1" {
			t.Fatalf("tier a's first message is %q, want purge a 1", m)
		}
		if m := s.next(t, "tier a"); m != "purge a 2" {
			t.Fatalf("tier a's second message is %q, want purge a 2", m)
		}
	}
	if m := b1.next(t, "tier b"); m != "purge b" {
		t.Fatalf("tier b's sidecar received %q: another tier's message", m)
	}
	if got := testutil.ToFloat64(r.counter.WithLabelValues(relayPublished)); got != 3 {
		t.Errorf("published = %v, want 3", got)
	}
	if got := testutil.ToFloat64(r.counter.WithLabelValues(relayDelivered)); got != 5 {
		t.Errorf("delivered = %v, want 5", got)
	}
}

func TestRelayRefusesWhatTheCredentialDoesNotBack(t *testing.T) {
	srv, _ := startRelayServer(t, relayTokens(), RelayOptions{})
	b1 := startRelaySidecar(t, srv.addr, "b", "b1", "tok-b")
	b1.waitSubscribed(t)

	for name, tc := range map[string]struct {
		tier, token string
		code        codes.Code
	}{
		"a token of tier a cannot publish into tier b": {"b", "tok-a", codes.PermissionDenied},
		"a caller without a token is refused":          {"b", "", codes.Unauthenticated},
		"an unknown token is refused":                  {"b", "made-up", codes.Unauthenticated},
	} {
		t.Run(name, func(t *testing.T) {
			o := RelayClientOptions{Target: srv.addr, Namespace: "shop", Pod: "x", Tier: tc.tier, Logger: quiet}
			if tc.token != "" {
				o.TokenFile = filepath.Join(t.TempDir(), "token")
				writeToken(t, o.TokenFile, tc.token)
			}
			c, err := NewRelayClient(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := c.Publish(context.Background(), []byte("forged")); status.Code(err) != tc.code {
				t.Fatalf("publish: %v, want %s", err, tc.code)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitLong)
			defer cancel()
			if _, err := c.open(ctx); status.Code(err) != tc.code {
				t.Fatalf("subscribe: %v, want %s", err, tc.code)
			}
		})
	}
	relayPublish(t, b1.RelayClient, "purge b")
	if m := b1.next(t, "tier b"); m != "purge b" {
		t.Fatalf("tier b's sidecar received %q, a message its tier's credential did not send", m)
	}
}

// startPeers runs r's peer links to the given servers until the test
// ends.
func startPeers(t *testing.T, r *Relay, peers func() []Peer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- r.RunPeers(ctx, PeerOptions{
			Peers:   func(context.Context) ([]Peer, error) { return peers(), nil },
			Every:   20 * time.Millisecond,
			Token:   func() (string, error) { return "tok-peer", nil },
			Backoff: Backoff{Initial: 20 * time.Millisecond, Max: 100 * time.Millisecond},
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunPeers: %v", err)
		}
	})
}

// peerAuth admits the bearer token "tok-peer" only.
func peerAuth(ctx context.Context) (string, error) {
	tok, err := BearerToken(ctx)
	if err != nil {
		return "", err
	}
	if tok != "tok-peer" {
		return "", status.Error(codes.PermissionDenied, "not a peer")
	}
	return "peer", nil
}

func TestRelayReachesTheSidecarsOfEveryReplica(t *testing.T) {
	tt := relayTokens()
	srv1, r1 := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	srv2, r2 := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	startPeers(t, r1, func() []Peer { return []Peer{{Name: "two", Addr: srv2.addr}} })
	startPeers(t, r2, func() []Peer { return []Peer{{Name: "one", Addr: srv1.addr}} })
	on1 := startRelaySidecar(t, srv1.addr, "a", "a1", "tok-a")
	on2 := startRelaySidecar(t, srv2.addr, "a", "a2", "tok-a")
	b2 := startRelaySidecar(t, srv2.addr, "b", "b2", "tok-b")
	for _, s := range []*relaySidecar{on1, on2, b2} {
		s.waitSubscribed(t)
	}
	relayPublish(t, on1.RelayClient, "from replica one")
	relayPublish(t, on2.RelayClient, "from replica two")
	for _, s := range []*relaySidecar{on1, on2} {
		got := map[string]bool{s.next(t, "tier a"): true, s.next(t, "tier a"): true}
		if !got["from replica one"] || !got["from replica two"] {
			t.Fatalf("a sidecar of tier a received %v, want both messages", got)
		}
	}
	relayPublish(t, b2.RelayClient, "b")
	if m := b2.next(t, "tier b"); m != "b" {
		t.Fatalf("tier b's sidecar received %q: tier a's message crossed over", m)
	}
	// Forwarded messages are not forwarded again: replica one received
	// the two published on two, which received the one published on one.
	for i, want := range map[int]float64{0: 2, 1: 1} {
		r := []*Relay{r1, r2}[i]
		eventually(t, waitLong, func() bool { return testutil.ToFloat64(r.counter.WithLabelValues(relayForwarded)) == want },
			"replica %d forwarded %v messages, want %v", i+1, testutil.ToFloat64(r.counter.WithLabelValues(relayForwarded)), want)
	}
}

func TestRelayPeerRefusesACallerThatIsNoPeer(t *testing.T) {
	tt := relayTokens()
	srv1, _ := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	r, err := NewRelay(RelayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	l := &peerLink{r: r, peer: Peer{Name: "one", Addr: srv1.addr}, o: PeerOptions{Token: func() (string, error) { return "tok-a", nil }},
		dial: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, cancel: func() {}}
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	if _, err := l.session(ctx); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a sidecar's token on Peer: %v, want PermissionDenied", err)
	}
}

func TestRelayPeerReplaysWhatItMissed(t *testing.T) {
	tt := relayTokens()
	srv1, _ := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	_, r2 := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	on1 := startRelaySidecar(t, srv1.addr, "a", "a1", "tok-a")
	on1.waitSubscribed(t)
	// Published on replica one before replica two links to it.
	relayPublish(t, on1.RelayClient, "early")
	r2sub, err := r2.subscribe("shop/a")
	if err != nil {
		t.Fatal(err)
	}
	startPeers(t, r2, func() []Peer { return []Peer{{Name: "one", Addr: srv1.addr}} })
	select {
	case m := <-r2sub.q:
		if string(m) != "early" {
			t.Fatalf("replayed %q, want early", m)
		}
	case <-r2sub.kill:
		t.Fatal("the subscription was ended although the replay was complete")
	case <-time.After(waitLong):
		t.Fatal("the message published before the link was not replayed")
	}
}

func TestRelayEndsSubscriptionsWhenAPeerCannotReplay(t *testing.T) {
	tt := relayTokens()
	// Replica one keeps one message for its peers.
	srv1, _ := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth, LogSize: 1})
	_, r2 := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	on1 := startRelaySidecar(t, srv1.addr, "a", "a1", "tok-a")
	on1.waitSubscribed(t)
	relayPublish(t, on1.RelayClient, "lost")
	relayPublish(t, on1.RelayClient, "kept")
	r2sub, err := r2.subscribe("shop/a")
	if err != nil {
		t.Fatal(err)
	}
	startPeers(t, r2, func() []Peer { return []Peer{{Name: "one", Addr: srv1.addr}} })
	select {
	case <-r2sub.kill:
	case <-time.After(waitLong):
		t.Fatal("a subscription that missed a message was not ended")
	}
}

func TestRelayEndsASubscriptionThatFallsBehind(t *testing.T) {
	r, err := NewRelay(RelayOptions{Logger: quiet, QueueSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	slow, _ := r.subscribe("shop/a")
	fast, _ := r.subscribe("shop/a")
	for _, m := range []string{"1", "2"} {
		if err := r.deliver("shop/a", []byte(m), true); err != nil {
			t.Fatal(err)
		}
		<-fast.q
	}
	select {
	case <-slow.kill:
	default:
		t.Fatal("the subscription whose queue is full was not ended")
	}
	select {
	case <-fast.kill:
		t.Fatal("a subscription that keeps up was ended")
	default:
	}
	if got := testutil.ToFloat64(r.counter.WithLabelValues(relayDropped)); got != 1 {
		t.Errorf("dropped = %v, want 1", got)
	}
	if r.Subscribers("shop/a") != 1 {
		t.Errorf("subscribers = %d, want the one that keeps up", r.Subscribers("shop/a"))
	}
}

func TestRelaySubscriptionIsRenewedBeforeItsCredentialExpires(t *testing.T) {
	tt := relayTokens()
	tt.ttl = 1500 * time.Millisecond
	srv, _ := startRelayServer(t, tt, RelayOptions{})
	s := startRelaySidecar(t, srv.addr, "a", "a1", "tok-a", func(o *RelayClientOptions) { o.RenewBefore = time.Second })
	s.waitSubscribed(t)
	pub := startRelaySidecar(t, srv.addr, "a", "a2", "tok-a")
	pub.waitSubscribed(t)
	// Past two expiries, a message every 100ms: every one arrives once,
	// and the subscription is never lost.
	deadline := time.Now().Add(2 * tt.ttl)
	n := 0
	for ; time.Now().Before(deadline); n++ {
		relayPublish(t, pub.RelayClient, "m"+string(rune('a'+n%26))+time.Now().Format(time.RFC3339Nano))
		time.Sleep(100 * time.Millisecond)
	}
	for i := range n {
		s.next(t, "message "+string(rune('0'+i%10)))
	}
	select {
	case m := <-s.msgs:
		t.Fatalf("a message arrived twice or extra: %q", m)
	case <-s.subscribed:
		t.Fatal("the subscription was lost at its credential's expiry (the sidecar would clear its L1)")
	case <-time.After(200 * time.Millisecond):
	}
}

func TestMaxReplayAgeBelowMessageAge(t *testing.T) {
	// invalidate.MaxMessageAge (2m) less MaxClockSkew (30s): receivers
	// accept whatever a replay within maxReplayAge carries.
	if maxReplayAge > 2*time.Minute-30*time.Second {
		t.Fatalf("maxReplayAge %s lets replays carry messages receivers refuse", maxReplayAge)
	}
}

func TestRelayEndsSubscriptionsWhenAPeerRestartedAfterABrokenStream(t *testing.T) {
	tt := relayTokens()
	srv1, _ := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	r2, err := NewRelay(RelayOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	sub, _ := r2.subscribe("shop/a")
	dial := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	link := func(epoch uint64, clean bool) *peerLink {
		return &peerLink{r: r2, peer: Peer{Name: "one", Addr: srv1.addr}, dial: dial, cancel: func() {},
			o: PeerOptions{Token: func() (string, error) { return "tok-peer", nil }}, epoch: epoch, clean: clean}
	}
	// The stream from a process whose log this replica knew ended
	// cleanly: a new process at the same address lost nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _ = link(12345, true).session(ctx)
	select {
	case <-sub.kill:
		t.Fatal("a subscription was ended after a clean end of the peer's stream")
	default:
	}
	// It broke: the new process's predecessor may have taken messages
	// it never sent.
	ctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, _ = link(12345, false).session(ctx)
	select {
	case <-sub.kill:
	default:
		t.Fatal("the subscriptions were kept although the peer restarted after a broken stream")
	}
}

func TestRelayPublishTriesAgainWhileTheReplicaIsUnavailable(t *testing.T) {
	srv, r := startRelayServer(t, relayTokens(), RelayOptions{})
	s := startRelaySidecar(t, srv.addr, "a", "a1", "tok-a")
	s.waitSubscribed(t)
	relayPublish(t, s.RelayClient, "before")
	s.next(t, "before")
	// The replica refuses messages for a moment (as while it stops).
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()
	time.AfterFunc(100*time.Millisecond, r.open)
	start := time.Now()
	relayPublish(t, s.RelayClient, "during")
	if m := s.next(t, "during"); m != "during" {
		t.Fatalf("received %q", m)
	}
	t.Logf("published after %s", time.Since(start))
}

func TestRelayPeerStreamsReauthenticateWithoutLosingAMessage(t *testing.T) {
	tt := relayTokens()
	srv1, _ := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth, PeerReauth: 100 * time.Millisecond})
	srv2, r2 := startRelayServer(t, tt, RelayOptions{PeerAuth: peerAuth})
	startPeers(t, r2, func() []Peer { return []Peer{{Name: "one", Addr: srv1.addr}} })
	on1 := startRelaySidecar(t, srv1.addr, "a", "a1", "tok-a")
	on2 := startRelaySidecar(t, srv2.addr, "a", "a2", "tok-a")
	on1.waitSubscribed(t)
	on2.waitSubscribed(t)
	const n = 20
	for i := range n {
		relayPublish(t, on1.RelayClient, fmt.Sprint("m", i))
		time.Sleep(25 * time.Millisecond) // across several re-authentications
	}
	for i := range n {
		if m := on2.next(t, "a message from replica one"); m != fmt.Sprint("m", i) {
			t.Fatalf("message %d on replica two is %q", i, m)
		}
	}
	select {
	case <-on2.subscribed:
		t.Fatal("replica two's sidecar lost its subscription over a peer's re-authentication")
	case <-time.After(100 * time.Millisecond):
	}
}
