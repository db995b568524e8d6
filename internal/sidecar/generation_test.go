package sidecar

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/proxy"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

func TestARetiredGenerationIsIdleOnlyAfterItsLastRequest(t *testing.T) {
	dp := &dataPlane{}
	old := &generation{idle: make(chan struct{})}
	dp.cur.Store(old)
	inFlight := dp.acquire()
	if inFlight != old {
		t.Fatal("acquire did not return the current generation")
	}

	next := &generation{idle: make(chan struct{})}
	dp.cur.Store(next)
	old.retire()
	if got := dp.acquire(); got != next {
		t.Fatal("a request after the swap got the retired generation")
	} else {
		got.release()
	}
	select {
	case <-old.idle:
		t.Fatal("the retired generation is idle while a request still uses it")
	default:
	}
	inFlight.release()
	select {
	case <-old.idle:
	default:
		t.Fatal("the retired generation is not idle after its last request")
	}
	select {
	case <-next.idle:
		t.Fatal("the current generation is idle")
	default:
	}
}

func TestTheL2ConnectionIsTheSameUnlessAConnectionSettingChanged(t *testing.T) {
	base := tierconfig.L2{Addresses: []string{"r:6379"}, Mode: "standalone", Password: "pw", Timeout: tierconfig.Duration(5e7)}
	with := func(f func(*tierconfig.L2)) tierconfig.L2 {
		c := base
		c.Addresses = append([]string(nil), base.Addresses...)
		f(&c)
		return c
	}
	cases := map[string]struct {
		a, b tierconfig.L2
		same bool
	}{
		"no L2 on either side":            {tierconfig.L2{}, tierconfig.L2{Password: "from-env"}, true},
		"an equal config":                 {base, with(func(*tierconfig.L2) {}), true},
		"warm-start settings only":        {base, with(func(c *tierconfig.L2) { c.WarmStart.MaxEntries = 7 }), true},
		"L2 switched on":                  {tierconfig.L2{}, base, false},
		"another address":                 {base, with(func(c *tierconfig.L2) { c.Addresses[0] = "s:6379" }), false},
		"a rotated password":              {base, with(func(c *tierconfig.L2) { c.Password = "new" }), false},
		"TLS switched on":                 {base, with(func(c *tierconfig.L2) { c.TLS = true }), false},
		"another CA bundle":               {base, with(func(c *tierconfig.L2) { c.CACert = "pem" }), false},
		"the key prefix spelled out":      {base, with(func(c *tierconfig.L2) { c.KeyPrefix = "tc:default/default:" }), true},
		"another timeout":                 {base, with(func(c *tierconfig.L2) { c.Timeout *= 2 }), false},
		"another user":                    {base, with(func(c *tierconfig.L2) { c.Username = "u" }), false},
		"sentinel instead of standalone":  {base, with(func(c *tierconfig.L2) { c.Mode, c.MasterName = "sentinel", "m" }), false},
		"one more address (cluster mode)": {base, with(func(c *tierconfig.L2) { c.Addresses = append(c.Addresses, "s:6379") }), false},
	}
	for name, c := range cases {
		if got := sameL2(c.a, c.b); got != c.same {
			t.Errorf("%s: sameL2 = %v, want %v", name, got, c.same)
		}
	}
}

// TestSameL2SeesEveryField changes each field of tierconfig.L2 in turn and
// checks that sameL2 sees the change, except for the fields l2Connection
// clears. A field added to tierconfig.L2 fails here until it is listed as
// one or the other: whether it shapes the L2 client is a decision.
func TestSameL2SeesEveryField(t *testing.T) {
	connection := map[string]bool{
		"Addresses": true, "Mode": true, "MasterName": true, "Username": true,
		"Password": true, "TLS": true, "CACert": true, "Timeout": true,
	}
	notConnection := map[string]bool{"KeyPrefix": true, "WarmStart": true, "MaxBodySize": true}
	base := tierconfig.Config{L2: tierconfig.L2{Addresses: []string{"redis:6379"}}}.WithDefaults().L2
	typ := reflect.TypeFor[tierconfig.L2]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		t.Run(f.Name, func(t *testing.T) {
			if !connection[f.Name] && !notConnection[f.Name] {
				t.Fatalf("tierconfig.L2.%s is new: list it in connection (a change needs a new L2 client) or in notConnection (and clear it in l2Connection)", f.Name)
			}
			b := base
			b.Addresses = slices.Clone(base.Addresses)
			changeValue(t, reflect.ValueOf(&b).Elem().Field(i))
			if reflect.DeepEqual(b, base) {
				t.Fatalf("changing %s left the config as it was", f.Name)
			}
			if got, want := sameL2(base, b), notConnection[f.Name]; got != want {
				t.Errorf("sameL2 after changing %s = %v, want %v", f.Name, got, want)
			}
		})
	}
}

// changeValue sets v, a field of tierconfig.L2 or of a struct in it, to a
// different value.
func changeValue(t *testing.T, v reflect.Value) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		v.SetString(v.String() + "x")
	case reflect.Bool:
		v.SetBool(!v.Bool())
	case reflect.Int, reflect.Int64:
		v.SetInt(v.Int() + 1)
	case reflect.Slice:
		v.Set(reflect.Append(v, reflect.ValueOf("other:6379")))
	case reflect.Struct:
		for i := range v.NumField() {
			changeValue(t, v.Field(i))
		}
	default:
		t.Fatalf("changeValue cannot change a %s: teach it", v.Type())
	}
}

func TestAPurgeThroughTheNextGenerationOvertakesAFillOfThePreviousOne(t *testing.T) {
	cfg := tierconfig.Default()
	dp := newTestDataPlane(t, Options{}, cfg)
	prev := dp.cur.Load()
	// A new L1 size builds a new generation with a new purger.
	cfg.L1.MaxSize = 2 * tierconfig.Default().L1.MaxSize
	compiled, err := tierconfig.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	next, err := dp.build(compiled, prev, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dp.closeGeneration(next) })
	if next.purger == prev.purger {
		t.Fatal("the next generation reused the purger; the test needs two")
	}

	// Fills of the old generation may store into an L1 or L2 the new one
	// shares: a purge through the new purger must stop them, and only them.
	purged := prev.purger.Watch("shop", "/x")
	defer purged.End()
	other := prev.purger.Watch("shop", "/y")
	defer other.End()
	next.purger.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "shop", Path: "/x"}})
	if purged.Commit(nil, func() {}) {
		t.Fatal("a fill of /x on the previous generation was stored after /x was invalidated through the next one")
	}
	if !other.Commit(nil, func() {}) {
		t.Fatal("a fill of /y was not stored although only /x was invalidated")
	}
}

// BenchmarkServeThroughGenerations is the cost the generation wrapper
// adds to every request (acquire, release) around a handler that does
// nothing.
func BenchmarkServeThroughGenerations(b *testing.B) {
	dp := &dataPlane{}
	g := &generation{idle: make(chan struct{})}
	dp.cur.Store(g)
	var nop http.HandlerFunc = func(http.ResponseWriter, *http.Request) {}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			g := dp.acquire()
			nop(nil, r)
			g.release()
		}
	})
}

// newTestDataPlane is a data plane with its first generation for cfg, as
// RunWith builds it, closed when the test ends.
func newTestDataPlane(t *testing.T, o Options, cfg tierconfig.Config) *dataPlane {
	t.Helper()
	applyFlags(&cfg, o)
	compiled, err := tierconfig.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if o.ShutdownTimeout == 0 {
		o.ShutdownTimeout = 5 * time.Second
	}
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dp := &dataPlane{
		ctx: context.Background(), o: o, getenv: noEnv,
		upstream: &url.URL{Scheme: "http", Host: "127.0.0.1:1"},
		log:      slog.New(slog.DiscardHandler), m: m,
		holder: tierconfig.NewHolder(compiled), rt: proxy.NewTransport(),
		stopRetire: make(chan struct{}),
		watches:    invalidate.NewWatches(),
	}
	g, err := dp.build(compiled, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dp.cur.Store(g)
	t.Cleanup(func() {
		if err := dp.close(); err != nil {
			t.Error(err)
		}
	})
	return dp
}

func TestApplyingTheConfigInEffectChangesNothing(t *testing.T) {
	small, err := tierconfig.Parse([]byte(smallL1))
	if err != nil {
		t.Fatal(err)
	}
	dp := newTestDataPlane(t, Options{RedisPassword: "from-env"}, small)
	first, compiled := dp.cur.Load(), dp.holder.Load()

	if err := dp.Apply(context.Background(), small, "v1"); err != nil {
		t.Fatal(err)
	}
	// The same once the flags are applied: the password the config
	// leaves empty comes from the environment either way.
	same := small
	same.L2.Password = "from-env"
	if err := dp.Apply(context.Background(), same, "v2"); err != nil {
		t.Fatal(err)
	}
	if dp.cur.Load() != first || dp.holder.Load() != compiled {
		t.Fatal("applying the config in effect rebuilt or recompiled it")
	}
	if got := *dp.version.Load(); got != "v2" {
		t.Errorf("version in effect %q, want v2", got)
	}
}

func TestAConfigThatDoesNotCompileWithTheFlagsIsRefusedAndChangesNothing(t *testing.T) {
	// Two --redis-addr addresses make cluster mode unless the config says
	// otherwise; this one (valid on its own: no addresses) says
	// standalone, which takes one address.
	pushed, err := tierconfig.Parse([]byte(smallL1 + "l2: {mode: standalone}\n"))
	if err != nil {
		t.Fatal(err)
	}
	dp := newTestDataPlane(t, Options{RedisAddr: "127.0.0.1:1,127.0.0.1:2"}, tierconfig.Default())
	first, compiled := dp.cur.Load(), dp.holder.Load()
	err = dp.Apply(context.Background(), pushed, "v1")
	if err == nil || !strings.Contains(err.Error(), "l2.addresses") {
		t.Fatalf("Apply = %v, want an error naming l2.addresses", err)
	}
	if dp.cur.Load() != first || dp.holder.Load() != compiled {
		t.Fatal("a refused config changed the data plane")
	}
}

func TestAMessageSentWhileANewL2ClientSubscribesStillReachesTheSidecar(t *testing.T) {
	rs := testredis.Start(t)
	slow := testredis.StartLatencyProxy(t, rs.Addr())
	cfg := func(addr string) tierconfig.Config {
		c, err := tierconfig.Parse([]byte(smallL1 + "l2: {addresses: ['" + addr + "'], warmStart: {disabled: true}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dp := newTestDataPlane(t, Options{}, cfg(rs.Addr()))
	rdb := redisClient(t, rs.Addr())
	const channel = "tc:default/default:inval"
	waitNumSub := func(n int64) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			counts, err := rdb.PubSubNumSub(context.Background(), channel).Result()
			if err == nil && counts[channel] == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v subscribers, want %d", counts[channel], n)
			}
		}
	}
	waitNumSub(1)

	// The next L2 client (a rotated password would do the same) cannot
	// subscribe yet: every byte to Redis waits a second, longer than its
	// timeout.
	slow.SetDelay(time.Second, 0)
	if err := dp.Apply(context.Background(), cfg(slow.Addr()), "v2"); err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(dp.m.Purges)
	if err := rdb.Publish(context.Background(), channel, `{"from":"elsewhere","all":true}`).Err(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(dp.m.Purges) == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a purge published while the new L2 client was subscribing reached no subscription of the sidecar")
		}
	}

	// Once the new client has subscribed, the old subscription goes.
	slow.SetDelay(0, 0)
	waitNumSub(1)
	if dp.cur.Load().client == nil || slow.Conns() == 0 {
		t.Fatal("the new generation does not use the new address")
	}
}

// A purge's repeat belongs to the generation that made it. When a config
// change gives the next generation a new L1 on the same L2, the repeat
// must still reach that L1: in the window it closes, this sidecar's new
// L1 may have read back from L2 the response a late fill of another
// replica wrote there after the purge.
func TestAPurgesRepeatReachesTheNextGenerationsNewL1(t *testing.T) {
	rs := testredis.Start(t)
	cfg := func(l1 string) tierconfig.Config {
		c, err := tierconfig.Parse([]byte(l1 + "l2: {addresses: ['" + rs.Addr() + "'], warmStart: {disabled: true}}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dp := newTestDataPlane(t, Options{}, cfg(smallL1))
	// A request in flight keeps the first generation, and so its pending
	// repeat, until the late write below is in the new L1: retired
	// before, it would run the repeat at once (Close) ahead of the write.
	prev := dp.acquire()
	released := false
	defer func() {
		if !released {
			prev.release()
		}
	}()
	if _, err := prev.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"http://" + testHost + "/x"}}); err != nil {
		t.Fatal(err)
	}
	// A new L1 size: a new L1, the same L2 client.
	if err := dp.Apply(context.Background(), cfg("l1: {maxSize: 64Mi, shards: 32}\n"), "v2"); err != nil {
		t.Fatal(err)
	}
	next := dp.cur.Load()
	if next == prev || next.cache == prev.cache || next.client != prev.client {
		t.Fatal("the config change did not build a generation with a new L1 on the same L2 client")
	}
	// The new L1 read back what a late fill wrote to L2 after the purge.
	key := string(cachekey.AppendPrimary(nil, "http", testHost, "/x"))
	if err := next.cache.Set(key, &entry.Entry{Kind: entry.KindResponse, Host: testHost, Target: "/x", Status: 200,
		Body: []byte("purged"), ResponseTime: time.Now(), Lifetime: time.Hour}); err != nil {
		t.Fatal(err)
	}
	prev.release()
	released = true
	for deadline := time.Now().Add(invalidate.RepeatAfter + 5*time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := next.cache.Get(key); err != nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the purged response read back into the new L1 is still there: the purge's repeat did not reach it")
		}
	}
}

// Two config changes in a row, the first keeping the L2 client and the
// second replacing it: the middle generation owns the client it shares
// with the first, which may still be retiring (a long request). The
// first's purger must still apply its pending repeats to L2 when it
// closes, so the client must not be closed before it.
func TestARetiringGenerationsRepeatsRunBeforeItsSharedL2ClientCloses(t *testing.T) {
	rs := testredis.Start(t)
	cfg := func(yaml string) tierconfig.Config {
		c, err := tierconfig.Parse([]byte(yaml + "l2: {addresses: ['" + rs.Addr() + "'], warmStart: {disabled: true}" + "}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	dp := newTestDataPlane(t, Options{ShutdownTimeout: time.Minute}, cfg(smallL1))
	first := dp.acquire() // a long request keeps the first generation
	released := false
	defer func() {
		if !released {
			first.release()
		}
	}()
	rdb := redisClient(t, rs.Addr())
	name := entryName(defaultPrefix, "/x")
	if _, err := first.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"http://" + testHost + "/x"}}); err != nil {
		t.Fatal(err)
	}
	// Another replica's late fill writes the purged response back.
	if err := rdb.Set(context.Background(), name, "late", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}

	if err := dp.Apply(context.Background(), cfg("l1: {maxSize: 64Mi, shards: 32}\n"), "v2"); err != nil {
		t.Fatal(err)
	}
	middle := dp.cur.Load()
	timeout := cfg("l1: {maxSize: 64Mi, shards: 32}\n")
	timeout.L2.Timeout = tierconfig.Duration(time.Second)
	if err := dp.Apply(context.Background(), timeout, "v3"); err != nil {
		t.Fatal(err)
	}
	if last := dp.cur.Load(); middle.client != first.client || last.client == first.client {
		t.Fatal("the config changes did not share the first L2 client with the middle generation and replace it in the last")
	}
	// Give the middle generation's retirement the time to close the
	// client (it needs the last generation subscribed, a few ms): it
	// must not while the first still uses it.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := first.client.Ping(ctx)
		cancel()
		if err != nil {
			break
		}
	}
	first.release()
	released = true
	dp.retiring.Wait()
	if n, err := rdb.Exists(context.Background(), name).Result(); err != nil || n != 0 {
		t.Fatalf("the late write is still in L2 (exists %d, %v): the first generation's repeat did not run against an open client", n, err)
	}
}
