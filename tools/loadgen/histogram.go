package main

import (
	"math"
	"math/bits"
	"time"
)

// subBits sets the histogram's precision: each power-of-two range is split
// into 2^subBits buckets, so a recorded value is known to within 1/128
// (under 0.8%). Values below 2^subBits are exact.
const (
	subBits  = 7
	subCount = 1 << subBits
	// maxValue is the largest value kept apart; larger values share the
	// last bucket (their exact maximum is still tracked). 2^37 ns ≈ 137 s.
	maxValue    = int64(1)<<37 - 1
	bucketCount = subCount + (37-subBits)*subCount
)

// Histogram records non-negative int64 values (here: latencies in
// nanoseconds) in log-linear buckets, in the manner of an HDR histogram: a
// fixed 30 KiB however many values it holds. It is not safe for concurrent
// use: each worker keeps its own and they are merged at the end. The zero
// value is an empty histogram.
type Histogram struct {
	counts [bucketCount]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

// Record adds one value; negative values count as 0.
func (h *Histogram) Record(v int64) {
	v = max(v, 0)
	if h.n == 0 || v < h.min {
		h.min = v
	}
	h.max = max(h.max, v)
	h.n++
	h.sum += float64(v)
	h.counts[bucketOf(min(v, maxValue))]++
}

// RecordDuration adds d in nanoseconds.
func (h *Histogram) RecordDuration(d time.Duration) { h.Record(int64(d)) }

// Merge adds every value of o to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.n += o.n
	h.sum += o.sum
	for i, c := range o.counts {
		h.counts[i] += c
	}
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Max is the largest recorded value, exactly.
func (h *Histogram) Max() int64 { return h.max }

// Min is the smallest recorded value, exactly.
func (h *Histogram) Min() int64 { return h.min }

// Mean is the exact arithmetic mean of the recorded values.
func (h *Histogram) Mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

// Quantile returns the value at quantile q (0..1): the smallest value v such
// that at least q of the recorded values are <= v, to within the bucket
// precision. It reports the highest value of v's bucket, clamped to the
// recorded min and max, so it never understates a latency.
func (h *Histogram) Quantile(q float64) int64 {
	if h.n == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	// ceil(q·n), forgiving the float error in e.g. 0.99·100.
	rank := uint64(math.Ceil(q*float64(h.n) - 1e-9))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			if i == bucketCount-1 {
				return h.max // the overflow bucket has no upper bound
			}
			return min(max(bucketHigh(i), h.min), h.max)
		}
	}
	return h.max
}

// bucketOf maps 0 <= v <= maxValue to its bucket.
func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(uint64(v)) - subBits - 1
	return subCount + shift*subCount + int(v>>shift) - subCount
}

// bucketHigh is the largest value that falls in bucket i.
func bucketHigh(i int) int64 {
	if i < subCount {
		return int64(i)
	}
	shift := (i - subCount) / subCount
	sub := int64((i-subCount)%subCount + subCount)
	return (sub+1)<<shift - 1
}
