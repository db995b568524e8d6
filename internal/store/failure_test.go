package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// failFast is how the failure tests configure a store: the design's 50ms
// timeout and a breaker that opens after three failures.
func failFast(o *Options) {
	o.Timeout = 50 * time.Millisecond
	o.Breaker = BreakerConfig{FailureThreshold: 3, OpenFor: 500 * time.Millisecond, MaxOpenFor: 4 * time.Second}
}

// slowCall bounds one L2 call that times out: Timeout, plus scheduling on
// a busy machine under the race detector.
const slowCall = 500 * time.Millisecond

// plant stores e under key in L1 and in L2 directly, through the L2
// client and its relaxed timeout: the store's own 50ms Timeout (failFast)
// is what these tests measure once Redis is made to fail, not something
// their set-up on a busy machine should trip over.
func plant(t *testing.T, f *fixture, key string, e *entry.Entry) {
	t.Helper()
	if err := f.l1.Set(key, e); err != nil {
		t.Fatalf("L1 Set(%q): %v", key, err)
	}
	if err := f.l2.Set(testCtx(t), key, e, time.Hour); err != nil {
		t.Fatalf("L2 Set(%q): %v", key, err)
	}
}

// closeBreaker advances the clock past the open period and probes with a
// Get until the breaker closes (the first probe after a restart may meet
// a connection the restart broke).
func closeBreaker(t *testing.T, f *fixture, clk *clock, key string) string {
	t.Helper()
	var e entry.Entry
	for range 5 {
		clk.Advance(5 * time.Second)
		layer, _ := f.s.Get(context.Background(), key, &e)
		if f.s.br.current() == closed {
			return layer
		}
	}
	t.Fatalf("the breaker did not close after 5 probes (state %v)", f.s.br.current())
	return ""
}

// A hung Redis costs the first requests Timeout each; then the breaker
// opens and requests stop waiting on Redis at all. Once Redis answers
// again and the open period is over, one probe closes the breaker.
func TestBreakerOpensOnAHungRedisAndAProbeClosesIt(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk, opts: failFast})
	ctx := context.Background()
	key := keyFor("/hung")
	plant(t, f, key, response(clk.Now(), "/hung", time.Hour))
	f.l1.Delete(key) // so that Get asks L2

	srv.Pause()
	t.Cleanup(srv.Resume)
	var e entry.Entry
	for i := range 3 {
		start := time.Now()
		_, err := f.s.Get(ctx, key, &e)
		if d := time.Since(start); err == nil || d > slowCall {
			t.Fatalf("Get %d on a hung Redis = %v after %s; want an error within about 50ms", i, err, d)
		}
	}
	if st := f.s.br.current(); st != open {
		t.Fatalf("breaker %v after 3 timeouts, want open", st)
	}
	if g := gauge(f.m.L2CircuitOpen); g != 1 {
		t.Fatalf("l2_circuit_open = %v, want 1", g)
	}
	if n := l2Errors(f.m, "get"); n != 3 {
		t.Fatalf("l2_errors_total{op=get} = %v, want 3", n)
	}
	for i := range 20 {
		start := time.Now()
		_, err := f.s.Get(ctx, key, &e)
		if d := time.Since(start); !errors.Is(err, ErrNotFound) || d > 5*time.Millisecond {
			t.Fatalf("Get %d with the breaker open = %v after %s; want a miss in under 5ms", i, err, d)
		}
	}
	// Writes are dropped at once, not queued for a Redis that is failing.
	mustSet(t, f.s, keyFor("/while-open"), response(clk.Now(), "/while-open", time.Hour))
	if d := counter(f.m.L2Dropped); d != 1 {
		t.Fatalf("L2Dropped = %v after a Set with the breaker open, want 1", d)
	}
	if release, lead := f.s.TryLead(ctx, key, time.Second); !lead {
		t.Fatal("TryLead with the breaker open did not lead")
	} else {
		release()
	}

	srv.Resume()
	// Still open until the open period is over: no call, no wait.
	if _, err := f.s.Get(ctx, key, &e); !errors.Is(err, ErrNotFound) || f.s.br.current() != open {
		t.Fatalf("Get before the open period ended = %v, breaker %v; want a miss, still open", err, f.s.br.current())
	}
	if layer := closeBreaker(t, f, clk, key); layer != LayerL2 {
		t.Fatalf("probe Get = %q, want the L2 hit", layer)
	}
	if g := gauge(f.m.L2CircuitOpen); g != 0 {
		t.Fatalf("l2_circuit_open = %v after the breaker closed, want 0", g)
	}
	f.l1.Delete(key)
	if layer, err := f.s.Get(ctx, key, &e); layer != LayerL2 || err != nil {
		t.Fatalf("Get after recovery = %q, %v; want an l2 hit", layer, err)
	}
}

// A dead Redis refuses connections: the breaker opens, and after Redis is
// back (empty) it closes and fills reach the other replicas again.
func TestBreakerOpensOnADeadRedisAndFillsResumeAfterRestart(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	a := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk, opts: failFast})
	b := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	ctx := testCtx(t)
	plant(t, a, keyFor("/before"), response(clk.Now(), "/before", time.Hour))

	srv.Kill()
	var e entry.Entry
	for i := range 3 {
		start := time.Now()
		_, err := a.s.Get(ctx, keyFor(fmt.Sprintf("/dead/%d", i)), &e)
		if d := time.Since(start); err == nil || d > slowCall {
			t.Fatalf("Get %d on a dead Redis = %v after %s; want an error within about 50ms", i, err, d)
		}
	}
	if st := a.s.br.current(); st != open || gauge(a.m.L2CircuitOpen) != 1 {
		t.Fatalf("breaker %v (gauge %v) after 3 refused connections, want open (1)", st, gauge(a.m.L2CircuitOpen))
	}
	if err := a.s.Delete(ctx, keyFor("/before")); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Delete with the breaker open: err = %v, want ErrUnavailable (L2 may still have it)", err)
	}

	srv.Restart()
	closeBreaker(t, a, clk, keyFor("/probe"))
	if g := gauge(a.m.L2CircuitOpen); g != 0 {
		t.Fatalf("l2_circuit_open = %v after the breaker closed, want 0", g)
	}
	key := keyFor("/after")
	mustSet(t, a.s, key, response(clk.Now(), "/after", time.Hour))
	waitFor(t, 5*time.Second, "B to see A's fill after the restart", func() bool {
		layer, err := b.s.Get(ctx, key, &e)
		return err == nil && layer == LayerL2
	})
}

// With the writers stuck on a hung Redis, Set still returns at once; what
// the queue cannot hold is dropped and counted.
func TestAFullQueueDropsWritesAndSetNeverBlocks(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) {
		o.Timeout = 500 * time.Millisecond // the writer is stuck that long
		o.QueueSize, o.Writers, o.BatchSize = 2, 1, 1
		o.Breaker.FailureThreshold = 1000 // the queue, not the breaker, drops
	}})
	srv.Pause()
	t.Cleanup(srv.Resume)
	const n = 50
	start := time.Now()
	for i := range n {
		mustSet(t, f.s, keyFor(fmt.Sprintf("/q/%d", i)), response(time.Now(), "/q", time.Hour))
	}
	if d := time.Since(start); d > 250*time.Millisecond {
		t.Fatalf("%d Sets took %s while the writer was stuck for 500ms: Set blocked", n, d)
	}
	// One write with the writer, two in the queue (or three queued, if
	// the writer had not taken the first yet): the rest are dropped.
	if d := counter(f.m.L2Dropped); d < n-3 || d > n-2 {
		t.Fatalf("L2Dropped = %v, want %d or %d", d, n-3, n-2)
	}
	for i := range n {
		if _, err := f.l1.Get(keyFor(fmt.Sprintf("/q/%d", i))); err != nil {
			t.Fatalf("entry %d not in L1: a dropped L2 write must not affect L1", i)
		}
	}
}

// The byte budget bounds the queue's memory whatever the entries' size.
func TestQueueBytesBoundsTheQueue(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: func(o *Options) {
		o.Timeout = 500 * time.Millisecond
		o.QueueSize, o.QueueBytes, o.Writers, o.BatchSize = 100, 10<<10, 1, 1
		o.Breaker.FailureThreshold = 1000
	}})
	srv.Pause()
	t.Cleanup(srv.Resume)
	e := response(time.Now(), "/b", time.Hour)
	e.Body = make([]byte, 4<<10)
	for i := range 10 {
		mustSet(t, f.s, keyFor(fmt.Sprintf("/b/%d", i)), e)
	}
	// About 4 KiB each against 10 KiB: two fit, with or without the writer.
	if d := counter(f.m.L2Dropped); d != 8 {
		t.Fatalf("L2Dropped = %v, want 8", d)
	}
}

func TestDeleteOnAHungRedisIsBoundedCountedAndClearsL1(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), opts: failFast})
	ctx := context.Background()
	key := keyFor("/del")
	plant(t, f, key, response(time.Now(), "/del", time.Hour))
	srv.Pause()
	t.Cleanup(srv.Resume)
	start := time.Now()
	err := f.s.Delete(ctx, key)
	if d := time.Since(start); err == nil || d > slowCall {
		t.Fatalf("Delete on a hung Redis = %v after %s; want an error within about 50ms", err, d)
	}
	if n := l2Errors(f.m, "delete"); n != 1 {
		t.Fatalf("l2_errors_total{op=delete} = %v, want 1", n)
	}
	var e entry.Entry
	if layer, err := f.s.Get(ctx, key, &e); layer == LayerL1 {
		t.Fatalf("L1 still has the entry after a Delete whose L2 half failed (err %v)", err)
	}
}

// Close does not wait on a hung Redis for longer than its flush deadline;
// what it could not write is counted as dropped.
func TestCloseGivesUpOnAHungRedisAfterItsFlushDeadline(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr(), l2Timeout: 100 * time.Millisecond, opts: func(o *Options) {
		o.Writers, o.BatchSize = 1, 1
		o.Breaker.FailureThreshold = 1000 // the deadline, not the breaker, drops
	}})
	srv.Pause()
	t.Cleanup(srv.Resume)
	// Each write takes the writer 100ms or more: far more than a second's
	// worth.
	const n = 30
	for i := range n {
		mustSet(t, f.s, keyFor(fmt.Sprintf("/c/%d", i)), response(time.Now(), "/c", time.Hour))
	}
	start := time.Now()
	if err := f.s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 1600*time.Millisecond {
		t.Fatalf("Close took %s, want about its 1s flush deadline", d)
	}
	dropped, failed := counter(f.m.L2Dropped), l2Errors(f.m, "set")
	if dropped < 1 || dropped+failed != n {
		t.Fatalf("L2Dropped = %v and l2_errors_total{op=set} = %v; want some dropped and all %d accounted for", dropped, failed, n)
	}
}
