package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestOrigin(t *testing.T, cfg config) (*origin, *httptest.Server) {
	t.Helper()
	if cfg.BodySize == 0 {
		cfg.BodySize = 1024
	}
	o, err := newOrigin(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(o)
	t.Cleanup(srv.Close)
	return o, srv
}

func get(t *testing.T, url string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func originStats(t *testing.T, base string) stats {
	t.Helper()
	_, body := get(t, base+"/stats")
	var s stats
	if err := json.Unmarshal(body, &s); err != nil {
		t.Fatalf("stats: %v: %s", err, body)
	}
	return s
}

func TestRoutesCarryTheirCachingHeaders(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	tests := []struct {
		path, status, cacheControl, surrogateKey string
	}{
		{"/", "200 OK", "", ""},
		{"/hello", "200 OK", "public, max-age=60", ""},
		{"/time", "200 OK", "max-age=5", ""},
		{"/private", "200 OK", "private", ""},
		{"/tagged/red", "200 OK", "max-age=300", "demo red"},
		{"/bytes/k1", "200 OK", "public, max-age=1, stale-while-revalidate=86400", ""},
		{"/bytes/k1?ttl=3600", "200 OK", "public, max-age=3600, stale-while-revalidate=86400", ""},
		{"/bytes/k1?ttl=10&swr=0", "200 OK", "public, max-age=10", ""},
		{"/bytes/k1?size=-1", "400 Bad Request", "", ""},
		{"/bytes/k1?rate=fast", "400 Bad Request", "", ""},
		{"/missing/7", "404 Not Found", "", ""},
		{"/nowhere", "404 Not Found", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			resp, _ := get(t, srv.URL+tt.path)
			if resp.Status != tt.status {
				t.Errorf("status = %q, want %q", resp.Status, tt.status)
			}
			if got := resp.Header.Get("Cache-Control"); got != tt.cacheControl {
				t.Errorf("Cache-Control = %q, want %q", got, tt.cacheControl)
			}
			if got := resp.Header.Get("Surrogate-Key"); got != tt.surrogateKey {
				t.Errorf("Surrogate-Key = %q, want %q", got, tt.surrogateKey)
			}
		})
	}
}

func TestHelloAnswersConditionalsWith304(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	resp, body := get(t, srv.URL+"/hello")
	if !strings.HasPrefix(string(body), "hello from the origin at ") {
		t.Fatalf("body = %q", body)
	}
	etag, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if etag == "" || lm == "" {
		t.Fatalf("ETag %q, Last-Modified %q: want both", etag, lm)
	}
	if resp, _ := get(t, srv.URL+"/hello", "If-None-Match", etag); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: status %d, want 304", resp.StatusCode)
	}
	if resp, _ := get(t, srv.URL+"/hello", "If-None-Match", `"other"`); resp.StatusCode != http.StatusOK {
		t.Errorf("non-matching If-None-Match: status %d, want 200", resp.StatusCode)
	}
	if resp, _ := get(t, srv.URL+"/hello", "If-Modified-Since", lm); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-Modified-Since: status %d, want 304", resp.StatusCode)
	}
}

func TestBytesAreDeterministicPerKey(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	r1, a := get(t, srv.URL+"/bytes/alpha?size=200000")
	_, b := get(t, srv.URL+"/bytes/alpha?size=200000")
	_, c := get(t, srv.URL+"/bytes/beta?size=200000")
	if len(a) != 200000 {
		t.Fatalf("len = %d, want 200000", len(a))
	}
	if !bytes.Equal(a, b) {
		t.Error("same key gave different bodies")
	}
	if bytes.Equal(a, c) {
		t.Error("different keys gave the same body")
	}
	if resp, _ := get(t, srv.URL+"/bytes/alpha?size=200000", "If-None-Match", r1.Header.Get("ETag")); resp.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match: status %d, want 304", resp.StatusCode)
	}
	if _, d := get(t, srv.URL+"/bytes/alpha"); len(d) != 1024 {
		t.Errorf("default size = %d, want 1024", len(d))
	}
}

func TestStatsCountRequestsButNotThemselves(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	for range 3 {
		get(t, srv.URL+"/hello")
	}
	get(t, srv.URL+"/missing/1")
	if s := originStats(t, srv.URL); s.Requests != 4 || s.MaxInflight != 1 {
		t.Errorf("stats = %+v, want 4 requests, max_inflight 1", s)
	}
	resp, err := http.Post(srv.URL+"/stats/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := originStats(t, srv.URL); s.Requests != 0 {
		t.Errorf("after reset: %+v, want 0 requests", s)
	}
}

func TestStatsCountRequestsByClass(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	r1, _ := get(t, srv.URL+"/bytes/a")
	get(t, srv.URL+"/bytes/a")
	get(t, srv.URL+"/bytes/a", "If-None-Match", r1.Header.Get("ETag"))
	get(t, srv.URL+"/bytes/a?size=-1")
	get(t, srv.URL+"/missing/1")
	get(t, srv.URL+"/hello")
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/bytes/a", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	want := map[string]int64{
		"bytes 200":             2,
		"bytes conditional 304": 1,
		"bytes 400":             1,
		"missing 404":           1,
		"hello 200":             1,
		"bytes delete 200":      1,
	}
	s := originStats(t, srv.URL)
	if len(s.ByClass) != len(want) {
		t.Errorf("by_class = %v, want %v", s.ByClass, want)
	}
	for k, v := range want {
		if s.ByClass[k] != v {
			t.Errorf("by_class[%q] = %d, want %d (all: %v)", k, s.ByClass[k], v, s.ByClass)
		}
	}
	resp, err := http.Post(srv.URL+"/stats/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if s := originStats(t, srv.URL); len(s.ByClass) != 0 {
		t.Errorf("after reset: by_class = %v, want empty", s.ByClass)
	}
}

func TestRatePacesTheBodyAndKeepsItsBytes(t *testing.T) {
	const size, rate = 100_000, 400_000 // 250 ms
	_, srv := newTestOrigin(t, config{})
	_, want := get(t, srv.URL+"/bytes/big?size=100000")

	start := time.Now()
	resp, err := http.Get(srv.URL + "/bytes/big?size=100000&rate=400000")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	firstByte := time.Since(start)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	if got := append(first, rest...); !bytes.Equal(got, want) {
		t.Fatalf("paced body (%d bytes) differs from the unpaced one (%d bytes)", len(got), len(want))
	}
	// The last piece (rate/50 bytes) is due at (size - piece) / rate.
	if minTotal := time.Duration(float64(size-rate/pacedSlices) / rate * float64(time.Second)); total < minTotal {
		t.Errorf("paced body took %v, want >= %v", total, minTotal)
	}
	if firstByte > total/2 {
		t.Errorf("first byte after %v of %v: the body was not streamed", firstByte, total)
	}
	s := originStats(t, srv.URL)
	if done := time.Unix(0, s.PacedDoneUnixNano); done.Before(start.Add(firstByte)) {
		t.Errorf("paced_done_unix_ns = %v, want after the first byte (%v)", done, start.Add(firstByte))
	}
}

func TestMaxConcurrencyQueuesRequests(t *testing.T) {
	const latency = 50 * time.Millisecond
	_, srv := newTestOrigin(t, config{Latency: latency, MaxConcurrency: 2})
	start := time.Now()
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(srv.URL + "/time")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	// Six requests through two slots take at least three latencies.
	if elapsed := time.Since(start); elapsed < 3*latency {
		t.Errorf("6 requests with 2 slots took %v, want >= %v", elapsed, 3*latency)
	}
	if s := originStats(t, srv.URL); s.Requests != 6 || s.MaxInflight < 2 {
		t.Errorf("stats = %+v, want 6 requests and max_inflight >= 2", s)
	}
}

func TestUnsafeMethodsAreAnsweredUncached(t *testing.T) {
	_, srv := newTestOrigin(t, config{})
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/hello", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Cache-Control") != "" {
		t.Errorf("DELETE: %s, Cache-Control %q", resp.Status, resp.Header.Get("Cache-Control"))
	}
}

func TestRunServesAndShutsDownOnCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"--listen", addr}, io.Discard) }()

	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/hello")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server did not come up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after cancel")
	}
}

func TestRunRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--latency", "-1s"},
		{"--max-concurrency", "-2"},
		{"--body-size", "999999999999"},
		{"extra"},
	} {
		if err := run(context.Background(), args, io.Discard); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}
