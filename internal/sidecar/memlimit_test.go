package sidecar

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testchild"
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
	const mi = 1 << 20
	type want int
	const (
		theFloor want = iota
		raised        // the least limit leaving raisedRoom
		theCeiling
	)
	cases := map[string]struct {
		floor, live, nonHeap int64
		want                 want
	}{
		"before any GC the floor holds": {112 * mi, 0, 0, theFloor},
		// The flood bench: L1 64Mi, a live heap of L1 + about 10Mi, RSS
		// kept within L1 + 64Mi by staying on the floor.
		"a live heap of a 64Mi L1 and its index stays on the floor": {112 * mi, 74 * mi, 8 * mi, theFloor},
		// The warm-hit bench: L1 512Mi preallocated, live L1 + 14Mi; the
		// floor left the GC 8 MiB and it ran 36 times a second.
		"a 512Mi L1 is given room above its floor": {560 * mi, 526 * mi, 12 * mi, raised},
		// L1 2Gi, live L1 + 37Mi: below the floor's goal, back-to-back GC.
		"a 2Gi L1 is given room above its floor":                          {2096 * mi, 2085 * mi, 12 * mi, raised},
		"a live heap grown by a 64Mi L1's scratch buffers is met":         {112 * mi, 120 * mi, 8 * mi, raised},
		"a live heap past what the container leaves stops at the ceiling": {112 * mi, 300 * mi, 8 * mi, theCeiling},
		// 200 KiB entries in all 256 shards of a 64Mi L1 (live L1 + 66Mi)
		// and more:
		// the ceiling still leaves the GC about 40 MiB.
		"the measured worst case of scratch buffers gets the ceiling": {112 * mi, 135 * mi, 8 * mi, theCeiling},
		"a live heap too large to compute with gets the ceiling":      {112 * mi, math.MaxInt64, 8 * mi, theCeiling},
		// (live + raisedRoom) × 100 + 96 is MaxInt64 + 89 here.
		"the largest live heap the guard lets through gets the ceiling": {112 * mi, math.MaxInt64/100 - raisedRoom, 8 * mi, theCeiling},
		"a floor too large to add to saturates":                         {math.MaxInt64, math.MaxInt64 / 2, 8 * mi, theFloor},
	}
	for name, c := range cases {
		got := limitFor(c.floor, ceilingFor(c.floor), c.live, c.nonHeap, minRoom)
		switch c.want {
		case theFloor:
			if got != c.floor {
				t.Errorf("%s: limitFor = %d, want the floor %d", name, got, c.floor)
			}
		case theCeiling:
			if got != ceilingFor(c.floor) {
				t.Errorf("%s: limitFor = %d, want the ceiling %d", name, got, ceilingFor(c.floor))
			}
			if c.live == 135*mi && heapRoom(got, c.live, c.nonHeap) < 32*mi {
				t.Errorf("%s: the ceiling leaves %d bytes of room, want at least 32Mi", name, heapRoom(got, c.live, c.nonHeap))
			}
		case raised:
			if got <= c.floor || got >= ceilingFor(c.floor) {
				t.Errorf("%s: limitFor = %d, want between the floor %d and the ceiling %d", name, got, c.floor, ceilingFor(c.floor))
			}
			if r := heapRoom(got, c.live, c.nonHeap); r < raisedRoom {
				t.Errorf("%s: limitFor = %d leaves the heap %d bytes of room, want at least %d", name, got, r, raisedRoom)
			}
			if r := heapRoom(got-4096, c.live, c.nonHeap); r >= raisedRoom {
				t.Errorf("%s: limitFor = %d is not the least limit (to a page) leaving %d bytes of room", name, got, raisedRoom)
			}
		}
	}
	// At the edge: the floor as long as it leaves minRoom, raised a byte
	// past that.
	const floor, nonHeap = 560 * mi, 12 * mi
	edge := heapRoom(floor, 0, nonHeap) - minRoom
	if got := limitFor(floor, ceilingFor(floor), edge, nonHeap, minRoom); got != floor {
		t.Errorf("a live heap leaving exactly minRoom under the floor: %d, want the floor", got)
	}
	if got := limitFor(floor, ceilingFor(floor), edge+1, nonHeap, minRoom); got <= floor {
		t.Errorf("a live heap leaving a byte less than minRoom: %d, want above the floor", got)
	}
}

// The runtime's own arithmetic: the limit less the memory outside the
// heap, less 3% of the rest, is how far the heap may grow.
func TestHeapRoomIsTheRuntimesGoalLessTheLiveHeap(t *testing.T) {
	if got, want := heapRoom(1100, 100, 100), int64(1000-30-100); got != want {
		t.Errorf("heapRoom(1100, 100, 100) = %d, want %d", got, want)
	}
	if got := heapRoom(2096<<20, 2085<<20, 12<<20); got >= 0 {
		t.Errorf("a 2Gi L1 on its former floor: room %d, want none (the GC running back to back)", got)
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

	step(heapSample{cycles: 1, live: 90 << 20, nonHeap: 4 << 20})
	if got, want := next(), limitFor(100<<20, ceilingFor(100<<20), 90<<20, 4<<20, minRoom); got != want || got <= 100<<20 {
		t.Fatalf("after a 90Mi live heap: %d, want %d, above the floor", got, want)
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

// With the real runtime and a large L1's worth of live heap (1 GiB,
// never touched, so it costs no RSS): on its floor, L1 + 48Mi, the
// runtime's heap goal would be about the live heap (it keeps 3% of the
// limit back, 32 MiB here), and the GC would run back to back. The soft
// limit must leave the heap the room it means to.
func TestSoftLimitLeavesALargeLiveHeapRoomToGrow(t *testing.T) {
	testchild.Run(t, nil, func(t *testing.T) {
		prev := debug.SetMemoryLimit(-1)
		t.Cleanup(func() { debug.SetMemoryLimit(prev) })

		live := make([]byte, 1<<30)
		s := newSoftLimit()
		s.setFloor(int64(tierconfig.AutoMemoryLimit(1 << 30)))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		done := make(chan struct{})
		go func() { defer close(done); s.run(ctx, tick.C, runtimeHeap()) }()
		defer func() { cancel(); <-done }()

		samples := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
		room := func() int64 {
			metrics.Read(samples)
			return int64(samples[0].Value.Uint64()) - int64(samples[1].Value.Uint64())
		}
		const want = raisedRoom / 2 // what the runtime's other terms cannot eat
		deadline := time.Now().Add(10 * time.Second)
		for runtime.GC(); room() < want; runtime.GC() {
			if time.Now().After(deadline) {
				t.Fatalf("after 10s the runtime lets a %d-byte live heap grow by %d bytes under a soft limit of %d, want at least %d",
					len(live), room(), debug.SetMemoryLimit(-1), want)
			}
			time.Sleep(10 * time.Millisecond) // let the loop see the cycle; the condition is the barrier
		}
		runtime.KeepAlive(live)
	})
}

// The operator derives the container's memory from the L1 the pod was
// created with (inject.DerivedMemory: 1.25 × L1 + 128Mi), and a live
// resize does not change it: the limit is never raised past what that
// container leaves room for (16Mi below it, for the RSS that is not Go
// memory), and a shrunk L1 does not take that room away while the old
// L1 is still alive.
func TestTheCeilingStaysWithTheContainerOnALiveResize(t *testing.T) {
	const mi = 1 << 20
	auto := func(l1 int64) int64 { return int64(tierconfig.AutoMemoryLimit(tierconfig.Size(l1))) }
	container := func(l1 int64) int64 { return l1 + l1/4 + 128*mi }

	// Grown from 2Gi to 2.5Gi, once the old L1 is gone: the new floor
	// (2608Mi) fits the 2688Mi container, the limit leaving 48 MiB of
	// room above the new L1 and its index would not.
	s := &softLimit{set: func(int64) {}}
	s.setFloor(auto(2048 * mi))
	s.observe(heapSample{cycles: 1, live: 2085 * mi, nonHeap: 12 * mi})
	s.setFloor(auto(2560 * mi))
	s.observe(heapSample{cycles: 2, live: 2605 * mi, nonHeap: 12 * mi})
	if got, most := s.limit(), container(2048*mi)-16*mi; got > most {
		t.Errorf("a 2Gi L1 grown to 2.5Gi: limit %dMi, want at most %dMi (the container's %dMi less 16Mi)", got/mi, most/mi, container(2048*mi)/mi)
	}

	// Shrunk from 1Gi to 256Mi, while both L1s are alive: the new floor's
	// own ceiling (432Mi) is below the live heap (the GC would run back
	// to back), the 1408Mi container leaves room for it.
	s = &softLimit{set: func(int64) {}}
	s.setFloor(auto(1024 * mi))
	s.setFloor(auto(256 * mi))
	const live, nonHeap = (1024 + 14 + 256 + 12) * mi, 12 * mi
	s.observe(heapSample{cycles: 1, live: live, nonHeap: nonHeap})
	got := s.limit()
	if most := container(1024*mi) - 16*mi; got > most {
		t.Errorf("a 1Gi L1 shrunk to 256Mi: limit %dMi, want at most %dMi", got/mi, most/mi)
	}
	if r := heapRoom(got, live, nonHeap); r < minRoom {
		t.Errorf("a 1Gi L1 shrunk to 256Mi, both alive: limit %dMi leaves the heap %d bytes of room, want at least %d", got/mi, r, minRoom)
	}
}

// The default 256Mi L1 (live heap about L1 + 12Mi) leaves about 16 MiB
// of room under its floor, at the edge: a live heap that moves by a MiB
// between cycles must not move the limit between the floor and the
// raised limit every cycle. Each return to the floor finds the heap
// mapped up to the raised limit, which the runtime subtracts from its
// goal as overage: the goal falls to the live heap and the GC runs back
// to back until the scavenger has returned it.
func TestARaisedLimitDoesNotFlapBackToTheFloorAtTheEdge(t *testing.T) {
	const mi = 1 << 20
	var applied []int64
	s := &softLimit{set: func(n int64) { applied = append(applied, n) }}
	const floor, nonHeap = 304 * mi, 10 * mi
	s.setFloor(floor)
	edge := heapRoom(floor, 0, nonHeap) - minRoom // the largest live heap the floor is kept for
	for i := range 8 {
		live := edge + mi
		if i%2 == 1 {
			live = edge - mi
		}
		s.observe(heapSample{cycles: uint64(i + 1), live: live, nonHeap: nonHeap})
	}
	for i, n := range applied[1:] {
		if i > 0 && n == floor {
			t.Fatalf("limits applied %v: back to the floor after it was raised, with the live heap a MiB on either side of the edge", applied)
		}
	}
	// A live heap that really shrank, as when an old L1 is released,
	// returns to the floor.
	s.observe(heapSample{cycles: 9, live: edge - 8*mi, nonHeap: nonHeap})
	if got := s.limit(); got != floor {
		t.Errorf("after the live heap fell 8Mi below the edge: %d, want the floor %d", got, floor)
	}
}

// heapRoom copies the runtime's arithmetic (its 3% and the metrics that
// make nonHeap): with the GOGC goal off, the runtime's own heap goal
// under a limit must be the live heap + heapRoom, or a Go upgrade has
// changed what the limit leaves. The 74 MiB live heap is never touched,
// so it costs no RSS.
func TestHeapRoomMatchesTheRuntimesHeapGoal(t *testing.T) {
	testchild.Run(t, nil, func(t *testing.T) {
		prevLimit := debug.SetMemoryLimit(-1)
		prevGOGC := debug.SetGCPercent(-1)
		t.Cleanup(func() { debug.SetMemoryLimit(prevLimit); debug.SetGCPercent(prevGOGC) })
		live := make([]byte, 74<<20)
		// Memory freed earlier (another test's heap) and still mapped would
		// count as overage, which heapRoom leaves out: release it first.
		debug.FreeOSMemory()
		read := runtimeHeap()
		goal := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
		for _, room := range []int64{16 << 20, 48 << 20, 256 << 20} {
			runtime.GC()
			h := read()
			limit := h.live + h.nonHeap + room
			debug.SetMemoryLimit(limit)
			h = read()
			metrics.Read(goal)
			got, want := int64(goal[0].Value.Uint64()), h.live+heapRoom(limit, h.live, h.nonHeap)
			if d := got - want; d < -1<<20 || d > 1<<20 {
				t.Errorf("limit %d, live heap %d, nonHeap %d: the runtime's heap goal is %d, heapRoom makes it %d", limit, h.live, h.nonHeap, got, want)
			}
		}
		runtime.KeepAlive(live)
	})
}

// The flood bench's 64Mi L1 (a live heap of L1 + about 10Mi) keeps its
// floor with the real runtime's memory outside the heap, which is what
// keeps its RSS within L1 + 64Mi. The live heap is never touched.
func TestSoftLimitKeepsTheFloodL1OnItsFloor(t *testing.T) {
	testchild.Run(t, nil, func(t *testing.T) {
		prev := debug.SetMemoryLimit(-1)
		t.Cleanup(func() { debug.SetMemoryLimit(prev) })
		live := make([]byte, 74<<20)
		floor := int64(tierconfig.AutoMemoryLimit(64 << 20))
		s := newSoftLimit()
		s.setFloor(floor)
		read := runtimeHeap()
		for range 3 {
			runtime.GC()
			h := read()
			s.observe(h)
			if got := s.limit(); got != floor {
				t.Fatalf("live heap %d, nonHeap %d (room %d under the floor): limit %d, want the floor %d",
					h.live, h.nonHeap, heapRoom(floor, h.live, h.nonHeap), got, floor)
			}
			if r := heapRoom(floor, h.live, h.nonHeap); r < lowerRoom {
				t.Errorf("live heap %d, nonHeap %d: the floor leaves %d bytes of room, want at least %d (a raised limit would never come back)", h.live, h.nonHeap, r, lowerRoom)
			}
		}
		runtime.KeepAlive(live)
	})
}
