package sidecar

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
	"google.golang.org/grpc"

	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// These tests run sidecars against a real control-plane server (the
// operator's end of the wire, internal/controlplane) on loopback and
// publish configs to them, as the operator's controller does.

const (
	liveTier = "shop/web" // the tier key of every sidecar below
	// applyWithin bounds how long a published config may take to be in
	// effect (generous for a loaded 2-core machine under -race).
	applyWithin = 5 * time.Second
)

// cpServer is a control-plane server on a loopback port.
type cpServer struct {
	*controlplane.Server
	addr string
	stop func()
}

func startControlPlane(t *testing.T, grpcOpts ...grpc.ServerOption) *cpServer {
	t.Helper()
	return startControlPlaneWith(t, controlplane.Options{GRPCOptions: grpcOpts})
}

// startControlPlaneWith is startControlPlane with more options.
func startControlPlaneWith(t *testing.T, opts controlplane.Options) *cpServer {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	opts.ShutdownTimeout = 2 * time.Second
	srv, err := controlplane.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, l) }()
	var once sync.Once
	s := &cpServer{Server: srv, addr: l.Addr().String()}
	s.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("control plane Serve: %v", err)
			}
		})
	}
	t.Cleanup(s.stop)
	return s
}

// publish publishes the YAML config to liveTier and returns its version.
func (s *cpServer) publish(t *testing.T, yaml string) string {
	t.Helper()
	cfg, err := tierconfig.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("test config: %v", err)
	}
	v, changed, err := s.Publish(context.Background(), liveTier, cfg)
	if err != nil || !changed {
		t.Fatalf("publish: changed %v, err %v", changed, err)
	}
	return v
}

// liveArgs are the flags of an injected sidecar of liveTier talking to
// the control plane at addr and keeping its last good config in stateDir.
func liveArgs(addr, stateDir, initialConfig string) []string {
	return []string{"--control-plane", addr, "--tier", "web", "--pod-namespace", "shop", "--pod-name", "web-0",
		"--state-dir", stateDir, "--initial-config", initialConfig}
}

// waitVersion waits until n reports version v as the config in effect and
// returns how long that took.
func (n *node) waitVersion(t *testing.T, v string) time.Duration {
	t.Helper()
	start := time.Now()
	for time.Since(start) < applyWithin {
		if n.metric(t, `tiercache_config_info{version="`+v+`"}`) == 1 {
			return time.Since(start)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("sidecar %s did not apply version %.12s within %s", n.base, v, applyWithin)
	return 0
}

// liveOrigin answers "<path> v<n>" (n counting that path's requests):
// fresh for 5 minutes under /fresh/, without any freshness information
// elsewhere (so never served from cache unless a rule sets a TTL). /slow
// sends half of a 256 KiB body, then waits for release before the rest.
type liveOrigin struct {
	*countingOrigin
	started chan struct{} // /slow has sent its first half
	release chan struct{}
}

const slowHalf = 128 << 10

func newLiveOrigin(t *testing.T) *liveOrigin {
	t.Helper()
	o := &liveOrigin{
		countingOrigin: &countingOrigin{counts: map[string]int{}},
		started:        make(chan struct{}, 1),
		release:        make(chan struct{}),
	}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.counts[r.Method+" "+r.URL.Path]++
		n := o.counts[r.Method+" "+r.URL.Path]
		o.mu.Unlock()
		switch {
		case r.URL.Path == "/slow":
			w.Header().Set("Content-Length", fmt.Sprint(2*slowHalf))
			_, _ = w.Write([]byte(strings.Repeat("a", slowHalf)))
			w.(http.Flusher).Flush()
			o.started <- struct{}{}
			select {
			case <-o.release:
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write([]byte(strings.Repeat("b", slowHalf)))
			return
		case strings.HasPrefix(r.URL.Path, "/fresh/"):
			w.Header().Set("Cache-Control", "max-age=300")
		}
		_, _ = fmt.Fprintf(w, "%s v%d", r.URL.Path, n)
	}))
	t.Cleanup(o.Close)
	return o
}

// logBuffer collects a sidecar's JSON log.
type logBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records returns the log records whose message is msg.
func (l *logBuffer) records(msg string) []map[string]any {
	l.mu.Lock()
	text := l.b.String()
	l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(text, "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == msg {
			out = append(out, rec)
		}
	}
	return out
}

// applied returns what the sidecar logged it rebuilt for each config
// applied from the control plane.
func (l *logBuffer) applied() []string {
	var out []string
	for _, rec := range l.records("config applied") {
		out = append(out, fmt.Sprint(rec["rebuilt"]))
	}
	return out
}

// verifyNoLeaks checks, after every cleanup registered later has run,
// that the test left no goroutine behind.
func verifyNoLeaks(t *testing.T) {
	opt := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, opt) })
}

func TestAPublishedRuleChangesARunningSidecarWithoutRestart(t *testing.T) {
	cp := startControlPlane(t)
	origin := newLiveOrigin(t)
	logs := &logBuffer{}
	n := startNodeLogging(t, logs, origin.URL, append(liveArgs(cp.addr, t.TempDir(), smallL1), "--log-level", "info")...)
	n.waitReady(t)

	n.expect(t, "/fresh/kept", "MISS", "/fresh/kept v1")
	n.expect(t, "/a", "MISS", "/a v1")
	n.expect(t, "/a", "MISS", "/a v2")

	v := cp.publish(t, smallL1+"rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n")
	took := n.waitVersion(t, v)
	n.expect(t, "/a", "MISS", "/a v3")
	n.expect(t, "/a", "HIT; layer=l1", "/a v3")
	// Only the rules changed: L1 was kept.
	n.expect(t, "/fresh/kept", "HIT; layer=l1", "/fresh/kept v1")
	if got := origin.count("GET", "/a"); got != 3 {
		t.Errorf("the origin got %d requests for /a, want 3", got)
	}
	if got := logs.applied(); len(got) != 1 || got[0] != "rules" {
		t.Errorf("logged config applied with rebuilt %q, want [rules]", got)
	}
	t.Logf("published rule in effect %s after Publish", took)
}

func TestAConfigTheSidecarCannotApplyIsNACKedAndTheOldOneKeepsServing(t *testing.T) {
	cp := startControlPlane(t)
	origin := newLiveOrigin(t)
	n := startNode(t, origin.URL, liveArgs(cp.addr, t.TempDir(), smallL1)...)
	good := smallL1 + "rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n"
	v1 := cp.publish(t, good)
	n.waitVersion(t, v1)
	n.expect(t, "/a", "MISS", "/a v1")

	// Valid (Publish and the sidecar's Decode accept it), but no L2
	// client can be built from it: the CA bundle holds no certificate.
	cp.publish(t, good+"l2: {addresses: ['127.0.0.1:1'], tls: true, caCert: not a certificate}\n")
	deadline := time.Now().Add(applyWithin)
	for n.metric(t, "tiercache_config_nacks_total") != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("tiercache_config_nacks_total = %v after %s, want 1", n.metric(t, "tiercache_config_nacks_total"), applyWithin)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if last := cp.NACKs(liveTier).Last; !strings.Contains(last.Message, "l2.caCert") {
		t.Errorf("the control plane got NACK %q, want it to name l2.caCert", last.Message)
	}
	// No resend storm, the old config in effect, still serving from L1.
	time.Sleep(200 * time.Millisecond)
	if got := n.metric(t, "tiercache_config_nacks_total"); got != 1 {
		t.Errorf("tiercache_config_nacks_total = %v, want 1", got)
	}
	if got := n.metric(t, `tiercache_config_info{version="`+v1+`"}`); got != 1 {
		t.Errorf("config_info for the good version = %v, want 1", got)
	}
	n.expect(t, "/a", "HIT; layer=l1", "/a v1")
}

func TestAnL1ResizeLetsTheRequestInFlightFinishAndServesNewRequestsFromANewL1(t *testing.T) {
	verifyNoLeaks(t)
	cp := startControlPlane(t)
	origin := newLiveOrigin(t)
	logs := &logBuffer{}
	n := startNodeLogging(t, logs, origin.URL, append(liveArgs(cp.addr, t.TempDir(), smallL1), "--log-level", "debug")...)
	n.expect(t, "/fresh/x", "MISS", "/fresh/x v1")
	n.expect(t, "/fresh/x", "HIT; layer=l1", "/fresh/x v1")
	if got := n.metric(t, "tiercache_l1_entries"); got != 1 {
		t.Fatalf("tiercache_l1_entries = %v before the resize, want 1", got)
	}

	type result struct {
		status int
		body   string
		err    error
	}
	slow := make(chan result, 1)
	go func() {
		r, err := n.do(http.MethodGet, "/slow")
		slow <- result{r.status, r.body, err}
	}()
	select {
	case <-origin.started:
	case <-time.After(applyWithin):
		t.Fatal("the slow request did not reach the origin")
	}

	v := cp.publish(t, "l1: {maxSize: 16Mi, shards: 16}\n")
	n.waitVersion(t, v)
	// New requests go to the new, empty L1 while /slow is still being
	// served by the old generation.
	if got := n.metric(t, "tiercache_l1_entries"); got != 0 {
		t.Errorf("tiercache_l1_entries = %v right after the resize, want 0 (a new L1)", got)
	}
	n.expect(t, "/fresh/x", "MISS", "/fresh/x v2")
	n.expect(t, "/fresh/x", "HIT; layer=l1", "/fresh/x v2")
	if got := logs.applied(); len(got) != 1 || got[0] != "l1" {
		t.Errorf("logged config applied with rebuilt %q, want [l1]", got)
	}
	// The old generation waits for the request it is serving.
	time.Sleep(50 * time.Millisecond)
	if got := logs.records("config change: previous data plane closed"); len(got) != 0 {
		t.Fatalf("the previous data plane was closed while it still served /slow")
	}

	close(origin.release)
	select {
	case r := <-slow:
		want := strings.Repeat("a", slowHalf) + strings.Repeat("b", slowHalf)
		if r.err != nil || r.status != http.StatusOK || r.body != want {
			t.Fatalf("the request in flight during the resize: status %d, %d bytes, err %v; want 200 and all %d bytes",
				r.status, len(r.body), r.err, len(want))
		}
	case <-time.After(applyWithin):
		t.Fatal("the request in flight during the resize did not finish")
	}
	if got := n.metric(t, "tiercache_l1_entries"); got != 1 {
		t.Errorf("tiercache_l1_entries = %v, want 1 (the new L1's entry only)", got)
	}
	deadline := time.Now().Add(applyWithin)
	for len(logs.records("config change: previous data plane closed")) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the previous data plane was not closed within %s of its last request", applyWithin)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSwitchingL2OnLiveSharesEntriesWithTheTiersOtherSidecars(t *testing.T) {
	verifyNoLeaks(t)
	rs := testredis.Start(t)
	cp := startControlPlane(t)
	origin := newLiveOrigin(t)
	withL2 := smallL1 + fmt.Sprintf("l2: {addresses: ['%s']}\n", rs.Addr())

	logs := &logBuffer{}
	a := startNodeLogging(t, logs, origin.URL, append(liveArgs(cp.addr, t.TempDir(), smallL1), "--log-level", "info")...)
	a.expect(t, "/fresh/before", "MISS", "/fresh/before v1")
	v := cp.publish(t, withL2)
	a.waitVersion(t, v)
	// Only L2 changed: A kept its L1.
	a.expect(t, "/fresh/before", "HIT; layer=l1", "/fresh/before v1")
	if got := logs.applied(); len(got) != 1 || got[0] != "l2" {
		t.Errorf("logged config applied with rebuilt %q, want [l2]", got)
	}

	// B, standalone, is a pod of the same tier: its identity gives it the
	// same key prefix.
	b := startNode(t, origin.URL, "--config", writeConfig(t, withL2), "--tier", "web", "--pod-namespace", "shop", "--pod-name", "web-1")
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())
	waitSubscribers(t, rdb, 2) // A and B
	a.expect(t, "/fresh/shared", "MISS", "/fresh/shared v1")
	waitInL2(t, rdb, "tc:shop/web:", "/fresh/shared")
	b.expect(t, "/fresh/shared", "HIT; layer=l2", "/fresh/shared v1")
	if got := origin.count("GET", "/fresh/shared"); got != 1 {
		t.Errorf("the origin got %d requests for /fresh/shared, want 1", got)
	}

	// And off again: the generation with L2 is closed (its subscription
	// is gone long before A stops; the leak check covers the rest).
	v = cp.publish(t, smallL1)
	a.waitVersion(t, v)
	waitSubscribers(t, rdb, 1) // B
	a.expect(t, "/fresh/shared", "HIT; layer=l1", "/fresh/shared v1")
	if got := logs.applied(); len(got) != 2 || got[1] != "l2" {
		t.Errorf("logged config applied with rebuilt %q, want [l2 l2]", got)
	}
}

// waitSubscribers waits until n clients subscribe to liveTier's
// invalidation channel.
func waitSubscribers(t *testing.T, rdb redis.UniversalClient, n int64) {
	t.Helper()
	const channel = "tc:shop/web:inval"
	var got int64
	for deadline := time.Now().Add(applyWithin); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		counts, err := rdb.PubSubNumSub(ctx, channel).Result()
		cancel()
		if got = counts[channel]; err == nil && got == n {
			return
		}
	}
	t.Fatalf("%d subscribers to %s after %s, want %d", got, channel, applyWithin, n)
}

func TestTheLastGoodConfigIsKeptAndServesARestartWhileTheControlPlaneIsDown(t *testing.T) {
	cp := startControlPlane(t)
	origin := newLiveOrigin(t)
	state := t.TempDir()
	first := startNode(t, origin.URL, liveArgs(cp.addr, state, smallL1)...)
	v := cp.publish(t, smallL1+"rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n")
	first.waitVersion(t, v)

	// The client saves a config after applying it: wait for the file.
	var got string
	var err error
	for deadline := time.Now().Add(applyWithin); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var last tierconfig.Config
		if last, err = tierconfig.Load(filepath.Join(state, LastGoodFile)); err == nil {
			if got = controlplane.Version(last); got == v {
				break
			}
		}
	}
	if got != v {
		t.Fatalf("%s holds version %.12s (%v), want %.12s", LastGoodFile, got, err, v)
	}
	if fi, err := os.Stat(filepath.Join(state, LastGoodFile)); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("%s: %v, mode %v; want private (it may hold secrets)", LastGoodFile, err, fi.Mode())
	}

	// The container restarts while the operator is away: the last good
	// config, not the pod spec's, is in effect, and the sidecar is ready.
	first.shutdown(t)
	cp.stop()
	again := startNode(t, origin.URL, liveArgs(cp.addr, state, smallL1)...)
	again.waitReady(t)
	again.expect(t, "/a", "MISS", "/a v1")
	again.expect(t, "/a", "HIT; layer=l1", "/a v1")
	if got := again.metric(t, `tiercache_config_info{version="`+v+`"}`); got != 1 {
		t.Errorf("config_info for the last good version = %v, want 1", got)
	}
}

func TestWithTheControlPlaneUnreachableTheSidecarIsReadyAndServes(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	origin := newLiveOrigin(t)
	n := startNode(t, origin.URL, liveArgs(closed, t.TempDir(),
		smallL1+"rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n")...)
	if waited := n.waitReady(t); waited > time.Second {
		t.Errorf("ready after %s, want at once", waited)
	}
	n.expect(t, "/a", "MISS", "/a v1")
	n.expect(t, "/a", "HIT; layer=l1", "/a v1")
	if got := n.metric(t, "tiercache_control_plane_connected"); got != 0 {
		t.Errorf("tiercache_control_plane_connected = %v, want 0", got)
	}
}

func TestControlPlaneNeedsTheSidecarsIdentity(t *testing.T) {
	base := []string{"--upstream", "http://127.0.0.1:1", "--control-plane", "op:18000"}
	cases := map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"no tier":            {[]string{"--pod-name", "p", "--pod-namespace", "ns"}, nil, "--control-plane needs --tier (or TIERCACHE_TIER)"},
		"no pod name":        {[]string{"--tier", "t", "--pod-namespace", "ns"}, nil, "--control-plane needs --pod-name (or TIERCACHE_POD_NAME)"},
		"no namespace":       {[]string{"--tier", "t", "--pod-name", "p"}, nil, "--control-plane needs --pod-namespace (or TIERCACHE_POD_NAMESPACE)"},
		"a slash in a name":  {[]string{"--tier", "t/x", "--pod-name", "p", "--pod-namespace", "ns"}, nil, "--tier: must not contain '/'"},
		"identity from env":  {[]string{"--tier", "t"}, map[string]string{"TIERCACHE_POD_NAME": "p", "TIERCACHE_POD_NAMESPACE": "ns"}, ""},
		"all on the command": {[]string{"--tier", "t", "--pod-name", "p", "--pod-namespace", "ns"}, nil, ""},
	}
	for name, c := range cases {
		o, err := ParseArgs(append(append([]string{}, base...), c.args...), func(k string) string { return c.env[k] }, io.Discard)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case c.want == "" && (o.PodName != "p" || o.PodNamespace != "ns" || o.ControlPlane != "op:18000"):
			t.Errorf("%s: parsed %+v", name, o)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}
