package proxy

import "testing"

// The L1 hit path must not allocate more than it does (STYLE.md 12): the
// benchmarks measure it, this test holds the line. It runs without the
// race detector (make test-alloc), which adds allocations of its own.
func TestL1HitPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own; make test-alloc runs this without it")
	}
	for name, tc := range map[string]struct {
		bench func(*testing.B)
		max   int64
	}{
		// Rule match, key, L1 lookup and decode, freshness (2 when this
		// test was written, as docs/benchmarks.md records).
		"the hit path before writing allocates at most 2 times": {BenchmarkL1HitPath, 2},
		// The whole handler to an in-memory writer (4 when written).
		"a whole hit allocates at most 4 times": {BenchmarkServeHTTPHit, 4},
	} {
		r := testing.Benchmark(tc.bench)
		if r.N == 0 {
			t.Fatalf("%s: the benchmark failed", name)
		}
		if got := r.AllocsPerOp(); got > tc.max {
			t.Errorf("%s: %d allocs/op (%d B/op), want <= %d", name, got, r.AllocedBytesPerOp(), tc.max)
		}
	}
}
