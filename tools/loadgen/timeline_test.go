package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// demoOriginLike counts requests like bin/demo-origin: /stats and
// /stats/reset are not counted.
func demoOriginLike(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stats/reset":
			n.Store(0)
		case "/stats":
			_ = json.NewEncoder(w).Encode(OriginStats{Requests: n.Load()})
		default:
			n.Add(1)
			time.Sleep(time.Millisecond)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestTimelineSplitsTheRunAndCountsOriginRequests(t *testing.T) {
	srv, _ := demoOriginLike(t)
	res, err := Run(context.Background(), Config{
		Targets:     []Target{{URL: "/a"}, {URL: "/b"}},
		Bases:       []string{srv.URL},
		Concurrency: 2,
		Duration:    1200 * time.Millisecond,
		MaxRequests: 1 << 40,
		Timeout:     5 * time.Second,
		Interval:    200 * time.Millisecond,
		OriginStats: srv.URL + "/stats",
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(res.Timeline); n < 6 || n > 7 {
		t.Fatalf("%d intervals, want 6 (or 7 when the run overran)", n)
	}
	var requests, origin int64
	var withOrigin int
	for i, iv := range res.Timeline {
		if math.Abs(iv.T-float64(i)*0.2) > 1e-9 {
			t.Errorf("interval %d starts at %v", i, iv.T)
		}
		requests += iv.Requests
		// An interval in which nothing finished (a stall of the loaded
		// test machine) has no per-base tally.
		if iv.Requests > 0 && (iv.Bases[srv.URL] == nil || iv.Bases[srv.URL].Requests != iv.Requests) {
			t.Errorf("interval %d: bases %v, total %d", i, iv.Bases, iv.Requests)
		}
		if iv.OriginRequests != nil {
			withOrigin++
			origin += *iv.OriginRequests
			if *iv.OriginRequests < 0 {
				t.Errorf("interval %d: origin %d", i, *iv.OriginRequests)
			}
		}
	}
	if requests != res.Requests {
		t.Errorf("intervals add up to %d requests, the run made %d", requests, res.Requests)
	}
	// Samples may be skipped when the machine is loaded; when none was,
	// the intervals add up to the origin's total.
	if withOrigin == 0 || withOrigin == len(res.Timeline) && origin != res.Origin.Requests {
		t.Errorf("%d intervals with an origin count adding up to %d; origin total %d", withOrigin, origin, res.Origin.Requests)
	}
	var text bytes.Buffer
	res.WriteText(&text)
	if !strings.Contains(text.String(), "t=  0.20s") {
		t.Errorf("text output lacks the timeline:\n%s", text.String())
	}
}

func TestTimelineWithoutBasesHasTotalsOnly(t *testing.T) {
	srv, _ := cacheLike(t)
	res, err := Run(context.Background(), Config{
		Targets:     targets(srv.URL, "/hit"),
		Concurrency: 1,
		Duration:    300 * time.Millisecond,
		MaxRequests: 1 << 40,
		Timeout:     5 * time.Second,
		Interval:    100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Timeline) < 3 || res.Timeline[0].Bases != nil || res.Timeline[0].OriginRequests != nil {
		t.Fatalf("timeline = %+v", res.Timeline)
	}
	if res.Timeline[0].XCache["HIT; layer=l1"] == 0 {
		t.Errorf("interval 0 x_cache = %v", res.Timeline[0].XCache)
	}
}

func TestIntervalIsBounded(t *testing.T) {
	c := Config{Targets: []Target{{URL: "http://127.0.0.1:1/"}}, Concurrency: 1, Duration: time.Hour, MaxRequests: 1, Timeout: time.Second}
	for _, iv := range []time.Duration{time.Millisecond, 200 * time.Millisecond} {
		c.Interval = iv
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--interval") {
			t.Errorf("interval %s over an hour: err = %v", iv, err)
		}
	}
	c.Interval = time.Second
	if err := c.Validate(); err != nil {
		t.Errorf("interval 1s over an hour: %v", err)
	}
}

func TestTimelineFoldsAnswersAfterTheDurationIntoTheLastInterval(t *testing.T) {
	// A 3 s run in 1 s intervals whose last requests finished 130 ms
	// after the duration (elapsed 3.13 s): three intervals, the late
	// answers in the third, whose origin count the final read closes.
	ws := newWorkerStats(DefaultSlow)
	for i, n := range []int{5, 6, 7, 2} {
		for range n {
			ws.slice("", answer{xcache: "HIT", latency: time.Millisecond}, time.Now().Add(-time.Duration(i)*time.Second-time.Millisecond), time.Second, false)
		}
	}
	samples := &originSamples{
		at:      []int64{0, 10, 20, 0, 0},
		classes: make([]map[string]int64, 5),
		set:     []bool{true, true, true, false, false},
	}
	r := newResult()
	r.Origin = &OriginStats{Requests: 33}
	r.timeline([]*workerStats{ws}, time.Second, 3*time.Second, 3130*time.Millisecond, false, samples)
	if len(r.Timeline) != 3 {
		t.Fatalf("%d intervals, want 3: %+v", len(r.Timeline), r.Timeline)
	}
	for i, want := range []int64{5, 6, 9} {
		if got := r.Timeline[i].Requests; got != want {
			t.Errorf("interval %d: %d requests, want %d", i, got, want)
		}
	}
	if o := r.Timeline[2].OriginRequests; o == nil || *o != 13 {
		t.Errorf("last interval's origin requests = %v, want 13 (33 at the end - 20)", o)
	}
}
