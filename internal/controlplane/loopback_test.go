package controlplane

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Generous bounds for a loaded 2-core machine under -race; the assertions
// that matter have their own numbers.
const waitLong = 10 * time.Second

func publish(t testing.TB, s *testServer, tier string, seconds int) string {
	t.Helper()
	v, changed, err := s.Publish(context.Background(), tier, ttlConfig(seconds))
	if err != nil {
		t.Fatal(err)
	}
	if !changed {
		t.Fatalf("publishing ttl %ds to %s changed nothing", seconds, tier)
	}
	return v
}

func TestPublishIsAppliedWithinOneSecond(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	notify := make(chan applied, 4)
	file := filepath.Join(t.TempDir(), "last-good.json")
	sc := startSidecar(t, srv.addr, "shop", "frontend", "web-0", notify,
		func(o *ClientOptions) { o.LastGoodPath = file })
	eventually(t, waitLong, func() bool { return srv.Connected("shop/frontend") == 1 }, "the sidecar did not connect")

	start := time.Now()
	v := publish(t, srv, "shop/frontend", 60)
	got := nextApplied(t, notify, "the published config")
	if lat := got.at.Sub(start); lat > time.Second {
		t.Errorf("applied %s after Publish, want within 1s", lat)
	}
	if got.version != v || got.cfg.Defaults.FallbackTTL.Std() != time.Minute {
		t.Errorf("applied version %s ttl %s, want %s ttl 1m", got.version, got.cfg.Defaults.FallbackTTL, v)
	}

	// The sidecar persisted it before acknowledging.
	eventually(t, waitLong, func() bool { return sc.State().Version == v }, "state version")
	last, err := tierconfig.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if Version(last) != v {
		t.Errorf("the last good file holds version %s, want %s", Version(last), v)
	}
	if st := sc.State(); !st.Connected || st.Responses != 1 || st.NACKs != 0 || st.AppliedAt.IsZero() {
		t.Errorf("state = %+v, want connected, 1 response, no NACK, an applied time", st)
	}
	if got := testutil.ToFloat64(sc.appliedGauge); got < float64(start.Unix()) {
		t.Errorf("tiercache_config_applied_timestamp_seconds = %v, want >= %d", got, start.Unix())
	}
	if got := testutil.ToFloat64(sc.connectedGauge); got != 1 {
		t.Errorf("tiercache_control_plane_connected = %v, want 1", got)
	}

	// Publishing the same config again sends nothing.
	v2, changed, err := srv.Publish(context.Background(), "shop/frontend", ttlConfig(60))
	if err != nil || changed || v2 != v {
		t.Fatalf("republishing: version %s changed %v err %v, want %s false nil", v2, changed, err, v)
	}
	// The stream is ordered: had the unchanged publish been sent, it
	// would arrive before the next change, which is the barrier.
	v3 := publish(t, srv, "shop/frontend", 61)
	if a := nextApplied(t, notify, "the next change"); a.version != v3 {
		t.Fatalf("applied %s, want %s", a.version, v3)
	}
	if n := sc.State().Responses; n != 2 {
		t.Errorf("the sidecar received %d responses, want 2 (the first and the next change): an unchanged publish was sent", n)
	}
}

func TestPublishRefusesInvalidConfig(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	if _, _, err := srv.Publish(context.Background(), "shop/frontend", invalidConfig()); err == nil || !strings.Contains(err.Error(), "l1.shards") {
		t.Errorf("Publish(invalid) error = %v, want one naming l1.shards", err)
	}
	if _, _, err := srv.Publish(context.Background(), "frontend", ttlConfig(1)); err == nil {
		t.Error("Publish accepted a tier key without a namespace")
	}
	if srv.Version("shop/frontend") != "" {
		t.Error("a refused config was published")
	}
}

func TestNACKIsParkedUntilNextPublish(t *testing.T) {
	var (
		hookMu sync.Mutex
		hooked []NACK
	)
	srv := startServer(t, "127.0.0.1:0", Options{OnNACK: func(n NACK) {
		hookMu.Lock()
		hooked = append(hooked, n)
		hookMu.Unlock()
	}})
	notify := make(chan applied, 4)
	sc := startSidecar(t, srv.addr, "shop", "frontend", "web-0", notify)
	v1 := publish(t, srv, "shop/frontend", 60)
	nextApplied(t, notify, "the first config")

	// Publish refuses an invalid config, so push the resource by hand.
	bad, badVersion := mustEncode(t, "shop/frontend", invalidConfig())
	srv.publishResource("shop/frontend", "shop/frontend", badVersion, bad)
	eventually(t, waitLong, func() bool { return sc.State().NACKs > 0 }, "the sidecar did not NACK")
	// The server has taken the NACK once it counts it and has parked the
	// watch. Whether it resends the NACKed version shows at the next
	// publish below: the stream is ordered, so a resend would arrive, and
	// be NACKed again, before it.
	eventually(t, waitLong, func() bool {
		return srv.NACKs("shop/frontend").Total > 0 && srv.cache.watchCount("shop/frontend") == 1
	}, "the server did not take the NACK and park the watch")
	st := sc.State()
	if st.Responses != 2 {
		t.Errorf("the sidecar received %d responses, want 2 (the good one and the NACKed one, not resent)", st.Responses)
	}
	if st.NACKs != 1 || st.Version != v1 || !strings.Contains(st.LastNACK, "l1.shards") {
		t.Errorf("state = %+v, want 1 NACK naming l1.shards and %s still in effect", st, v1)
	}
	if n := len(sc.applies()); n != 1 {
		t.Errorf("Apply was called %d times, want 1", n)
	}
	nacks := srv.NACKs("shop/frontend")
	if nacks.Total != 1 || nacks.Last.Version != badVersion || nacks.Last.Node != "shop/web-0" ||
		!strings.Contains(nacks.Last.Message, "l1.shards") || nacks.Last.At.IsZero() {
		t.Errorf("server NACKs = %+v, want 1 for %s from shop/web-0 naming l1.shards", nacks, badVersion)
	}
	if got := testutil.ToFloat64(srv.nackCounter.WithLabelValues("shop", "frontend")); got != 1 {
		t.Errorf("tiercache_xds_nacks_total = %v, want 1", got)
	}
	if got := testutil.ToFloat64(sc.nackCounter); got != 1 {
		t.Errorf("tiercache_config_nacks_total = %v, want 1", got)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(hooked) != 1 || hooked[0] != nacks.Last {
		t.Errorf("OnNACK was called %d times, want once with %+v", len(hooked), nacks.Last)
	}
	if n := srv.cache.watchCount("shop/frontend"); n != 1 {
		t.Errorf("%d parked watches, want 1", n)
	}

	// The next good publish reaches it.
	v2 := publish(t, srv, "shop/frontend", 120)
	if a := nextApplied(t, notify, "the good config after a NACK"); a.version != v2 {
		t.Errorf("applied %s, want %s", a.version, v2)
	}
	if st := sc.State(); st.Responses != 3 || st.NACKs != 1 {
		t.Errorf("state = %+v, want 3 responses and 1 NACK: the NACKed version was resent", st)
	}
}

func TestApplyErrorNACKs(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	notify := make(chan applied, 4)
	sc := startSidecar(t, srv.addr, "shop", "frontend", "web-0", notify)
	v1 := publish(t, srv, "shop/frontend", 60)
	nextApplied(t, notify, "the first config")
	_, v2, _ := Encode("shop/frontend", ttlConfig(120))
	sc.mu.Lock()
	sc.fail = v2
	sc.mu.Unlock()
	publish(t, srv, "shop/frontend", 120)
	eventually(t, waitLong, func() bool { return srv.NACKs("shop/frontend").Total == 1 }, "no NACK reached the server")
	if st := sc.State(); st.Version != v1 || st.NACKs != 1 || !strings.Contains(st.LastNACK, "apply: refused by the test") {
		t.Errorf("state = %+v, want %s in effect and the Apply error as the NACK reason", st, v1)
	}
	if msg := srv.NACKs("shop/frontend").Last.Message; !strings.Contains(msg, "refused by the test") {
		t.Errorf("server's last NACK = %q, want the Apply error", msg)
	}
}

func TestSidecarSurvivesServerRestart(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	notify := make(chan applied, 4)
	file := filepath.Join(t.TempDir(), "last-good.json")
	sc := startSidecar(t, srv.addr, "shop", "frontend", "web-0", notify,
		func(o *ClientOptions) { o.LastGoodPath = file })
	v1 := publish(t, srv, "shop/frontend", 60)
	nextApplied(t, notify, "the first config")

	srv.stop()
	eventually(t, waitLong, func() bool { return !sc.State().Connected }, "the sidecar did not notice the server going away")
	// Down: the config stays in effect and on disk, and reconnection
	// attempts continue.
	time.Sleep(300 * time.Millisecond)
	if st := sc.State(); st.Version != v1 || st.Connected {
		t.Errorf("while the server is down state = %+v, want %s in effect, disconnected", st, v1)
	}
	if last, err := tierconfig.Load(file); err != nil || Version(last) != v1 {
		t.Errorf("last good file: version %s err %v, want %s", Version(last), err, v1)
	}

	// A new operator process on the same address publishes the same
	// config: the sidecar reconnects, receives it, and does not re-apply.
	srv2 := startServer(t, srv.addr, Options{})
	publish(t, srv2, "shop/frontend", 60)
	eventually(t, waitLong, func() bool { return srv2.Connected("shop/frontend") == 1 }, "the sidecar did not reconnect")
	eventually(t, waitLong, func() bool { return sc.State().Responses == 2 }, "the restarted server sent nothing")
	if n := len(sc.applies()); n != 1 {
		t.Errorf("Apply called %d times, want 1: the same version was applied again", n)
	}

	v2 := publish(t, srv2, "shop/frontend", 120)
	if a := nextApplied(t, notify, "an edit after the restart"); a.version != v2 {
		t.Errorf("applied %s, want %s", a.version, v2)
	}
}

func TestSidecarStartsBeforeServer(t *testing.T) {
	// Reserve an address, then free it for the server to come.
	srv := startServer(t, "127.0.0.1:0", Options{})
	addr := srv.addr
	srv.stop()

	notify := make(chan applied, 4)
	initial := Version(ttlConfig(60))
	sc := startSidecar(t, addr, "shop", "frontend", "web-0", notify,
		func(o *ClientOptions) { o.InitialVersion = initial })
	time.Sleep(200 * time.Millisecond)
	if st := sc.State(); st.Connected || st.Version != initial {
		t.Fatalf("with no server state = %+v, want disconnected with the initial version", st)
	}
	srv2 := startServer(t, addr, Options{})
	publish(t, srv2, "shop/frontend", 60)
	eventually(t, waitLong, func() bool { return sc.State().Responses == 1 }, "no response after the server came up")
	v2 := publish(t, srv2, "shop/frontend", 120)
	if a := nextApplied(t, notify, "the config published after the server came up"); a.version != v2 {
		t.Errorf("applied %s first, want %s: the initial version was re-applied", a.version, v2)
	}
}

func TestClearKeepsWatches(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	notify := make(chan applied, 4)
	sc := startSidecar(t, srv.addr, "shop", "frontend", "web-0", notify)
	v1 := publish(t, srv, "shop/frontend", 60)
	nextApplied(t, notify, "the first config")
	srv.Clear("shop/frontend")
	if srv.Version("shop/frontend") != "" {
		t.Error("Clear left a version")
	}
	time.Sleep(200 * time.Millisecond)
	if st := sc.State(); st.Version != v1 || st.Responses != 1 {
		t.Errorf("after Clear state = %+v, want %s kept and nothing sent", st, v1)
	}
	// Re-created: the connected sidecar hears of it.
	v2 := publish(t, srv, "shop/frontend", 120)
	if a := nextApplied(t, notify, "a tier published again after Clear"); a.version != v2 {
		t.Errorf("applied %s, want %s", a.version, v2)
	}
}

func TestConnectedCountsFollowStreams(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	gauge := func(tier string) float64 {
		return testutil.ToFloat64(srv.connectedGauge.WithLabelValues(tierLabels(tier)...))
	}
	want := func(a, b int) {
		t.Helper()
		eventually(t, waitLong, func() bool {
			return srv.Connected("shop/a") == a && srv.Connected("shop/b") == b
		}, "connected a=%d b=%d, want %d %d", srv.Connected("shop/a"), srv.Connected("shop/b"), a, b)
		if gauge("shop/a") != float64(a) || gauge("shop/b") != float64(b) {
			t.Errorf("tiercache_connected_sidecars a=%v b=%v, want %d %d", gauge("shop/a"), gauge("shop/b"), a, b)
		}
	}
	a0 := startSidecar(t, srv.addr, "shop", "a", "a-0", nil)
	a1 := startSidecar(t, srv.addr, "shop", "a", "a-1", nil)
	a2 := startSidecar(t, srv.addr, "shop", "a", "a-2", nil)
	b0 := startSidecar(t, srv.addr, "shop", "b", "b-0", nil)
	want(3, 1)
	b1 := startSidecar(t, srv.addr, "shop", "b", "b-1", nil)
	want(3, 2)
	a0.stop()
	a1.stop()
	want(1, 2)
	b0.stop()
	b1.stop()
	a2.stop()
	want(0, 0)
	if got := srv.Connected("other/tier"); got != 0 {
		t.Errorf("Connected of an unknown tier = %d", got)
	}
}

func TestServeStopsWithinDeadline(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{ShutdownTimeout: 2 * time.Second})
	for i := range 3 {
		startSidecar(t, srv.addr, "shop", "frontend", "web-"+string(rune('0'+i)), nil)
	}
	eventually(t, waitLong, func() bool { return srv.Connected("shop/frontend") == 3 }, "sidecars did not connect")
	start := time.Now()
	srv.stop()
	if d := time.Since(start); d > 2*time.Second+time.Second {
		t.Errorf("Serve took %s to return, want about the 2s shutdown timeout at most", d)
	}
	eventually(t, waitLong, func() bool { return srv.Connected("shop/frontend") == 0 }, "streams still counted after stop")
}

func TestServerRefusesNodesWithoutTier(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	sc := startSidecar(t, srv.addr, "shop", "frontend", "web-0", nil)
	// A client always sends a valid cluster; check the cache's own guard.
	cancel, err := srv.cache.CreateWatch(sc.request("", "", nil), nil, nil)
	if err != nil {
		t.Fatalf("a valid request was refused: %v", err)
	}
	cancel()
	req := sc.request("", "", nil)
	req.Node.Cluster = "frontend"
	if _, err := srv.cache.CreateWatch(req, nil, nil); err == nil || !strings.Contains(err.Error(), "node.cluster") {
		t.Errorf("CreateWatch with a bad cluster: %v, want an error naming node.cluster", err)
	}

	// Over the wire the stream is refused with a status naming the field.
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "node.cluster") {
		t.Errorf("a stream with a bad cluster got %v, want InvalidArgument naming node.cluster", err)
	}
	if n := srv.Connected(""); n != 0 {
		t.Errorf("a refused stream is counted as connected")
	}

	req = sc.request("", "", nil)
	req.TypeUrl = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	if _, err := srv.cache.CreateWatch(req, nil, nil); err == nil || !strings.Contains(err.Error(), "unsupported resource type") {
		t.Errorf("CreateWatch for clusters: %v, want unsupported resource type", err)
	}
}

// The sidecar reads the persisted file back with tierconfig.Load at start
// (sidecar.startupConfig), and passes over a missing one.
func TestASavedLastGoodConfigLoadsBackWithItsVersion(t *testing.T) {
	dir := t.TempDir()
	if _, err := tierconfig.Load(filepath.Join(dir, "none.json")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
	file := filepath.Join(dir, "last-good.json")
	c := richConfig()
	if err := saveLastGood(file, c); err != nil {
		t.Fatal(err)
	}
	if err := saveLastGood(file, c); err != nil { // over an existing file
		t.Fatal(err)
	}
	got, err := tierconfig.Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if Version(got) != Version(c) {
		t.Errorf("loaded version %s, saved %s", Version(got), Version(c))
	}
	entries, _ := filepath.Glob(filepath.Join(dir, "*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(entries) != 1 || len(hidden) != 0 {
		t.Errorf("directory holds %v %v, want only the file (no temp files)", entries, hidden)
	}
}
