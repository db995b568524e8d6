package sidecar

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// The automatic soft memory limit leaves the floor (l1.maxSize +
// tierconfig.MemoryAllowance) once the live heap comes within
// liveMargin of it, and then allows raisedHeadroom of garbage above the
// live heap. Measured with 200 KiB entries in every shard of a 64Mi L1
// (live heap L1 + 66Mi): a limit at the live heap + 32Mi left the heap
// about 15 MiB to grow (the limit also counts stacks, GC metadata and
// free spans) and the GC ran twice as often as without a limit, at 14%
// of the CPU against 4%; a limit at or below the live heap makes the GC
// run back to back (the runtime caps it at 50% of the CPU) and cut
// throughput by two thirds.
const (
	liveMargin     = 32 << 20
	raisedHeadroom = 64 << 20
)

// softLimitPoll is how often the sidecar looks for a finished GC cycle.
const softLimitPoll = 250 * time.Millisecond

// limitFor is the soft memory limit for a floor and the live heap after
// the last GC: the floor while the live heap stays liveMargin below it,
// else the live heap plus raisedHeadroom. The floor is what keeps RSS
// within L1 + 64Mi in the common case (a live heap of L1 and its index);
// the second keeps a live heap that outgrew it (bigcache's per-shard
// scratch buffers grown by large entries, the old and new L1 side by side
// during a resize) from driving the GC into running continuously.
func limitFor(floor, live int64) int64 {
	if live > floor-liveMargin {
		return live + raisedHeadroom
	}
	return floor
}

// softLimit owns the Go soft memory limit when --memory-limit is auto:
// it keeps it at limitFor(floor, live heap after the last GC). Its zero
// value manages nothing until setFloor.
type softLimit struct {
	// set applies a limit (debug.SetMemoryLimit in the sidecar).
	set func(int64)

	mu    sync.Mutex
	floor int64 // 0: not managed
	live  int64 // after the last GC seen
	cur   int64 // last limit applied
}

func newSoftLimit() *softLimit {
	return &softLimit{set: func(n int64) { debug.SetMemoryLimit(n) }}
}

// setFloor sets the floor (l1.maxSize + the allowance) and applies the
// limit it gives at once.
func (s *softLimit) setFloor(floor int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.floor = floor
	s.applyLocked()
}

// observe records the live heap after a GC cycle.
func (s *softLimit) observe(live int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live = live
	s.applyLocked()
}

func (s *softLimit) applyLocked() {
	if s.floor <= 0 {
		return
	}
	if n := limitFor(s.floor, s.live); n != s.cur {
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

// heapSample is what run reads from the runtime: finished GC cycles and
// the live heap the last one left.
type heapSample struct {
	cycles uint64
	live   int64
}

// runtimeHeap reads heapSample from runtime/metrics.
func runtimeHeap() func() heapSample {
	samples := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/gc/heap/live:bytes"}}
	return func() heapSample {
		metrics.Read(samples)
		var h heapSample
		if samples[0].Value.Kind() == metrics.KindUint64 {
			h.cycles = samples[0].Value.Uint64()
		}
		if samples[1].Value.Kind() == metrics.KindUint64 {
			h.live = int64(samples[1].Value.Uint64())
		}
		return h
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
			s.observe(h.live)
		}
	}
}
