package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/test/testredis"
)

func TestOptionsValidateNamesEveryBadField(t *testing.T) {
	err := Options{Timeout: -1, QueueSize: -1, QueueBytes: -1, Writers: -1, BatchSize: -1,
		Breaker: BreakerConfig{FailureThreshold: -1, OpenFor: -1, MaxOpenFor: -1}}.Validate()
	if err == nil {
		t.Fatal("Validate accepted negative fields and no L1 or metrics")
	}
	for _, field := range []string{"store.l1", "store.metrics", "store.timeout", "store.queueSize", "store.queueBytes",
		"store.writers", "store.batchSize", "store.breaker.failureThreshold", "store.breaker.openFor", "store.breaker.maxOpenFor"} {
		if !strings.Contains(err.Error(), field+":") {
			t.Errorf("error does not name %s:\n%v", field, err)
		}
	}
	if _, err := New(context.Background(), Options{}); err == nil {
		t.Error("New accepted Options without L1 and metrics")
	}
}

func TestL1OnlyStoreIsAThinAdapter(t *testing.T) {
	f := newFixture(t, storeOpts{})
	ctx := context.Background()
	now := time.Now()
	key := keyFor("/a")
	want := response(now, "/a", time.Minute)
	mustSet(t, f.s, key, want)

	var got entry.Entry
	layer, err := f.s.Get(ctx, key, &got)
	if err != nil || layer != LayerL1 || !sameEntry(&got, want) {
		t.Fatalf("Get = %q, %v, %+v; want an l1 hit of %+v", layer, err, got, want)
	}
	if _, err := f.s.Get(ctx, keyFor("/missing"), &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a missing key: err = %v, want ErrNotFound", err)
	}
	if err := f.s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := f.s.Get(ctx, key, &got); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: err = %v, want ErrNotFound", err)
	}
	release, lead := f.s.TryLead(ctx, key, time.Second)
	release()
	if !lead {
		t.Error("TryLead without L2 did not lead")
	}
	if _, err := f.s.GetNewer(ctx, key, &got, time.Time{}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("GetNewer without L2: err = %v, want ErrUnavailable", err)
	}
	if n, err := f.s.WarmStart(ctx, 10, 0); n != 0 || err != nil {
		t.Errorf("WarmStart without L2 = %d, %v; want 0, nil", n, err)
	}
	if err := f.s.SetShared(ctx, key, want); err != nil {
		t.Errorf("SetShared without L2: %v", err)
	}
}

func TestSetRefusesAnEntryTooLargeForL1AndSkipsL2(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	big := response(time.Now(), "/big", time.Minute)
	big.Body = make([]byte, 32<<10)
	if err := f.s.Set(context.Background(), keyFor("/big"), big); !errors.Is(err, l1.ErrTooLarge) {
		t.Fatalf("Set of an entry over L1's limit: err = %v, want l1.ErrTooLarge", err)
	}
	if err := f.s.Close(); err != nil { // flushes the queue
		t.Fatal(err)
	}
	if inL2(t, rawClient(t, srv.Addr()), testPrefix(t), keyFor("/big")) {
		t.Fatal("an entry L1 refused was written to L2")
	}
}

// An entry written to L2 by another replica, halfway through its lifetime,
// is an L2 hit here, then an L1 hit, with the same freshness throughout.
func TestL2HitIsPromotedWithItsRemainingLifetime(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	ctx := testCtx(t)
	key := keyFor("/p")
	e := response(clk.Now().Add(-30*time.Second), "/p", time.Minute)
	e.InitialAge = 5 * time.Second
	wantFresh := e.FreshUntil() // 25s from now
	if err := f.l2.Set(ctx, key, e, time.Hour); err != nil {
		t.Fatal(err)
	}

	var got entry.Entry
	layer, err := f.s.Get(ctx, key, &got)
	if err != nil || layer != LayerL2 {
		t.Fatalf("Get = %q, %v; want an l2 hit", layer, err)
	}
	if !got.FreshUntil().Equal(wantFresh) || !sameEntry(&got, e) {
		t.Fatalf("L2 hit fresh until %v, want %v (entry unchanged)", got.FreshUntil(), wantFresh)
	}
	layer, err = f.s.Get(ctx, key, &got)
	if err != nil || layer != LayerL1 {
		t.Fatalf("second Get = %q, %v; want an l1 hit after promotion", layer, err)
	}
	if !got.FreshUntil().Equal(wantFresh) {
		t.Fatalf("promoted entry fresh until %v, want %v: promotion must keep the remaining lifetime", got.FreshUntil(), wantFresh)
	}
}

func TestL2HitPastAllUseIsNotPromoted(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	ctx := testCtx(t)
	key := keyFor("/old")
	// Expired an hour ago by this replica's clock; another replica's clock
	// (or Redis's expiry) disagreed.
	e := response(clk.Now().Add(-2*time.Hour), "/old", time.Hour)
	if err := f.l2.Set(ctx, key, e, time.Hour); err != nil {
		t.Fatal(err)
	}
	var got entry.Entry
	if layer, err := f.s.Get(ctx, key, &got); err != nil || layer != LayerL2 {
		t.Fatalf("Get = %q, %v; want an l2 hit", layer, err)
	}
	if _, err := f.l1.Get(key); !errors.Is(err, l1.ErrNotFound) {
		t.Fatalf("an entry past its stale deadline was promoted into L1 (err %v)", err)
	}
}

// Two stores on one Redis are two replicas of a tier: what one stores, the
// other finds in L2 once the asynchronous write has landed, with the TTL
// that the entry's times give it.
func TestSetInOneReplicaIsAnL2HitInAnother(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	a := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	b := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	rc := rawClient(t, srv.Addr())
	ctx := testCtx(t)

	key := keyFor("/shared")
	e := response(clk.Now(), "/shared", time.Minute)
	e.StaleWhileRevalidate = 30 * time.Second
	e.StaleIfError = 2 * time.Minute
	e.Header = append(e.Header, entry.Field{Name: "Etag", Value: `"v1"`})
	mustSet(t, a.s, key, e)

	var got entry.Entry
	waitFor(t, 5*time.Second, "B to find A's entry in L2", func() bool {
		layer, err := b.s.Get(ctx, key, &got)
		return err == nil && layer == LayerL2
	})
	if !sameEntry(&got, e) {
		t.Fatalf("B got %+v, want %+v", got, e)
	}
	// Fresh for 1m, then the longer stale window (2m), then the grace
	// of an entry with a validator (1h by default).
	want := time.Minute + 2*time.Minute + time.Hour
	pttl, err := rc.PTTL(ctx, entryName(testPrefix(t), key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if pttl > want || pttl < want-5*time.Second {
		t.Fatalf("PTTL = %s, want about %s", pttl, want)
	}
	if d := counter(a.m.L2Dropped); d != 0 {
		t.Errorf("L2Dropped = %v, want 0", d)
	}
}

func TestAnEntryPastItsStaleDeadlineIsNotWrittenToL2(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	key := keyFor("/stale")
	mustSet(t, f.s, key, response(clk.Now().Add(-time.Hour), "/stale", time.Minute))
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	if inL2(t, rawClient(t, srv.Addr()), testPrefix(t), key) {
		t.Fatal("an entry with no time left was written to L2")
	}
	if _, err := f.l1.Get(key); err != nil {
		t.Fatalf("L1 does not have it: %v (L1 keeps whatever the proxy stores)", err)
	}
}

func TestDeleteRemovesFromBothLayers(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	ctx := testCtx(t)
	key := keyFor("/d")
	if err := a.s.SetShared(ctx, key, response(time.Now(), "/d", time.Minute)); err != nil {
		t.Fatal(err)
	}
	var e entry.Entry
	if layer, err := b.s.Get(ctx, key, &e); layer != LayerL2 || err != nil {
		t.Fatalf("B.Get = %q, %v; want an l2 hit", layer, err)
	}
	if err := a.s.Delete(ctx, key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := a.s.Get(ctx, key, &e); !errors.Is(err, ErrNotFound) {
		t.Fatalf("A.Get after Delete: err = %v, want ErrNotFound", err)
	}
	if inL2(t, rc, testPrefix(t), key) {
		t.Fatal("L2 still has the entry after Delete")
	}
}

// A purge right after a fill must win even though the fill's L2 write was
// queued first: Delete cancels a queued write and deletes again after one
// that was already on its way.
func TestDeleteIsNeverUndoneByAWriteQueuedBeforeIt(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) { o.Writers = 1 }})
	ctx := testCtx(t)
	const n = 50
	for i := range n {
		key := keyFor(fmt.Sprintf("/race/%d", i))
		mustSet(t, f.s, key, response(time.Now(), "/race", time.Minute))
		if i%5 == 0 {
			// Let the writer pick some up, so that some deletes meet
			// writes in flight rather than queued.
			time.Sleep(time.Millisecond)
		}
		if err := f.s.Delete(ctx, key); err != nil {
			t.Fatalf("Delete: %v", err)
		}
	}
	if n := entriesAfterFlush(t, f, srv.Addr()); n != 0 {
		t.Fatalf("%d deleted entries are back in L2", n)
	}
}

// entriesAfterFlush closes f's store, which writes what is queued, and
// counts the entries L2 holds.
func entriesAfterFlush(t *testing.T, f *fixture, addr string) int {
	t.Helper()
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	keys, err := rawClient(t, addr).Keys(testCtx(t), testPrefix(t)+"e:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

func TestCloseFlushesQueuedWrites(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	rc := rawClient(t, srv.Addr())
	var keys []string
	for i := range 200 {
		key := keyFor(fmt.Sprintf("/flush/%d", i))
		keys = append(keys, key)
		mustSet(t, f.s, key, response(time.Now(), "/flush", time.Minute))
	}
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if !inL2(t, rc, testPrefix(t), key) {
			t.Fatalf("%q was queued before Close but is not in L2", key)
		}
	}
	if err := f.s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// After Close, Set still serves L1 and drops the L2 write.
	mustSet(t, f.s, keyFor("/late"), response(time.Now(), "/late", time.Minute))
	if d := counter(f.m.L2Dropped); d != 1 {
		t.Fatalf("L2Dropped = %v after a Set past Close, want 1", d)
	}
}

// The writers belong to the store: cancelling its context ends them.
func TestWritersStopWhenTheContextEnds(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	s, err := New(ctx, Options{L1: f.l1, L2: f.l2, Metrics: f.m, Writers: 3})
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, s, keyFor("/ctx"), response(time.Now(), "/ctx", time.Minute))
	cancel()
	goleak.VerifyNone(t, ignore)
	if !inL2(t, rawClient(t, srv.Addr()), testPrefix(t), keyFor("/ctx")) {
		t.Fatal("the write queued before the context ended was not flushed")
	}
}

// Every method at once, on overlapping keys, then Close: for the race
// detector, and to check that Close ends the writers whatever they are
// doing.
func TestConcurrentUseThenClose(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) {
		o.HotSampleEvery = 2
		o.QueueSize = 64
	}})
	ctx := testCtx(t)
	stop := time.Now().Add(300 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			var e entry.Entry
			for i := 0; time.Now().Before(stop); i++ {
				key := keyFor(fmt.Sprintf("/c/%d", (i*7+g)%16))
				switch i % 5 {
				case 0, 1:
					_ = f.s.Set(ctx, key, response(time.Now(), "/c", time.Minute))
				case 2:
					_ = f.s.Delete(ctx, key)
				case 3:
					_ = f.s.SetShared(ctx, key, response(time.Now(), "/c", time.Minute))
				default:
					_, _ = f.s.Get(ctx, key, &e)
				}
			}
		})
	}
	wg.Wait()
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.s.queued.Load(); n != 0 {
		t.Fatalf("%d bytes still charged to the queue after Close", n)
	}
	if len(f.s.pending.latest) != 0 || len(f.s.pending.flying) != 0 {
		t.Fatalf("pending writes left after Close: %d queued, %d flying", len(f.s.pending.latest), len(f.s.pending.flying))
	}
}

func TestAnL2HitReadBeforeAPurgeIsNotPromotedAfterIt(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	ctx := testCtx(t)
	key := keyFor("/p")
	if err := f.l2.Set(ctx, key, response(clk.Now(), "/p", time.Minute), time.Hour); err != nil {
		t.Fatal(err)
	}
	// The purge lands after L2 answered and before the promotion.
	f.s.afterL2Get = func() { f.s.l1.Delete(key) }
	var got entry.Entry
	if layer, err := f.s.Get(ctx, key, &got); err != nil || layer != LayerL2 {
		t.Fatalf("Get = %q, %v; want an l2 hit", layer, err)
	}
	f.s.afterL2Get = nil
	if err := f.s.l1.GetInto(key, &got); err == nil {
		t.Fatal("an entry read from L2 before a purge was copied into L1 after it")
	}
}

func TestForgetKeepsAPurgeFromBeingUndoneByAWriteQueuedBeforeIt(t *testing.T) {
	for name, forget := range map[string]func(s *Layered, key string){
		"Forget of the key": func(s *Layered, key string) { s.Forget(key) },
		"ForgetAll":         func(s *Layered, _ string) { s.ForgetAll() },
	} {
		t.Run(name, func(t *testing.T) {
			srv := testredis.Start(t)
			f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) { o.Writers = 1 }})
			ctx := testCtx(t)
			const n = 50
			for i := range n {
				key := keyFor(fmt.Sprintf("/race/%d", i))
				mustSet(t, f.s, key, response(time.Now(), "/race", time.Minute))
				// The purger deletes from L2 by itself, after forgetting.
				forget(f.s, key)
				if err := f.l2.Delete(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			if n := entriesAfterFlush(t, f, srv.Addr()); n != 0 {
				t.Fatalf("%d purged entries are back in L2", n)
			}
		})
	}
}
