package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

func TestOnlyOneReplicaLeadsAKey(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	key := keyFor("/lead")

	reqCtx, cancelReq := context.WithCancel(context.Background())
	releaseA, lead := a.s.TryLead(reqCtx, key, 10*time.Second)
	if !lead {
		t.Fatal("A did not lead a key nobody held")
	}
	if release, lead := b.s.TryLead(context.Background(), key, 10*time.Second); lead {
		release()
		t.Fatal("B led a key A holds")
	}
	// The client of A's request went away: release still goes through.
	cancelReq()
	releaseA()
	releaseA() // idempotent
	releaseB, lead := b.s.TryLead(context.Background(), key, 10*time.Second)
	if !lead {
		t.Fatal("B did not lead after A released")
	}
	releaseB()
	if n := l2Errors(a.m, "lease") + l2Errors(b.m, "lease"); n != 0 {
		t.Fatalf("l2_errors_total{op=lease} = %v, want 0", n)
	}
}

func TestEveryReplicaLeadsWhenRedisIsDown(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr(), opts: failFast})
	b := newFixture(t, storeOpts{addr: srv.Addr(), opts: failFast})
	srv.Kill()
	for name, f := range map[string]*fixture{"A": a, "B": b} {
		release, lead := f.s.TryLead(context.Background(), keyFor("/down"), time.Second)
		release()
		if !lead {
			t.Errorf("%s did not lead with Redis down", name)
		}
		if n := l2Errors(f.m, "lease"); n != 1 {
			t.Errorf("%s: l2_errors_total{op=lease} = %v, want 1", name, n)
		}
	}
}

// The replica that leads stores its fill with SetShared; the one waiting
// polls GetNewer, which finds nothing until the fill is in L2 (a Vary
// marker is not the fill), then gets it from L2 and keeps it in its L1.
func TestGetNewerFindsTheLeadersFillAndNotAVaryMarker(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	ctx := testCtx(t)
	key := keyFor("/fill")
	release, lead := a.s.TryLead(ctx, key, 10*time.Second)
	if !lead {
		t.Fatal("A did not lead")
	}
	defer release()

	var e entry.Entry
	if layer, err := b.s.GetNewer(ctx, key, &e, time.Time{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNewer before the fill = %q, %v; want ErrNotFound", layer, err)
	}
	marker := &entry.Entry{Kind: entry.KindVary, Vary: []string{"accept"}, Nonce: 7,
		ResponseTime: time.Now(), Lifetime: time.Minute}
	if err := a.s.SetShared(ctx, key, marker); err != nil {
		t.Fatal(err)
	}
	if layer, err := b.s.GetNewer(ctx, key, &e, time.Time{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNewer took the Vary marker for the fill: %q, %v, kind %v", layer, err, e.Kind)
	}
	want := response(time.Now(), "/fill", time.Minute)
	if err := a.s.SetShared(ctx, key, want); err != nil {
		t.Fatal(err)
	}
	if layer, err := b.s.GetNewer(ctx, key, &e, time.Time{}); err != nil || layer != LayerL2 || !sameEntry(&e, want) {
		t.Fatalf("GetNewer = %q, %v, %+v; want the fill from l2", layer, err, e)
	}
	if _, err := b.l1.Get(key); err != nil {
		t.Fatalf("the fill GetNewer found was not promoted into B's L1: %v", err)
	}
}

// A replica holding a stale entry looks for a newer one, not for the stale
// one still in L2.
func TestGetNewerPassesOverTheEntryTheCallerHas(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	ctx := testCtx(t)
	key := keyFor("/stale")
	old := response(time.Now().Add(-2*time.Minute), "/stale", time.Minute)
	old.StaleWhileRevalidate = time.Hour
	if err := a.s.SetShared(ctx, key, old); err != nil {
		t.Fatal(err)
	}
	var e entry.Entry
	if layer, err := b.s.GetNewer(ctx, key, &e, old.ResponseTime); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetNewer with only the caller's entry in L2 = %q, %v; want ErrNotFound", layer, err)
	}
	fresh := response(time.Now(), "/stale", time.Minute)
	if err := a.s.SetShared(ctx, key, fresh); err != nil {
		t.Fatal(err)
	}
	if layer, err := b.s.GetNewer(ctx, key, &e, old.ResponseTime); err != nil || layer != LayerL2 || !sameEntry(&e, fresh) {
		t.Fatalf("GetNewer = %q, %v; want the newer fill", layer, err)
	}
}

// A waiter polling GetNewer does not sit out its whole wait on a hung
// Redis: each poll costs at most Timeout, and once the breaker opens
// GetNewer says ErrUnavailable at once, and the waiter fetches itself.
func TestGetNewerSaysUnavailableOnceTheBreakerOpens(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: failFast})
	srv.Pause()
	t.Cleanup(srv.Resume)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var e entry.Entry
	for i := range 3 {
		start := time.Now()
		_, err := f.s.GetNewer(ctx, keyFor("/hung"), &e, time.Time{})
		if d := time.Since(start); err == nil || errors.Is(err, ErrNotFound) || d > slowCall {
			t.Fatalf("GetNewer %d on a hung Redis = %v after %s; want an L2 error within about 50ms", i, err, d)
		}
	}
	start := time.Now()
	_, err := f.s.GetNewer(ctx, keyFor("/hung"), &e, time.Time{})
	if d := time.Since(start); !errors.Is(err, ErrUnavailable) || d > slowCall/10 {
		t.Fatalf("GetNewer after 3 timeouts = %v after %s; want ErrUnavailable at once", err, d)
	}
}

func TestAHeldLeaseIsRenewedAndAnAbandonedOneLapses(t *testing.T) {
	srv := testredis.Start(t)
	a := newFixture(t, storeOpts{addr: srv.Addr()})
	b := newFixture(t, storeOpts{addr: srv.Addr()})
	key := keyFor("/renew")
	const ttl = 300 * time.Millisecond

	release, lead := a.s.TryLead(context.Background(), key, ttl)
	if !lead {
		t.Fatal("A did not lead")
	}
	// Well past the TTL, A still holds it: its renewals keep it alive.
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if r, lead := b.s.TryLead(context.Background(), key, ttl); lead {
			r()
			t.Fatal("B took a lease that A was still renewing")
		}
		time.Sleep(ttl / 4)
	}
	release()

	// A holder that stops renewing without releasing (it died, or lost
	// Redis) loses the lease within about one TTL.
	_, lead = a.s.TryLead(context.Background(), key, ttl)
	if !lead {
		t.Fatal("A did not lead again after releasing")
	}
	_ = a.s.Close() // stops the renewal; the lease is left to lapse
	start := time.Now()
	for {
		if r, lead := b.s.TryLead(context.Background(), key, ttl); lead {
			r()
			break
		}
		if time.Since(start) > 5*ttl {
			t.Fatalf("an abandoned lease still held after %v", time.Since(start))
		}
		time.Sleep(10 * time.Millisecond)
	}
}
