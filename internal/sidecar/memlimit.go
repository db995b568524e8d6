package sidecar

import (
	"context"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// The automatic soft memory limit keeps the floor (l1.maxSize +
// tierconfig.MemoryAllowance) while the heap the runtime allows under it
// leaves the live heap at least minRoom of garbage to grow into; below
// that, it is raised to leave raisedRoom. The room is computed as the
// runtime computes its heap goal under a soft limit (runtime/mgcpacer.go,
// memoryLimitHeapGoal): the limit less the Go memory that holds no heap
// objects (stacks, GC metadata, free spans: nonHeap), less 3% of the
// rest, which the runtime keeps back as headroom of its own.
//
// That 3% is why the room is computed rather than assumed: it grows with
// the heap. Before, the floor was kept while the live heap stayed 32Mi
// below it, and a raised limit was the live heap + 64Mi. With L1's
// preallocated queues (live heap about L1 + 14Mi at 512Mi, L1 + 37Mi at
// 2Gi: bigcache's index grows with it) the runtime's 3% ate that room as
// L1 grew: at a 512Mi L1 the GC had 8 MiB to collect in and ran 36 times
// a second under 1 KiB hits; at 2Gi it ran back to back (1,358 cycles in
// 4 s) and a hit cost three times the CPU.
//
// minRoom keeps the flood bench's 64Mi L1 (live heap L1 + about 10Mi,
// by this arithmetic about 27 MiB of room) on its floor, which is what
// keeps its RSS within L1 + 64Mi. raisedRoom is about what the former
// raised limit left at the size it was measured at, 200 KiB entries in
// every shard of a 64Mi L1 (live heap L1 + 66Mi): there a limit that left
// about 15 MiB of room made the GC run twice as often as without a
// limit, at 14% of the CPU against 4%, and a limit at or below the live
// heap made it run back to back (the runtime caps it at 50% of the CPU)
// and cut throughput by two thirds.
//
// A raised limit returns to the floor only once the floor leaves
// lowerRoom, a little more than minRoom: a live heap at the edge (the
// default 256Mi L1 leaves about 17 MiB under its floor, its index
// estimated between the 64Mi and 512Mi measurements) would otherwise
// move the limit every cycle, and each return to the floor finds the
// heap mapped up to the raised limit, which the runtime counts as
// overage against its goal: the goal falls to the live heap and the GC
// runs back to back until the scavenger has returned the difference.
const (
	minRoom    = 16 << 20
	lowerRoom  = minRoom + 4<<20
	raisedRoom = 48 << 20
	// runtimeHeadroomPercent is the runtime's
	// memoryLimitHeapGoalHeadroomPercent.
	runtimeHeadroomPercent = 3
)

// softLimitPoll is how often the sidecar looks for a finished GC cycle.
const softLimitPoll = 250 * time.Millisecond

// heapRoom is how far the runtime lets the heap grow past live under
// limit, given nonHeap (negative: the GC runs back to back).
func heapRoom(limit, live, nonHeap int64) int64 {
	goal := limit - nonHeap
	goal -= goal / 100 * runtimeHeadroomPercent
	return goal - live
}

// limitFor is the soft memory limit for a floor, the live heap after the
// last GC and the Go memory outside the heap: the floor while it leaves
// need (minRoom; lowerRoom for a limit that is raised now, so that it
// does not flap at the edge), else the least limit that leaves
// raisedRoom, but never above ceiling (see ceilingFor) unless the floor
// is. The floor is what keeps RSS within L1 + 64Mi in the common case (a
// live heap of L1 and its index); the raised limit keeps a live heap that
// outgrew it (a large L1's index and the runtime's own headroom,
// bigcache's per-shard scratch buffers grown by large entries, the old
// and new L1 side by side during a resize) from driving the GC into
// running continuously.
func limitFor(floor, ceiling, live, nonHeap, need int64) int64 {
	if heapRoom(floor, live, nonHeap) >= need {
		return floor
	}
	return raisedLimit(floor, ceiling, live, nonHeap)
}

// raisedLimit is the least limit that leaves live raisedRoom, between
// floor and ceiling (floor if ceiling is below it).
func raisedLimit(floor, ceiling, live, nonHeap int64) int64 {
	// Invert heapRoom: the goal (limit - nonHeap) less 3% of it must
	// reach live + raisedRoom.
	const keep = 100 - runtimeHeadroomPercent
	if live > (math.MaxInt64-(keep-1))/100-raisedRoom || nonHeap > math.MaxInt64/2 {
		return max(floor, ceiling) // so that nothing below overflows
	}
	raised := ((live+raisedRoom)*100+keep-1)/keep + nonHeap
	return max(floor, min(raised, ceiling))
}

// ceilingFor is the most the limit is raised to in a sidecar that started
// with floor: the floor + a quarter of the L1 it was made for + 64Mi, what
// the operator's derived container memory leaves room for above the floor
// (inject.DerivedMemory: l1.maxSize × 1.25 + 128Mi, the floor + a quarter
// of L1 + 80Mi, of which about 12Mi is RSS that is not Go memory). Past
// it the GC collects more often rather than the container being killed.
// The container keeps the memory it was created with through a live L1
// resize, so softLimit keeps the ceiling of its first floor: a grown L1's
// would pass the container, a shrunk one's would starve the old L1 still
// alive beside the new one.
func ceilingFor(floor int64) int64 {
	l1 := max(floor-int64(tierconfig.MemoryAllowance), 0)
	add := l1/4 + 64<<20
	if floor > math.MaxInt64-add {
		return math.MaxInt64
	}
	return floor + add
}

// softLimit owns the Go soft memory limit when --memory-limit is auto:
// it keeps it at limitFor(floor, the ceiling of the first floor, the live
// heap after the last GC, the Go memory outside the heap then, the room
// the floor must leave). Its zero
// value manages nothing until setFloor.
type softLimit struct {
	// set applies a limit (debug.SetMemoryLimit in the sidecar).
	set func(int64)

	mu      sync.Mutex
	floor   int64 // 0: not managed
	ceiling int64 // ceilingFor the first floor
	live    int64 // after the last GC seen
	nonHeap int64 // Go memory holding no heap objects, when last seen
	cur     int64 // last limit applied
}

func newSoftLimit() *softLimit {
	return &softLimit{set: func(n int64) { debug.SetMemoryLimit(n) }}
}

// setFloor sets the floor (l1.maxSize + the allowance) and applies the
// limit it gives at once. The first floor also sets the ceiling.
func (s *softLimit) setFloor(floor int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = floor
	if s.ceiling == 0 {
		s.ceiling = ceilingFor(floor)
	}
	s.applyLocked()
}

// observe records the live heap after a GC cycle and the Go memory
// outside the heap.
func (s *softLimit) observe(h heapSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live, s.nonHeap = h.live, h.nonHeap
	s.applyLocked()
}

func (s *softLimit) applyLocked() {
	if s.floor <= 0 {
		return
	}
	need := int64(minRoom)
	if s.cur > s.floor {
		need = lowerRoom
	}
	if n := limitFor(s.floor, s.ceiling, s.live, s.nonHeap, need); n != s.cur {
		s.cur = n
		s.set(n)
	}
}

// limit is the limit last applied (0 before the first).
func (s *softLimit) limit() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// heapSample is what run reads from the runtime: finished GC cycles, the
// live heap the last one left, and the Go memory that holds no heap
// objects, as the runtime counts it against a soft limit (mapped and not
// released, less free heap spans, less heap objects).
type heapSample struct {
	cycles  uint64
	live    int64
	nonHeap int64
}

// runtimeHeap reads heapSample from runtime/metrics.
func runtimeHeap() func() heapSample {
	samples := []metrics.Sample{
		{Name: "/gc/cycles/total:gc-cycles"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
	}
	u := func(i int) int64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0
		}
		return int64(samples[i].Value.Uint64())
	}
	return func() heapSample {
		metrics.Read(samples)
		return heapSample{
			cycles:  uint64(u(0)),
			live:    u(1),
			nonHeap: max(u(2)-u(3)-u(4)-u(5), 0),
		}
	}
}

// run observes the live heap after every GC cycle it sees, reading on
// each tick, until ctx ends.
func (s *softLimit) run(ctx context.Context, tick <-chan time.Time, read func() heapSample) {
	var seen uint64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		if h := read(); h.cycles != seen {
			seen = h.cycles
			s.observe(h)
		}
	}
}
