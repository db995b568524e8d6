package sidecar

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// Sidecars of a tier without L2 against real control-plane servers with
// the invalidation relay, on loopback: every purge entry point reaches
// every pod.

const relayKey = "0123456789abcdef0123456789abcdef\n"

// relayPlane is a control-plane server serving the relay.
type relayPlane struct {
	*cpServer
	relay *controlplane.Relay
}

// startRelayPlane serves a control plane with a relay on addr
// ("127.0.0.1:0": any port).
func startRelayPlane(t *testing.T, addr string) *relayPlane {
	t.Helper()
	r, err := controlplane.NewRelay(controlplane.RelayOptions{
		Logger:   slog.New(slog.DiscardHandler),
		PeerAuth: func(context.Context) (string, error) { return "peer", nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := controlplane.NewServer(controlplane.Options{Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 2 * time.Second, Relay: r})
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	for i := 0; ; i++ { // the port of a server just stopped may take a moment
		if l, err = net.Listen("tcp", addr); err == nil {
			break
		}
		if i == 100 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	var once sync.Once
	p := &relayPlane{cpServer: &cpServer{Server: srv, addr: l.Addr().String()}, relay: r}
	p.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("control plane Serve: %v", err)
			}
		})
	}
	t.Cleanup(p.stop)
	return p
}

// linkPeers makes each plane receive the others' messages until the
// test ends.
func linkPeers(t *testing.T, planes ...*relayPlane) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i, p := range planes {
		var peers []controlplane.Peer
		for j, q := range planes {
			if j != i {
				peers = append(peers, controlplane.Peer{Name: fmt.Sprint("replica-", j), Addr: q.addr})
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = p.relay.RunPeers(ctx, controlplane.PeerOptions{
				Peers:   func(context.Context) ([]controlplane.Peer, error) { return peers, nil },
				Every:   50 * time.Millisecond,
				Backoff: controlplane.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond},
			})
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
}

// relayNode starts a sidecar of liveTier without L2, pod pod, against the
// control plane at addr, with the tier's invalidation key and purge
// token, PURGE on the serving port on.
func relayNode(t *testing.T, upstream, addr, pod string, extra ...string) *node {
	t.Helper()
	return relayNodeLogging(t, io.Discard, upstream, addr, pod, extra...)
}

// relayNodeLogging is relayNode with the sidecar's log going to stderr.
func relayNodeLogging(t *testing.T, stderr io.Writer, upstream, addr, pod string, extra ...string) *node {
	t.Helper()
	cfg := smallL1 + "purge: {httpMethod: true}\n"
	args := []string{"--control-plane", addr, "--tier", "web", "--pod-namespace", "shop", "--pod-name", pod,
		"--state-dir", t.TempDir(), "--initial-config", cfg,
		"--secrets-dir", newSecretsDir(t, map[string]string{fileInvalidationKey: relayKey, filePurgeToken: methodToken}).path}
	n := startNodeLogging(t, stderr, upstream, append(args, extra...)...)
	n.waitReady(t)
	return n
}

// waitSubscribers waits until the planes hold n subscriptions of liveTier.
func waitRelaySubscribers(t *testing.T, n int, planes ...*relayPlane) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got := 0
		for _, p := range planes {
			got += p.relay.Subscribers(liveTier)
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d relay subscriptions of %s after 10s, want %d", got, liveTier, n)
		}
	}
}

// waitPurged waits until every node's purge count is above before's.
func waitPurged(t *testing.T, nodes []*node, before []float64) {
	t.Helper()
	for i, n := range nodes {
		for deadline := time.Now().Add(5 * time.Second); n.metric(t, "tiercache_purges_total") <= before[i]; time.Sleep(2 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("sidecar %d never applied the purge", i)
			}
		}
	}
}

func purgeCounts(t *testing.T, nodes []*node) []float64 {
	out := make([]float64, len(nodes))
	for i, n := range nodes {
		out[i] = n.metric(t, "tiercache_purges_total")
	}
	return out
}

// cached fills path into every node's L1 and checks it is a hit there.
func cached(t *testing.T, nodes []*node, path string) {
	t.Helper()
	for _, n := range nodes {
		n.get(t, path)
		if r := n.get(t, path); r.xcache != "HIT; layer=l1" {
			t.Fatalf("GET %s via %s: %q, want an L1 hit", path, n.base, r.xcache)
		}
	}
}

// gone checks that path is a miss on every node.
func gone(t *testing.T, nodes []*node, path, how string) {
	t.Helper()
	for i, n := range nodes {
		if r := n.get(t, path); r.xcache != "MISS" {
			t.Errorf("%s: sidecar %d still serves %s: %q", how, i, path, r.xcache)
		}
	}
}

func TestWithoutL2EveryPurgeEntryPointReachesEveryPod(t *testing.T) {
	cp := startRelayPlane(t, "127.0.0.1:0")
	origin := newOrigin(t, 0)
	nodes := []*node{
		relayNode(t, origin.URL, cp.addr, "web-0"),
		relayNode(t, origin.URL, cp.addr, "web-1"),
		relayNode(t, origin.URL, cp.addr, "web-2"),
	}
	waitRelaySubscribers(t, 3, cp)

	cases := []struct {
		how   string
		path  string
		purge func()
	}{
		{"PURGE on one pod's serving port", "/method", func() {
			if a := nodes[0].send(t, "PURGE", testHost, "/method", "Authorization", "Bearer "+methodToken); a.status != http.StatusOK {
				t.Fatalf("PURGE: %d %q", a.status, a.body)
			}
		}},
		{"POST /purge on another pod's admin port", "/admin", func() {
			if status := nodes[1].purgeWith(t, methodToken, `{"urls":["/admin"]}`); status != http.StatusOK {
				t.Fatalf("POST /purge: %d", status)
			}
		}},
		{"an unsafe request through a third pod", "/unsafe", func() {
			if r, err := nodes[2].do(http.MethodPost, "/unsafe"); err != nil || r.status != http.StatusOK {
				t.Fatalf("POST /unsafe: %+v %v", r, err)
			}
		}},
	}
	for _, c := range cases {
		cached(t, nodes, c.path)
		before := purgeCounts(t, nodes)
		c.purge()
		waitPurged(t, nodes, before)
		gone(t, nodes, c.path, c.how)
	}
}

func TestWithoutL2APurgeReachesThePodsOfEveryOperatorReplica(t *testing.T) {
	one, two := startRelayPlane(t, "127.0.0.1:0"), startRelayPlane(t, "127.0.0.1:0")
	linkPeers(t, one, two)
	origin := newOrigin(t, 0)
	nodes := []*node{
		relayNode(t, origin.URL, one.addr, "web-0"),
		relayNode(t, origin.URL, two.addr, "web-1"),
		relayNode(t, origin.URL, two.addr, "web-2"),
	}
	waitRelaySubscribers(t, 3, one, two)
	for i, via := range []*node{nodes[0], nodes[2]} {
		path := fmt.Sprint("/r", i)
		cached(t, nodes, path)
		before := purgeCounts(t, nodes)
		if status := via.purgeWith(t, methodToken, `{"urls":["`+path+`"]}`); status != http.StatusOK {
			t.Fatalf("POST /purge: %d", status)
		}
		waitPurged(t, nodes, before)
		gone(t, nodes, path, fmt.Sprint("a purge through replica ", i+1))
	}
}

func TestWithoutL2AForgedRelayedPurgeIsRefused(t *testing.T) {
	cp := startRelayPlane(t, "127.0.0.1:0")
	origin := newOrigin(t, 0)
	n := relayNode(t, origin.URL, cp.addr, "web-0")
	waitRelaySubscribers(t, 1, cp)
	cached(t, []*node{n}, "/kept")

	// Anyone who gets through to the relay as a sidecar of the tier (here
	// the control plane authenticates nobody) can publish; only messages
	// sealed with the tier's key are applied.
	c, err := controlplane.NewRelayClient(controlplane.RelayClientOptions{Target: cp.addr, Namespace: "shop", Pod: "intruder", Tier: "web"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, forged := range []struct{ msg, reason string }{
		{`{"from":"intruder","all":true}`, "unsigned"},
		{`{"ts":` + fmt.Sprint(time.Now().UnixMilli()) + `,"nonce":"0123456789abcdef0123456789abcdef","macs":["00"],"msg":{"from":"intruder","all":true}}`, "bad_mac"},
	} {
		purges, refused := n.metric(t, "tiercache_purges_total"), n.refused(t, forged.reason)
		if err := c.Publish(context.Background(), []byte(forged.msg)); err != nil {
			t.Fatal(err)
		}
		if n.appliedOrRefused(t, purges, refused, forged.reason) {
			t.Fatalf("a forged message (%s) was applied", forged.reason)
		}
	}
	n.expect(t, "/kept", "HIT; layer=l1", "/kept v1")
}

func TestWithoutL2APurgeThroughOnePodStopsAnotherPodsFill(t *testing.T) {
	cp := startRelayPlane(t, "127.0.0.1:0")
	started, gate := make(chan struct{}, 4), make(chan struct{})
	var count atomic.Int64
	origin := newRawOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		v := count.Add(1)
		if v == 1 {
			started <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Cache-Control", "max-age=300")
		fmt.Fprintf(w, "v%d", v)
	})
	a := relayNode(t, origin.URL, cp.addr, "web-0")
	b := relayNode(t, origin.URL, cp.addr, "web-1")
	waitRelaySubscribers(t, 2, cp)

	fill := make(chan reply, 1)
	go func() { r, _ := b.do(http.MethodGet, "/slow"); fill <- r }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("B's fill did not reach the origin")
	}
	before := purgeCounts(t, []*node{b})
	if status := a.purgeWith(t, methodToken, `{"urls":["/slow"]}`); status != http.StatusOK {
		t.Fatalf("purge: %d", status)
	}
	waitPurged(t, []*node{b}, before)
	close(gate)
	select {
	case r := <-fill:
		if r.status != http.StatusOK || r.body != "v1" {
			t.Fatalf("B's overtaken fill answered %d %q, want 200 v1", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B's fill never answered")
	}
	// B did not store what it fetched before the purge.
	b.expect(t, "/slow", "MISS", "v2")
}

func TestWithoutL2ALostRelaySubscriptionClearsL1(t *testing.T) {
	cp := startRelayPlane(t, "127.0.0.1:0")
	origin := newOrigin(t, 0)
	logs := &logBuffer{}
	n := startNodeLogging(t, logs, origin.URL, "--control-plane", cp.addr, "--tier", "web", "--pod-namespace", "shop", "--pod-name", "web-0",
		"--state-dir", t.TempDir(), "--initial-config", smallL1, "--log-level", "info", "--log-format", "json",
		"--secrets-dir", newSecretsDir(t, map[string]string{fileInvalidationKey: relayKey}).path)
	n.waitReady(t)
	waitRelaySubscribers(t, 1, cp)
	cached(t, []*node{n}, "/a")

	// The operator restarts: messages published meanwhile are lost, so
	// the sidecar cannot keep what it holds.
	addr := cp.addr
	cp.stop()
	cp = startRelayPlane(t, addr)
	waitRelaySubscribers(t, 1, cp)
	for deadline := time.Now().Add(5 * time.Second); len(logs.records("resubscribed to invalidations; L1 cleared, messages may have been missed")) == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the sidecar resubscribed without clearing its L1")
		}
	}
	n.expect(t, "/a", "MISS", "/a v2")
	if got := n.metric(t, "tiercache_relay_resubscriptions_total"); got != 1 {
		t.Errorf("tiercache_relay_resubscriptions_total = %v, want 1", got)
	}
}

// TestRelayLatencyToTheLastPod measures how long a purge through one
// sidecar takes to be applied by every other sidecar of the tier, with
// the sidecars split between two operator replicas (docs/benchmarks.md).
func TestRelayLatencyToTheLastPod(t *testing.T) {
	if testing.Short() {
		t.Skip("measurement")
	}
	one, two := startRelayPlane(t, "127.0.0.1:0"), startRelayPlane(t, "127.0.0.1:0")
	linkPeers(t, one, two)
	origin := newOrigin(t, 0)
	var nodes []*node
	for i := range 6 {
		addr := one.addr
		if i%2 == 1 {
			addr = two.addr
		}
		nodes = append(nodes, relayNode(t, origin.URL, addr, fmt.Sprint("web-", i)))
	}
	waitRelaySubscribers(t, len(nodes), one, two)
	const rounds = 30
	var took []time.Duration
	for i := range rounds {
		before := purgeCounts(t, nodes)
		start := time.Now()
		if status := nodes[i%len(nodes)].purgeWith(t, methodToken, fmt.Sprintf(`{"urls":["/l%d"]}`, i)); status != http.StatusOK {
			t.Fatalf("purge: %d", status)
		}
		waitPurged(t, nodes, before)
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	t.Logf("purge to the last of %d pods (2 replicas), %d rounds: p50 %s, max %s (includes polling every pod's /metrics)",
		len(nodes), rounds, took[len(took)/2].Round(10*time.Microsecond), took[len(took)-1].Round(10*time.Microsecond))
}

func TestARelayedSidecarWithoutAnInvalidationKeyWarnsThatTheChannelIsUnauthenticated(t *testing.T) {
	cp := startRelayPlane(t, "127.0.0.1:0")
	for _, c := range []struct {
		name  string
		files map[string]string
		warns bool
	}{
		{"without a key it warns", map[string]string{}, true},
		{"with a key it does not", map[string]string{fileInvalidationKey: relayKey}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &logBuffer{}
			n := startNodeLogging(t, logs, plainOrigin(t), "--control-plane", cp.addr, "--tier", "web", "--pod-namespace", "shop", "--pod-name", "web-0",
				"--state-dir", t.TempDir(), "--initial-config", smallL1, "--secrets-dir", newSecretsDir(t, c.files).path)
			n.shutdown(t)
			if got := strings.Contains(logs.String(), "the invalidation channel is unauthenticated"); got != c.warns {
				t.Fatalf("warned %v, want %v; log:\n%s", got, c.warns, logs.String())
			}
		})
	}
}

func TestWithoutL2AnL1RebuiltByAPushedConfigStillReceivesPurges(t *testing.T) {
	cp := startRelayPlane(t, "127.0.0.1:0")
	origin := newOrigin(t, 0)
	logs := []*logBuffer{{}, {}}
	a := relayNodeLogging(t, logs[0], origin.URL, cp.addr, "web-0", "--log-level", "debug", "--log-format", "json")
	b := relayNodeLogging(t, logs[1], origin.URL, cp.addr, "web-1", "--log-level", "debug", "--log-format", "json")
	waitRelaySubscribers(t, 2, cp)

	// A new L1 size: both sidecars build a new generation, which
	// subscribes to the relay on its own before the old one lets go.
	v := cp.publish(t, "l1: {maxSize: 48Mi, shards: 32}\npurge: {httpMethod: true}\n")
	a.waitVersion(t, v)
	b.waitVersion(t, v)
	// The previous generation is closed once the new one has subscribed.
	for i, l := range logs {
		for deadline := time.Now().Add(15 * time.Second); len(l.records("config change: previous data plane closed")) == 0; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("sidecar %d never closed its previous data plane", i)
			}
		}
	}
	waitRelaySubscribers(t, 2, cp)
	nodes := []*node{a, b}
	cached(t, nodes, "/rebuilt")
	before := purgeCounts(t, nodes)
	if status := a.purgeWith(t, methodToken, `{"urls":["/rebuilt"]}`); status != http.StatusOK {
		t.Fatalf("purge: %d", status)
	}
	waitPurged(t, nodes, before)
	gone(t, nodes, "/rebuilt", "a purge after the L1 rebuild")
}
