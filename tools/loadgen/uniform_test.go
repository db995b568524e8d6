package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestUniformLaysOutTheDocumentedURLs(t *testing.T) {
	u, err := NewUniform(UniformConfig{Base: "http://127.0.0.1:8080/", Keys: 2000, Prefix: "k", Size: 1024, TTL: 3600})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Targets) != 2000 || u.Targets[7].URL != "http://127.0.0.1:8080/bytes/k7?size=1024&ttl=3600" {
		t.Errorf("%d targets, target 7 = %q", len(u.Targets), u.Targets[7].URL)
	}
	u, err = NewUniform(UniformConfig{Keys: 3, Prefix: "p", Size: 10, TTL: 1})
	if err != nil || u.Targets[2].URL != "/bytes/p2?size=10&ttl=1" {
		t.Errorf("without a base: %v %+v", err, u)
	}
}

func TestUniformPicksEveryKeyAlike(t *testing.T) {
	u, err := NewUniform(UniformConfig{Keys: 100})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200_000
	r := rand.New(rand.NewPCG(7, 0))
	per := make([]int, 100)
	for range n {
		per[u.Choose(r)]++
	}
	mean := float64(n) / 100
	for k, c := range per {
		if math.Abs(float64(c)-mean) > 5*math.Sqrt(mean) {
			t.Errorf("key %d got %d requests, want about %.0f", k, c, mean)
		}
	}
}

func TestUniformRefusesBadConfigs(t *testing.T) {
	for _, tt := range []struct {
		name string
		cfg  UniformConfig
		want string
	}{
		{"a remote base URL is refused", UniformConfig{Base: "http://10.0.0.1:8080", Keys: 10}, "loopback"},
		{"no keys is refused", UniformConfig{Keys: 0}, "--keys"},
		{"too many keys are refused", UniformConfig{Keys: MaxUniformKeys + 1}, "--keys"},
		{"a negative ttl is refused", UniformConfig{Keys: 1, TTL: -1}, "--ttl"},
		{"a prefix that changes the path is refused", UniformConfig{Keys: 1, Prefix: "a/b"}, "--prefix"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewUniform(tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestMainUniformFillRequestsEveryKeyOnce(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.RequestURI()]++
		mu.Unlock()
		w.Header().Set("X-Cache", "MISS")
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), []string{
		"uniform", "--base", srv.URL, "--keys", "500", "--fill", "--concurrency", "8", "--duration", "30s", "--json",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if res.Scenario != "uniform-fill" || res.Requests != 500 || res.StoppedBy != "max-requests" || len(seen) != 500 {
		t.Fatalf("scenario %s, %d requests, stopped by %s, %d distinct paths", res.Scenario, res.Requests, res.StoppedBy, len(seen))
	}
	for p, n := range seen {
		if n != 1 || !strings.HasPrefix(p, "/bytes/k") || !strings.HasSuffix(p, "?size=1024&ttl=3600") {
			t.Fatalf("%s requested %d times", p, n)
		}
	}
	if res.Keys == nil || res.Keys.Requested != 500 || res.Keys.Fetched != 500 || res.Keys.MissesPerFetchedKey != 1 {
		t.Errorf("keys = %+v", res.Keys)
	}
}

func TestMainUniformSpreadsOverSeveralBases(t *testing.T) {
	a, na := counting(t)
	b, nb := counting(t)
	var stdout, stderr bytes.Buffer
	err := Main(context.Background(), []string{
		"uniform", "--base", a.URL, "--base", b.URL, "--keys", "50",
		"--concurrency", "3", "--duration", "30s", "--max-requests", "300", "--json",
	}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if na.Load() != 150 || nb.Load() != 150 {
		t.Errorf("a got %d, b got %d: want 150 each (round robin)", na.Load(), nb.Load())
	}
	for _, args := range [][]string{
		{"uniform"},
		{"uniform", "--base", "http://127.0.0.1:1", "--bases-file", "f"},
		{"uniform", "--base", "http://10.0.0.1:1"},
		{"uniform", "--base", "http://127.0.0.1:1", "--interval", "1ms"},
	} {
		if err := Main(context.Background(), args, &stdout, &stderr); err == nil {
			t.Errorf("Main(%q) = nil, want an error", args)
		}
	}
}

func TestSequenceCoversTheTargetsUnderConcurrency(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		mu.Unlock()
	}))
	defer srv.Close()
	u, _ := NewUniform(UniformConfig{Keys: 97})
	_, err := Run(context.Background(), Config{
		Targets: u.Targets, Chooser: NewSequence(97), Bases: []string{srv.URL},
		Concurrency: 16, Duration: 30 * time.Second, MaxRequests: 97 * 2, Timeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 97 {
		t.Fatalf("%d distinct paths, want 97", len(seen))
	}
	for p, n := range seen {
		if n != 2 {
			t.Errorf("%s requested %d times, want 2", p, n)
		}
	}
}
