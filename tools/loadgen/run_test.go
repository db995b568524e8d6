package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// cacheLike answers like a cache in front of an app: each path has a fixed
// status and X-Cache value, and every request is counted.
func cacheLike(t *testing.T) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		switch r.URL.Path {
		case "/hit":
			w.Header().Set("X-Cache", "HIT; layer=l1")
		case "/stale":
			w.Header().Set("X-Cache", "stale")
		case "/miss":
			w.Header().Set("X-Cache", "MISS")
		case "/boom":
			w.WriteHeader(http.StatusInternalServerError)
		case "/redirect":
			http.Redirect(w, r, "http://10.0.0.1/elsewhere", http.StatusFound)
		default:
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("body"))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func targets(base string, paths ...string) []Target {
	ts := make([]Target, len(paths))
	for i, p := range paths {
		ts[i] = Target{URL: base + p, Missing: strings.HasPrefix(p, "/missing")}
	}
	return ts
}

func TestRunCountsRequestsAndXCacheValues(t *testing.T) {
	srv, served := cacheLike(t)
	res, err := Run(context.Background(), Config{
		Targets:     targets(srv.URL, "/hit", "/stale", "/miss", "/boom", "/missing/1", "/redirect"),
		Concurrency: 1, // exact round robin
		Duration:    30 * time.Second,
		MaxRequests: 600,
		Timeout:     5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 600 || served.Load() != 600 || res.StoppedBy != "max-requests" {
		t.Fatalf("requests %d, server saw %d, stopped by %s: want 600, 600, max-requests",
			res.Requests, served.Load(), res.StoppedBy)
	}
	wantX := map[string]int64{"HIT": 100, "STALE": 100, "MISS": 100, NoXCache: 300}
	for k, v := range wantX {
		if res.XCache[k] != v {
			t.Errorf("x_cache[%s] = %d, want %d (all: %v)", k, res.XCache[k], v, res.XCache)
		}
	}
	// /boom's 500 is an error; /missing's 404 is expected; the redirect is
	// an answer, not followed off loopback.
	if res.Errors != 100 || res.ErrorsByKind["status_500"] != 100 {
		t.Errorf("errors %d %v, want 100 status_500", res.Errors, res.ErrorsByKind)
	}
	if res.Status["302"] != 100 || res.Status["404"] != 100 || res.Status["200"] != 300 {
		t.Errorf("status = %v", res.Status)
	}
	if res.FromCache != 200 || res.HitRate < 0.333 || res.HitRate > 0.334 {
		t.Errorf("from cache %d, hit rate %v: want 200, 1/3", res.FromCache, res.HitRate)
	}
	if res.Latency.P50 <= 0 || res.Latency.P99 < res.Latency.P50 || res.Latency.Max < res.Latency.P99 {
		t.Errorf("latency = %+v", res.Latency)
	}
}

func TestRunWithManyWorkersCountsEveryRequestOnce(t *testing.T) {
	srv, served := cacheLike(t)
	res, err := Run(context.Background(), Config{
		Targets:     targets(srv.URL, "/hit", "/miss"),
		Concurrency: 16,
		Duration:    30 * time.Second,
		MaxRequests: 2000,
		Timeout:     5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 2000 || served.Load() != 2000 {
		t.Errorf("requests %d, server saw %d: want 2000", res.Requests, served.Load())
	}
	if res.XCache["HIT"]+res.XCache["MISS"] != 2000 || res.Errors != 0 {
		t.Errorf("x_cache %v, errors %d", res.XCache, res.Errors)
	}
}

func TestRunStopsWhenItsDurationIsUp(t *testing.T) {
	srv, _ := cacheLike(t)
	start := time.Now()
	res, err := Run(context.Background(), Config{
		Targets:     targets(srv.URL, "/hit"),
		Concurrency: 4,
		Duration:    200 * time.Millisecond,
		MaxRequests: 1 << 40,
		Timeout:     5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Errorf("run took %v, want about 200ms", elapsed)
	}
	if res.StoppedBy != "duration" || res.Requests == 0 || res.Errors != 0 {
		t.Errorf("stopped by %s after %d requests, %d errors (%v)", res.StoppedBy, res.Requests, res.Errors, res.ErrorSamples)
	}
}

func TestRunCountsTransportErrorsByKind(t *testing.T) {
	srv, _ := cacheLike(t)
	url := srv.URL
	srv.Close() // nothing listens there any more
	res, err := Run(context.Background(), Config{
		Targets:     targets(url, "/hit"),
		Concurrency: 1,
		Duration:    10 * time.Second,
		MaxRequests: 3,
		Timeout:     time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 3 || res.ErrorsByKind["connection_refused"] != 3 {
		t.Errorf("errors %d %v %v, want 3 connection_refused", res.Errors, res.ErrorsByKind, res.ErrorSamples)
	}
}

func TestRunRefusesNonLoopbackTargets(t *testing.T) {
	for _, u := range []string{"http://10.0.0.1/", "http://example.com/", "http://192.168.0.1:8080/x"} {
		_, err := Run(context.Background(), Config{
			Targets:     []Target{{URL: u}},
			Concurrency: 1, Duration: time.Second, MaxRequests: 1, Timeout: time.Second,
		})
		if !errors.Is(err, ErrNotLoopback) {
			t.Errorf("Run(%s) err = %v, want ErrNotLoopback", u, err)
		}
	}
}

func TestRunRefusesUnboundedConfigs(t *testing.T) {
	base := Config{Targets: []Target{{URL: "http://127.0.0.1:1/"}}, Concurrency: 1, Duration: time.Second, MaxRequests: 1, Timeout: time.Second}
	for name, mutate := range map[string]func(*Config){
		"--duration":     func(c *Config) { c.Duration = 0 },
		"--max-requests": func(c *Config) { c.MaxRequests = 0 },
		"--concurrency":  func(c *Config) { c.Concurrency = 0 },
		"--timeout":      func(c *Config) { c.Timeout = 0 },
	} {
		c := base
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestMainFixedPrintsJSON(t *testing.T) {
	srv, _ := cacheLike(t)
	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), []string{
		"fixed", "--url", srv.URL + "/hit", "--url", srv.URL + "/miss",
		"--concurrency", "2", "--duration", "10s", "--max-requests", "50", "--json",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if res.Scenario != "fixed" || res.Requests != 50 || res.XCache["HIT"]+res.XCache["MISS"] != 50 {
		t.Errorf("result = %+v", res)
	}
	if !strings.Contains(stderr.String(), "req/s") {
		t.Errorf("text summary missing from stderr: %q", stderr.String())
	}
}

func TestMainHerdReadsOriginStats(t *testing.T) {
	var originRequests atomic.Int64
	var resets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/stats/reset" && r.Method == http.MethodPost:
			resets.Add(1)
			originRequests.Store(0)
		case r.URL.Path == "/stats":
			_ = json.NewEncoder(w).Encode(OriginStats{Requests: originRequests.Load()})
		case strings.HasPrefix(r.URL.Path, "/bytes/"):
			originRequests.Add(1)
			w.Header().Set("X-Cache", "HIT")
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	originRequests.Store(999) // left over from before: the reset must clear it

	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), []string{
		"herd", "--base", srv.URL, "--keys", "1000", "--concurrency", "4",
		"--duration", "10s", "--max-requests", "400", "--origin-stats", srv.URL + "/stats", "--json",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if resets.Load() != 1 || res.Origin == nil {
		t.Fatalf("resets %d, origin %+v", resets.Load(), res.Origin)
	}
	// About 1% of requests are to /missing: 404, expected, not errors.
	if res.Requests != 400 || res.Errors != 0 || res.Origin.Requests+res.Status["404"] != 400 {
		t.Errorf("requests %d, errors %d %v, origin %d, status %v",
			res.Requests, res.Errors, res.ErrorsByKind, res.Origin.Requests, res.Status)
	}
}

func TestMainRejectsUnknownCommandsAndMissingFlags(t *testing.T) {
	var out bytes.Buffer
	for _, args := range [][]string{
		nil,
		{"stampede"},
		{"fixed"},
		{"fixed", "--url", "http://10.0.0.1/"},
		{"herd"},
		{"herd", "--base", "http://127.0.0.1:1", "--origin-stats", "http://10.0.0.1/stats"},
	} {
		if err := Main(context.Background(), args, &out, &out); err == nil {
			t.Errorf("Main(%q) = nil, want an error", args)
		}
	}
}
