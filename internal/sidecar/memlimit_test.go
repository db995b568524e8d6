package sidecar

import (
	"context"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestAutomaticMemoryLimitIsL1PlusTheAllowance(t *testing.T) {
	cases := map[string]struct {
		l1   tierconfig.Size
		want int64
	}{
		"the flood bench's 64Mi L1 gets 112Mi":     {64 << 20, 112 << 20},
		"the default 256Mi L1 gets 304Mi":          {256 << 20, 304 << 20},
		"a 4Gi L1 gets only 48Mi more, not a 1Gi":  {4 << 30, 4<<30 + 48<<20},
		"the smallest L1 still gets the allowance": {1 << 20, 49 << 20},
	}
	for name, c := range cases {
		got, err := memoryLimit("auto", "", c.l1)
		if err != nil || got != c.want {
			t.Errorf("%s: got %d, %v; want %d", name, got, err, c.want)
		}
	}
}

func TestLimitForKeepsTheFloorUnlessTheLiveHeapNeedsMore(t *testing.T) {
	const floor = 112 << 20
	cases := map[string]struct {
		live, want int64
	}{
		"before any GC the floor holds":                              {0, floor},
		"a live heap of L1 and its index stays under the floor":      {74 << 20, floor},
		"a live heap exactly the margin below the floor keeps it":    {floor - liveMargin, floor},
		"a live heap a byte closer gets the headroom above it":       {floor - liveMargin + 1, floor - liveMargin + 1 + raisedHeadroom},
		"a live heap above the floor gets the headroom above it":     {128 << 20, 192 << 20},
		"a live heap of twice the L1 (grown scratch buffers) is met": {140 << 20, 204 << 20},
	}
	for name, c := range cases {
		if got := limitFor(floor, c.live); got != c.want {
			t.Errorf("%s: limitFor(%d, %d) = %d, want %d", name, floor, c.live, got, c.want)
		}
	}
}

// The loop observes the live heap only after a new GC cycle, applies a
// raised limit, lowers it back to the floor when the heap shrinks, and
// follows a new floor (a resized L1).
func TestSoftLimitFollowsTheLiveHeapAfterEachCycle(t *testing.T) {
	applied := make(chan int64, 16)
	s := &softLimit{set: func(n int64) { applied <- n }}
	next := func() int64 {
		t.Helper()
		select {
		case n := <-applied:
			return n
		case <-time.After(10 * time.Second):
			t.Fatal("no limit applied within 10s")
			return 0
		}
	}
	s.setFloor(100 << 20)
	if got := next(); got != 100<<20 {
		t.Fatalf("first limit = %d, want the floor", got)
	}

	samples := make(chan heapSample)
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx, tick, func() heapSample { return <-samples }) }()
	step := func(h heapSample) {
		t.Helper()
		tick <- time.Time{}
		samples <- h
	}

	step(heapSample{cycles: 1, live: 90 << 20})
	if got := next(); got != 154<<20 {
		t.Fatalf("after a 90Mi live heap: %d, want 154Mi", got)
	}
	// The same cycle again is not observed again (a higher live value
	// would raise the limit if it were).
	step(heapSample{cycles: 1, live: 200 << 20})
	step(heapSample{cycles: 2, live: 10 << 20})
	if got := next(); got != 100<<20 {
		t.Fatalf("after the heap shrank: %d, want the floor back", got)
	}
	s.setFloor(300 << 20)
	if got := next(); got != 300<<20 {
		t.Fatalf("after a new floor: %d, want it", got)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop when its context ended")
	}
	select {
	case n := <-applied:
		t.Fatalf("unexpected limit %d applied", n)
	default:
	}
}

// With the real runtime: a live heap above the floor raises the process's
// soft limit above that heap, so the GC does not run back to back.
func TestSoftLimitRaisesTheRuntimeLimitAboveARealLiveHeap(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })

	live := make([]byte, 64<<20)
	for i := range live {
		live[i] = byte(i)
	}
	s := newSoftLimit()
	s.setFloor(16 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	done := make(chan struct{})
	go func() { defer close(done); s.run(ctx, tick.C, runtimeHeap()) }()
	defer func() { cancel(); <-done }()

	deadline := time.Now().Add(10 * time.Second)
	for debug.SetMemoryLimit(-1) < int64(len(live))+raisedHeadroom {
		if time.Now().After(deadline) {
			t.Fatalf("soft limit %d after 10s with a %d-byte live heap, want at least the heap + %d",
				debug.SetMemoryLimit(-1), len(live), raisedHeadroom)
		}
		runtime.GC()
	}
	runtime.KeepAlive(live)
}
