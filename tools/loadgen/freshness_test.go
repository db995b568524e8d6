package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestProbeFreshnessTimesHowLongAResponseStaysAHit(t *testing.T) {
	const fresh = 150 * time.Millisecond
	var mu sync.Mutex
	first := map[string]time.Time{}
	// A cache that serves each path as a HIT for 150 ms after its first
	// request (a MISS), then as STALE.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		t0, seen := first[r.URL.RequestURI()]
		if !seen {
			first[r.URL.RequestURI()] = time.Now()
		}
		mu.Unlock()
		switch {
		case !seen:
			w.Header().Set("X-Cache", "MISS")
		case time.Since(t0) < fresh:
			w.Header().Set("X-Cache", "HIT; layer=l1")
		default:
			w.Header().Set("X-Cache", "STALE; layer=l1")
		}
	}))
	t.Cleanup(srv.Close)
	tr := NewTransport(1)
	defer tr.CloseIdleConnections()
	trials, err := ProbeFreshness(context.Background(), NewClient(tr, 5*time.Second),
		FreshnessConfig{Base: srv.URL, Prefix: "p", Trials: 2, TTL: 1, Poll: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(trials) != 2 {
		t.Fatalf("%d trials, want 2", len(trials))
	}
	for i, tr := range trials {
		// Bounds wide enough for a loaded machine's late polls.
		if tr.FreshS < fresh.Seconds() || tr.FreshS > 3 || tr.Then != "STALE; layer=l1" {
			t.Errorf("trial %d: %+v, want a HIT for 0.15 s (up to 3 s when polls run late), then STALE", i, tr)
		}
		// Trial i starts at i/2 of a second (a scheduler may be late).
		if want := float64(i) / 2; tr.Offset < want || tr.Offset >= want+0.45 {
			t.Errorf("trial %d fetched at +%.3f s of a second, want about +%.1f", i, tr.Offset, want)
		}
	}
}

func TestProbeFreshnessRejectsBadConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  FreshnessConfig
		want string
	}{
		{"no trials", FreshnessConfig{Base: "http://127.0.0.1:1", TTL: 1, Poll: time.Millisecond}, "--trials"},
		{"a ttl of zero", FreshnessConfig{Base: "http://127.0.0.1:1", Trials: 1, Poll: time.Millisecond}, "--ttl"},
		{"no poll period", FreshnessConfig{Base: "http://127.0.0.1:1", Trials: 1, TTL: 1}, "--poll"},
		{"a base off loopback", FreshnessConfig{Base: "http://10.0.0.1", Trials: 1, TTL: 1, Poll: time.Millisecond}, "--base"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ProbeFreshness(context.Background(), http.DefaultClient, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ProbeFreshness(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
			}
		})
	}
}
