package main

import (
	"context"
	"math"
	"net/http"
	"time"
)

// originSamples holds the origin's request counter as polled at the end of
// each interval: at[k] is the count at start + k·interval (at[0] is 0: the
// counter is reset before the run).
type originSamples struct {
	at      []int64
	classes []map[string]int64 // the origin's by_class at the same times
	set     []bool
}

func newOriginSamples(cfg Config) *originSamples {
	n := int(cfg.Duration/cfg.Interval) + 2
	return &originSamples{at: make([]int64, n), classes: make([]map[string]int64, n), set: make([]bool, n)}
}

// poll reads statsURL at the end of every interval until ctx ends. A failed or late read leaves its sample unset: the intervals
// on either side of it then report no origin count rather than a wrong one.
func (o *originSamples) poll(ctx context.Context, client *http.Client, statsURL string, start time.Time, interval time.Duration) {
	// The counter was reset just before the run: it starts at 0 by
	// definition (a read here could already count the first requests, and
	// the intervals would then not add up to the final total).
	o.at[0], o.set[0] = 0, true
	for k := 1; k < len(o.at); k++ {
		t := time.NewTimer(time.Until(start.Add(time.Duration(k) * interval)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, interval/2)
		s, err := ReadOriginStats(rctx, client, statsURL)
		cancel()
		late := time.Since(start.Add(time.Duration(k)*interval)) > interval/2
		if err == nil && !late {
			o.at[k], o.classes[k], o.set[k] = s.Requests, s.ByClass, true
		}
	}
}

// timeline builds r.Timeline from the workers' interval tallies. The final
// read of the origin's counter (r.Origin) closes the last interval.
// elapsed may exceed the run's duration by the time the last requests took
// to finish: the intervals cover the duration, and those answers count in
// the last one.
func (r *Result) timeline(workers []*workerStats, interval, duration, elapsed time.Duration, byBase bool, samples *originSamples) {
	// A sliver of an interval at the very end (the timer's last tick and
	// the run's end racing) is folded into the one before it.
	n := int(math.Ceil(float64(min(elapsed, duration))/float64(interval) - 0.05))
	n = max(n, 1)
	r.Timeline = make([]Interval, n)
	for i := range r.Timeline {
		iv := &r.Timeline[i]
		iv.T = (time.Duration(i) * interval).Seconds()
		end := time.Duration(i+1) * interval
		if i == n-1 {
			end = elapsed
		}
		iv.Seconds = (end - time.Duration(i)*interval).Seconds()
		iv.Tally = *newTally()
		if byBase {
			iv.Bases = map[string]*Tally{}
		}
	}
	for _, ws := range workers {
		for i, m := range ws.timeline {
			iv := &r.Timeline[min(i, n-1)]
			for base, t := range m {
				iv.Tally.merge(t)
				if byBase {
					tallyOf(iv.Bases, base).merge(t)
				}
			}
		}
	}
	for i := range r.Timeline {
		iv := &r.Timeline[i]
		iv.Tally.finish()
		for _, t := range iv.Bases {
			t.finish()
		}
		if samples == nil || i >= len(samples.at) {
			continue
		}
		lo, hiSet := i, i+1 < len(samples.at) && samples.set[i+1]
		hi := int64(0)
		var hiClasses map[string]int64
		if hiSet {
			hi, hiClasses = samples.at[i+1], samples.classes[i+1]
		}
		if i == n-1 && r.Origin != nil {
			hi, hiClasses, hiSet = r.Origin.Requests, r.Origin.ByClass, true
		}
		if samples.set[lo] && hiSet {
			d := hi - samples.at[lo]
			iv.OriginRequests = &d
			iv.OriginByClass = classDelta(samples.classes[lo], hiClasses)
		}
	}
}

// classDelta is hi - lo class by class, leaving out classes that did not
// change (nil when none did).
func classDelta(lo, hi map[string]int64) map[string]int64 {
	var d map[string]int64
	for k, v := range hi {
		if n := v - lo[k]; n != 0 {
			if d == nil {
				d = map[string]int64{}
			}
			d[k] = n
		}
	}
	return d
}
