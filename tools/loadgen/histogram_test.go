package main

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestHistogramSmallValuesAreExact(t *testing.T) {
	h := new(Histogram)
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	for _, tt := range []struct {
		q    float64
		want int64
	}{
		{0, 1}, {0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {1, 100},
	} {
		if got := h.Quantile(tt.q); got != tt.want {
			t.Errorf("Quantile(%v) = %d, want %d", tt.q, got, tt.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Errorf("count %d min %d max %d mean %v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestHistogramLargeValuesAreWithinOnePercent(t *testing.T) {
	// Latencies from 1µs to 1s in ns, shuffled: the exact quantiles are
	// known from the sorted copy.
	r := rand.New(rand.NewPCG(1, 2))
	values := make([]int64, 100_000)
	for i := range values {
		values[i] = 1_000 + r.Int64N(1_000_000_000)
	}
	h := new(Histogram)
	for _, v := range values {
		h.Record(v)
	}
	sorted := slices.Clone(values)
	slices.Sort(sorted)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999} {
		exact := sorted[int(q*float64(len(sorted)))-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > 0.01*float64(exact) {
			t.Errorf("Quantile(%v) = %d, exact %d: want within +1%%", q, got, exact)
		}
	}
	if h.Max() != sorted[len(sorted)-1] {
		t.Errorf("Max = %d, want %d", h.Max(), sorted[len(sorted)-1])
	}
}

func TestHistogramMergeEqualsRecordingEverything(t *testing.T) {
	a, b, all := new(Histogram), new(Histogram), new(Histogram)
	for v := int64(0); v < 5000; v++ {
		x := v * v
		all.Record(x)
		if v%2 == 0 {
			a.Record(x)
		} else {
			b.Record(x)
		}
	}
	a.Merge(b)
	for _, q := range []float64{0.1, 0.5, 0.99, 1} {
		if a.Quantile(q) != all.Quantile(q) {
			t.Errorf("Quantile(%v): merged %d, direct %d", q, a.Quantile(q), all.Quantile(q))
		}
	}
	if a.Count() != all.Count() || a.Min() != all.Min() || a.Max() != all.Max() {
		t.Error("merged count/min/max differ")
	}
}

func TestHistogramClampsHugeAndNegativeValues(t *testing.T) {
	h := new(Histogram)
	h.Record(-5)
	h.Record(1 << 62)
	if h.Min() != 0 || h.Max() != 1<<62 || h.Quantile(1) != 1<<62 {
		t.Errorf("min %d max %d q1 %d", h.Min(), h.Max(), h.Quantile(1))
	}
	if new(Histogram).Quantile(0.5) != 0 {
		t.Error("empty histogram: want 0")
	}
}

func TestBucketBoundsRoundTrip(t *testing.T) {
	for v := int64(0); v < 1<<20; v += 1 + v/1000 {
		i := bucketOf(v)
		if hi := bucketHigh(i); v > hi {
			t.Fatalf("value %d in bucket %d whose high is %d", v, i, hi)
		}
		if i > 0 && v <= bucketHigh(i-1) {
			t.Fatalf("value %d in bucket %d but fits in bucket %d", v, i, i-1)
		}
	}
	if got := bucketOf(maxValue); got != bucketCount-1 {
		t.Errorf("bucketOf(maxValue) = %d, want %d", got, bucketCount-1)
	}
}

// FuzzHistogram checks invariants for arbitrary values: quantiles never
// decrease with q, stay within [min, max], and never understate the exact
// quantile by more than the bucket precision.
func FuzzHistogram(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 255, 0, 7})
	f.Add([]byte("latencies of a cache"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		h := new(Histogram)
		values := make([]int64, 0, len(data)/2+1)
		for i := 0; i < len(data); i += 2 {
			v := int64(data[i])
			if i+1 < len(data) {
				v <<= data[i+1] % 40 // spread over ns to minutes
			}
			values = append(values, v)
			h.Record(v)
		}
		slices.Sort(values)
		prev := int64(-1)
		for _, q := range []float64{0, 0.1, 0.5, 0.9, 0.99, 1} {
			got := h.Quantile(q)
			if got < prev || got < h.Min() || got > h.Max() {
				t.Fatalf("Quantile(%v) = %d after %d; min %d max %d", q, got, prev, h.Min(), h.Max())
			}
			prev = got
		}
		if h.Quantile(1) != values[len(values)-1] || h.Min() != values[0] {
			t.Fatalf("q1 %d min %d, want %d %d", h.Quantile(1), h.Min(), values[len(values)-1], values[0])
		}
	})
}
