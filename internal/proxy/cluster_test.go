package proxy

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// replica is a proxy over a layered store (real L1, L2 on a real Redis)
// that shares the origin's clock, so tests age entries by moving it.
func replica(t *testing.T, redisAddr string, o *origin) *fixture {
	t.Helper()
	return replicaWith(t, redisAddr, o, nil)
}

// replicaWith is replica with a hook that completes the proxy's options.
func replicaWith(t *testing.T, redisAddr string, o *origin, opts func(*Options)) *fixture {
	t.Helper()
	compiled, err := tierconfig.Compile(tierconfig.Config{L2: tierconfig.L2{Addresses: []string{redisAddr}, Timeout: tierconfig.Duration(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	holder := tierconfig.NewHolder(compiled)
	ctx, cancel := context.WithCancel(context.Background())
	cache, err := l1.New(ctx, l1.Config{MaxSize: 16 << 20, MaxEntrySize: 64 << 10, Shards: 16, LifeWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	client, err := l2.New(l2.Config{Addrs: []string{redisAddr}, Prefix: "tc:test/cluster:", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(ctx, store.Options{L1: cache, L2: client, Timeout: time.Second, Metrics: m, Now: o.clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	up, _ := url.Parse(o.URL)
	purger := invalidate.NewPurger(cache, holder)
	po := Options{Upstream: up, Config: holder, Store: st, Invalidator: purger, Cluster: st, Metrics: m, Now: o.clock.Now}
	if opts != nil {
		opts(&po)
	}
	px, err := New(po)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(px)
	srv.Client().Transport.(*http.Transport).DisableCompression = true // as newFixtureWith
	t.Cleanup(func() {
		srv.Close()
		_ = px.Close(context.Background())
		_ = st.Close()
		_ = client.Close()
		cancel()
		cache.Close()
	})
	return &fixture{t: t, px: px, srv: srv, clock: o.clock, cache: cache, purger: purger, origin: o}
}

func TestOneRefreshPerKeyAcrossReplicas(t *testing.T) {
	redis := testredis.Start(t)
	var version atomic.Int64
	version.Store(1)
	hold := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if version.Load() > 1 {
			<-hold // keep the first refresh (and its lease) in flight
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=300")
		fmt.Fprintf(w, "v%d", version.Load())
	})
	a, b := replica(t, redis.Addr(), o), replica(t, redis.Addr(), o)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(hold) }) }
	t.Cleanup(release) // before the replicas' servers close: a failed wait must not leave a handler held

	expect(t, a.get("/k", "Host", "shop"), 200, "MISS")
	waitFor(t, func() bool { return b.get("/k", "Host", "shop").xcache() == "HIT; layer=l2" }, "B to see A's fill in L2")
	expect(t, b.get("/k", "Host", "shop"), 200, "HIT; layer=l1")

	version.Store(2)
	o.clock.Advance(20 * time.Second)
	// Both replicas serve stale and want a refresh; only one may fetch.
	expect(t, a.get("/k", "Host", "shop"), 200, "STALE; layer=l1")
	waitFor(t, func() bool { return o.count() == 2 }, "the leading refresh to reach the origin")
	expect(t, b.get("/k", "Host", "shop"), 200, "STALE; layer=l1")
	// B took a refresh slot before it answered; its refresh gives the slot
	// back once it finds A holding the key's lease and waits for A's
	// result instead of fetching (a duplicate fetch would hold the slot at
	// the held origin).
	waitFor(t, func() bool { return b.px.refreshes.n.Load() == 0 }, "B's refresh to leave the fetch to A")
	release()

	for name, f := range map[string]*fixture{"A": a, "B": b} {
		waitFor(t, func() bool { return f.get("/k", "Host", "shop").body == "v2" }, name+" to serve the refreshed entry")
	}
	if n := o.count(); n != 2 {
		t.Fatalf("the origin saw %d requests, want 2 (one fill and one refresh for both replicas)", n)
	}
}

func TestAReplicaWithAStaleCopySeesAnotherReplicasFreshFill(t *testing.T) {
	redis := testredis.Start(t)
	var version atomic.Int64
	version.Store(1)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, version.Load()))
		_, _ = io.WriteString(w, fmt.Sprintf("v%d", version.Load()))
	})
	a, b := replica(t, redis.Addr(), o), replica(t, redis.Addr(), o)
	expect(t, a.get("/s", "Host", "shop"), 200, "MISS")
	waitFor(t, func() bool { return b.get("/s", "Host", "shop").xcache() == "HIT; layer=l2" }, "B to see A's fill")

	version.Store(2)
	o.clock.Advance(20 * time.Second)
	expect(t, a.get("/s", "Host", "shop"), 200, "MISS") // A fetches v2 (the ETag changed)
	// B's L1 still holds v1, stale: it must find A's v2 in L2, not fetch.
	r := b.get("/s", "Host", "shop")
	if r.body != "v2" || o.count() != 2 {
		t.Fatalf("B answered %q (%s); origin saw %d requests, want v2 from L2 and 2", r.body, r.xcache(), o.count())
	}
}

// A replica that waits for another replica's refresh of a key asks nothing
// of the origin, so it must not use up its refresh slots: its own
// refreshes of other keys still start.
func TestWaitingOnAnotherReplicasRefreshTakesNoRefreshSlot(t *testing.T) {
	redis := testredis.Start(t)
	hold := make(chan struct{})
	var held atomic.Int64
	refreshed := make(chan string, 4*maxRefreshes)
	var refreshing atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if refreshing.Load() {
			refreshed <- r.URL.Path
			if r.URL.Path != "/extra" {
				held.Add(1)
				<-hold // A's refreshes keep their leases
			}
		}
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=300")
		_, _ = io.WriteString(w, "v")
	})
	a, b := replica(t, redis.Addr(), o), replica(t, redis.Addr(), o)
	released := false
	t.Cleanup(func() {
		if !released {
			close(hold)
		}
	})

	paths := []string{"/extra"}
	for i := range maxRefreshes {
		paths = append(paths, fmt.Sprintf("/k%d", i))
	}
	for _, p := range paths {
		expect(t, a.get(p, "Host", "shop"), 200, "MISS")
		waitFor(t, func() bool { return b.get(p, "Host", "shop").xcache() == "HIT; layer=l2" }, "B to see "+p+" in L2")
	}
	refreshing.Store(true)
	o.clock.Advance(20 * time.Second)
	for _, p := range paths[1:] {
		expect(t, a.get(p, "Host", "shop"), 200, "STALE; layer=l1")
	}
	waitFor(t, func() bool { return held.Load() == maxRefreshes }, "A's refreshes to reach the origin")
	// B's refreshes of the same keys find A's leases and wait for A.
	for _, p := range paths[1:] {
		expect(t, b.get(p, "Host", "shop"), 200, "STALE; layer=l1")
	}
	// B's refreshes give their slots back once they find A's leases (a
	// Redis round trip each, after their stale answers went out): until
	// then a stale hit on /extra may find every slot taken and be
	// deferred, so it is asked again until B refreshes it. Within 2 s:
	// a refresh that kept its slot while waiting would hold it for its
	// whole wait for A (2 × leaseTTL = 4 s).
	expect(t, b.get("/extra", "Host", "shop"), 200, "STALE; layer=l1")
	deadline := time.After(2 * time.Second)
	again := time.NewTicker(50 * time.Millisecond)
	defer again.Stop()
	for {
		select {
		case <-again.C:
			expect(t, b.get("/extra", "Host", "shop"), 200, "STALE; layer=l1")
		case p := <-refreshed:
			if p != "/extra" {
				continue // one of A's
			}
			released = true
			close(hold)
			return
		case <-deadline:
			t.Fatalf("B did not refresh /extra while it waited for A's refreshes (%d deferred)",
				int(testutil.ToFloat64(b.px.m.RefreshesDeferred)))
		}
	}
}
