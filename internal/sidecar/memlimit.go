package sidecar

import (
	"context"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// liveHeadroom is the garbage the automatic soft memory limit lets the
// heap gather above its live part once that live part has outgrown the
// floor (l1.maxSize + tierconfig.MemoryAllowance). Measured under the
// flood of make bench, part 7: with about 25Mi of headroom a GC cycle
// costs about 1% of CPU; a limit at or below the live heap would make the
// GC run back to back (the runtime caps it at 50% of the CPU) and cut
// throughput by two thirds.
const liveHeadroom = 32 << 20

// softLimitPoll is how often the sidecar looks for a finished GC cycle.
const softLimitPoll = 250 * time.Millisecond

// limitFor is the soft memory limit for a floor and the live heap after
// the last GC: the floor, or the live heap plus liveHeadroom when that is
// more. The floor is what keeps RSS within L1 + 64Mi in the common case;
// the second term keeps a live heap that outgrew it (bigcache's per-shard
// scratch buffers grown by large entries, the old and new L1 side by side
// during a resize) from driving the GC into running continuously.
func limitFor(floor, live int64) int64 {
	if live > floor-liveHeadroom {
		return live + liveHeadroom
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
