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

func TestNormalizeXCache(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"a layer is kept", "HIT; layer=l2", "HIT; layer=l2"},
		{"the first token is upper-cased, the rest kept", "hit; layer=l1", "HIT; layer=l1"},
		{"white space runs become one space", "  MISS;\t coalesced ", "MISS; coalesced"},
		{"a bare token stays bare", "miss", "MISS"},
		{"an empty value is none", "  ", NoXCache},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := NormalizeXCache(tt.in); got != tt.want {
				t.Errorf("NormalizeXCache(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// sidecarLike answers like one cache replica: the first request for a path
// is a plain MISS, later ones are L1 hits; /coalesced/ paths answer
// "MISS; coalesced" and /missing/ paths 404 with a MISS.
func sidecarLike(t *testing.T) *httptest.Server {
	t.Helper()
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/missing/"):
			w.Header().Set("X-Cache", "MISS")
			http.NotFound(w, r)
			return
		case strings.HasPrefix(r.URL.Path, "/coalesced/"):
			w.Header().Set("X-Cache", "MISS; coalesced")
		default:
			mu.Lock()
			first := !seen[r.URL.RequestURI()]
			seen[r.URL.RequestURI()] = true
			mu.Unlock()
			if first {
				w.Header().Set("X-Cache", "MISS")
			} else {
				w.Header().Set("X-Cache", "HIT; layer=l1")
			}
		}
		_, _ = w.Write([]byte("body"))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestKeyStatsCountPlainMissesPerKeyAcrossServers(t *testing.T) {
	a, b := sidecarLike(t), sidecarLike(t)
	// 11 keys over 2 servers in turn: key k's 4 requests alternate between
	// the servers, so each server fetches each key once.
	ts := make([]Target, 0, 13)
	for k := range 11 {
		ts = append(ts, Target{URL: "/k/" + string(rune('a'+k))})
	}
	res, err := Run(context.Background(), Config{
		Targets:     ts,
		Chooser:     NewSequence(len(ts)),
		Bases:       []string{a.URL, b.URL + "/"},
		Concurrency: 1,
		Duration:    30 * time.Second,
		MaxRequests: 44,
		Timeout:     5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	k := res.Keys
	if k == nil || k.Requested != 11 || k.Fetched != 11 || k.Misses != 22 || k.MissesPerFetchedKey != 2 {
		t.Fatalf("keys = %+v, want 11 answered, 11 fetched, 22 misses, 2 per key", k)
	}
	if len(k.ByMisses) != 1 || k.ByMisses["2"] != 11 {
		t.Errorf("by misses = %v, want 11 keys with 2", k.ByMisses)
	}
	if res.XCacheDetail["MISS"] != 22 || res.XCacheDetail["HIT; layer=l1"] != 22 || res.XCache["HIT"] != 22 {
		t.Errorf("x_cache %v, detail %v", res.XCache, res.XCacheDetail)
	}
	// Round robin: each server got half, with its own X-Cache mix.
	for _, base := range []string{a.URL, b.URL} {
		bt := res.Bases[base]
		if bt == nil || bt.Requests != 22 || bt.XCache["MISS"] != 11 || bt.XCache["HIT; layer=l1"] != 11 || bt.MeanMs <= 0 {
			t.Errorf("base %s: %+v (all: %v)", base, bt, res.Bases)
		}
	}
}

func TestKeyStatsLeaveOutMissingTargetsAndCoalescedMisses(t *testing.T) {
	srv := sidecarLike(t)
	res, err := Run(context.Background(), Config{
		Targets:     []Target{{URL: "/coalesced/1"}, {URL: "/missing/1", Missing: true}, {URL: "/k/1"}},
		Bases:       []string{srv.URL},
		Concurrency: 1,
		Duration:    30 * time.Second,
		MaxRequests: 30,
		Timeout:     5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	k := res.Keys
	if k.Requested != 2 || k.Fetched != 1 || k.Misses != 1 {
		t.Errorf("keys = %+v, want 2 answered (the 404 left out), 1 fetched once", k)
	}
	if res.Errors != 0 || res.XCacheDetail["MISS; coalesced"] != 10 || res.XCache["MISS"] != 21 {
		t.Errorf("errors %d, x_cache %v, detail %v", res.Errors, res.XCache, res.XCacheDetail)
	}
}

func TestKeyStatsBucketManyMisses(t *testing.T) {
	k := newKeyCounters(make([]Target, 3))
	for range 12 {
		k.record(0, PlainMiss)
	}
	k.record(1, PlainMiss)
	k.record(2, "HIT; layer=l1")
	s := k.stats()
	if s.Requested != 3 || s.Fetched != 2 || s.Misses != 13 || s.ByMisses["9+"] != 1 || s.ByMisses["1"] != 1 {
		t.Errorf("stats = %+v", s)
	}
}

func TestServedFromCache(t *testing.T) {
	for _, tt := range []struct {
		name  string
		token string
		want  bool
	}{
		{"a Tiercache or nginx HIT is from cache", "HIT", true},
		{"a STALE answer is from cache", "STALE", true},
		{"nginx's UPDATING (stale while it refreshes) is from cache", "UPDATING", true},
		{"REVALIDATED waited for the origin's 304", "REVALIDATED", false},
		{"a MISS went to the origin", "MISS", false},
		{"nginx's EXPIRED fetched a stale entry anew", "EXPIRED", false},
		{"BYPASS went to the origin", "BYPASS", false},
		{"an answer without X-Cache is not from cache", NoXCache, false},
		{"an L1 hit with its layer is from cache", "HIT; layer=l1", true},
		{"a waiter of another request's fetch made no origin request (nginx's lock waiters say HIT)", "MISS; coalesced", true},
		{"a waiter of another request's revalidation is from cache too", "REVALIDATED; coalesced", true},
		{"a MISS of its own with a layer is not from cache", "MISS", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ServedFromCache(tt.token); got != tt.want {
				t.Errorf("ServedFromCache(%q) = %v, want %v", tt.token, got, tt.want)
			}
		})
	}
}

func TestClientFetch(t *testing.T) {
	for _, tt := range []struct {
		name   string
		xcache string
		want   bool
	}{
		{"a plain MISS fetched for this request", "MISS", true},
		{"nginx's EXPIRED fetched for this request", "EXPIRED", true},
		{"a coalesced MISS waited on another request's fetch", "MISS; coalesced", false},
		{"a HIT fetched nothing", "HIT; layer=l1", false},
		{"nginx's UPDATING fetched nothing for this client", "UPDATING", false},
		{"a REVALIDATED answer is a revalidation, not a fetch", "REVALIDATED", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := ClientFetch(tt.xcache); got != tt.want {
				t.Errorf("ClientFetch(%q) = %v, want %v", tt.xcache, got, tt.want)
			}
		})
	}
}

func TestClassDelta(t *testing.T) {
	for _, tt := range []struct {
		name   string
		lo, hi map[string]int64
		want   map[string]int64
	}{
		{"classes that grew give their growth", map[string]int64{"bytes 200": 3}, map[string]int64{"bytes 200": 5}, map[string]int64{"bytes 200": 2}},
		{"a class new in the later sample counts whole", nil, map[string]int64{"missing 404": 4}, map[string]int64{"missing 404": 4}},
		{"classes that did not change are left out", map[string]int64{"bytes 200": 3, "missing 404": 1}, map[string]int64{"bytes 200": 3, "missing 404": 2}, map[string]int64{"missing 404": 1}},
		{"no change gives nothing", map[string]int64{"bytes 200": 3}, map[string]int64{"bytes 200": 3}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := classDelta(tt.lo, tt.hi)
			if len(got) != len(tt.want) || (got == nil) != (tt.want == nil) {
				t.Fatalf("classDelta = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("classDelta[%q] = %d, want %d", k, got[k], v)
				}
			}
		})
	}
}

func TestSlowAnswersAreCountedByXCache(t *testing.T) {
	srv, _ := cacheLike(t)
	for _, tt := range []struct {
		name     string
		slow     time.Duration
		wantSlow int64
	}{
		{"with a threshold of 1ns every answer is slow", time.Nanosecond, 40},
		{"with a threshold of an hour none is", time.Hour, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{
				Targets:     targets(srv.URL, "/hit", "/miss"),
				Concurrency: 1,
				Duration:    30 * time.Second,
				MaxRequests: 40,
				Timeout:     5 * time.Second,
				Slow:        tt.slow,
				Interval:    time.Minute,
			})
			if err != nil {
				t.Fatal(err)
			}
			var n int64
			for _, v := range res.SlowXCache {
				n += v
			}
			if n != tt.wantSlow || (tt.wantSlow > 0 && (res.SlowXCache["HIT; layer=l1"] != 20 || res.SlowXCache["MISS"] != 20)) {
				t.Errorf("slow_x_cache = %v, want %d in all, half HIT half MISS", res.SlowXCache, tt.wantSlow)
			}
			if len(res.Timeline) != 1 || res.Timeline[0].Slow != tt.wantSlow {
				t.Errorf("timeline = %+v, want one interval with %d slow", res.Timeline, tt.wantSlow)
			}
		})
	}
}
