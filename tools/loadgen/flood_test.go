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

func TestFloodTargets(t *testing.T) {
	f, err := NewFlood(FloodConfig{Base: "http://127.0.0.1:8080/", Prefix: "f", Size: 1024, TTL: 3600})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		n    uint64
		want string
	}{
		{"the first request asks for key 0", 0, "http://127.0.0.1:8080/bytes/f0?size=1024&ttl=3600"},
		{"request n asks for key n", 41, "http://127.0.0.1:8080/bytes/f41?size=1024&ttl=3600"},
		{"numbers past 32 bits are written out", 1 << 40, "http://127.0.0.1:8080/bytes/f1099511627776?size=1024&ttl=3600"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := f.Target(tt.n); got.URL != tt.want || got.Missing {
				t.Errorf("Target(%d) = %+v, want %q", tt.n, got, tt.want)
			}
		})
	}
	o, err := NewFlood(FloodConfig{Prefix: "x", Size: 1, TTL: 2})
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Target(7).URL; got != "/bytes/x7?size=1&ttl=2" {
		t.Errorf("without a base: %q, want an origin-form path", got)
	}
}

func TestNewFloodRejectsBadConfig(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  FloodConfig
		want string
	}{
		{"a prefix with a slash", FloodConfig{Prefix: "a/b"}, "--prefix"},
		{"a negative size", FloodConfig{Size: -1}, "--size"},
		{"a base off loopback", FloodConfig{Base: "http://10.0.0.1/"}, "--base"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewFlood(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewFlood(%+v) = %v, want an error naming %s", tt.cfg, err, tt.want)
			}
		})
	}
}

func TestFloodRunAsksForANewKeyEveryRequest(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.RequestURI()]++
		mu.Unlock()
		w.Header().Set("X-Cache", "MISS")
		_, _ = w.Write([]byte("body"))
	}))
	t.Cleanup(srv.Close)
	f, err := NewFlood(FloodConfig{Prefix: "f", Size: 4, TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), Config{
		Generator:   f,
		Bases:       []string{srv.URL},
		Concurrency: 8,
		Duration:    30 * time.Second,
		MaxRequests: 500,
		Timeout:     5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.Requests != 500 || len(seen) != 500 {
		t.Fatalf("%d requests, %d distinct keys at the server: want 500 and 500", res.Requests, len(seen))
	}
	for k, n := range seen {
		if n != 1 || !strings.HasPrefix(k, "/bytes/f") {
			t.Errorf("%s asked for %d times, want once", k, n)
		}
	}
	if res.Keys == nil || res.Keys.Requested != 0 {
		t.Errorf("keys = %+v: a flood has no fixed key space to count", res.Keys)
	}
}

func TestFetchOneTimesTheFirstAndLastBodyByte(t *testing.T) {
	const size = 3<<20 + 5
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Cache", "miss")
		w.Header().Set("Content-Length", "3145733")
		_, _ = w.Write([]byte("x"))
		_ = http.NewResponseController(w).Flush()
		_, _ = w.Write(make([]byte, size-1))
	}))
	t.Cleanup(srv.Close)
	tr := NewTransport(1)
	defer tr.CloseIdleConnections()
	g, err := FetchOne(context.Background(), NewClient(tr, 10*time.Second), srv.URL+"/big", "")
	if err != nil {
		t.Fatal(err)
	}
	if g.Status != 200 || g.XCache != "MISS" || g.Bytes != size {
		t.Errorf("got %d, X-Cache %q, %d bytes: want 200, MISS, %d", g.Status, g.XCache, g.Bytes, size)
	}
	if g.FirstByteUnixNano == 0 || !(g.StartedUnixNano <= g.HeadersUnixNano && g.HeadersUnixNano <= g.FirstByteUnixNano && g.FirstByteUnixNano <= g.DoneUnixNano) {
		t.Errorf("times missing or out of order: %+v", g)
	}
	if g.MBPerS <= 0 || g.TotalS <= 0 || g.FirstByteS > g.TotalS {
		t.Errorf("rates: %+v", g)
	}
	if _, err := FetchOne(context.Background(), NewClient(tr, time.Second), "http://10.0.0.1/", ""); err == nil || !strings.Contains(err.Error(), "--url") {
		t.Errorf("a URL off loopback: %v, want an error naming --url", err)
	}
}

func TestFetchOneReportsATruncatedBody(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write([]byte("short"))
	}))
	t.Cleanup(srv.Close)
	tr := NewTransport(1)
	defer tr.CloseIdleConnections()
	if g, err := FetchOne(context.Background(), NewClient(tr, 10*time.Second), srv.URL, ""); err == nil {
		t.Errorf("a body cut short after 5 of 1000 bytes gave %+v, want an error", g)
	}
}
