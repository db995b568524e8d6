package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
)

// site is a stand-in for demo-origin's /site/: the page of the session in
// the Cookie, else the anonymous page. leaky makes it a broken cache in
// front of that: the first answer for a URL goes to every later client.
func site(leaky bool) http.Handler {
	var mu sync.Mutex
	stored := map[string][]byte{}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mark := "tc-anonymous"
		if c, err := r.Cookie("sid"); err == nil {
			mark = "tc-session=" + c.Value + ";"
		}
		body := []byte("<html>" + mark + "</html>")
		if leaky {
			mu.Lock()
			if b, ok := stored[r.Host+r.URL.String()]; ok {
				body = b
				w.Header().Set("X-Cache", "HIT")
			} else {
				stored[r.Host+r.URL.String()] = body
				w.Header().Set("X-Cache", "MISS")
			}
			mu.Unlock()
		}
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			_, _ = zw.Write(body)
			_ = zw.Close()
			body = b.Bytes()
			w.Header().Set("Content-Encoding", "gzip")
		}
		_, _ = w.Write(body)
	})
}

func runReplayAgainst(t *testing.T, h http.Handler, requests int64) *ReplayResult {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	res, err := RunReplay(context.Background(), ReplayRun{Replay: testReplay(t, 3), Base: srv.URL,
		Concurrency: 4, Requests: requests, Duration: time.Minute, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != requests || res.Errors != 0 {
		t.Fatalf("%d requests, %d errors; want %d, 0", res.Requests, res.Errors, requests)
	}
	return res
}

func TestReplayLeakCheckPassesAnHonestServer(t *testing.T) {
	res := runReplayAgainst(t, site(false), 600)
	if res.Leaks != 0 {
		t.Errorf("leaks = %d: %v", res.Leaks, res.LeakExamples)
	}
	li := res.LoggedIn
	if li.Requests == 0 || li.Personal != li.Requests || li.PersonalFromCache != 0 {
		t.Errorf("signed in: %+v, want every page personal", li)
	}
	if res.Codings["gzip"] == 0 || res.Undecodable != 0 || res.Unaccepted != 0 {
		t.Errorf("codings %v, undecodable %d, unaccepted %d", res.Codings, res.Undecodable, res.Unaccepted)
	}
}

func TestReplayLeakCheckFindsAPlantedLeak(t *testing.T) {
	res := runReplayAgainst(t, site(true), 600)
	if res.Leaks == 0 || len(res.LeakExamples) == 0 {
		t.Fatalf("a cache that gives one visitor's page to everyone: leaks = %d", res.Leaks)
	}
	if !strings.Contains(res.LeakExamples[0], "got the page of session") {
		t.Errorf("leak example %q does not say whose page", res.LeakExamples[0])
	}
	if res.LoggedIn.AnonymousFromCache == 0 || res.FromCache == 0 {
		t.Errorf("signed in: %+v, from cache %d: want anonymous pages from the cache counted", res.LoggedIn, res.FromCache)
	}
}

func TestReplayCommandFailsOnALeak(t *testing.T) {
	srv := httptest.NewServer(site(true))
	defer srv.Close()
	var out, errw bytes.Buffer
	err := Main(context.Background(), []string{"replay", "--base", srv.URL, "--requests", "600", "--concurrency", "2"}, &out, &errw)
	if !errors.Is(err, ErrLeak) {
		t.Fatalf("err = %v, want ErrLeak; stderr: %s", err, errw.String())
	}
	if !strings.Contains(out.String(), "LEAK CHECK    FAILED") {
		t.Errorf("output does not say the leak check failed:\n%s", out.String())
	}
}

func TestReplayRefusesBadInput(t *testing.T) {
	tests := map[string][]string{
		"a base off loopback":        {"--base", "http://192.0.2.1/"},
		"zero requests":              {"--base", "http://127.0.0.1:1", "--requests", "0"},
		"a share above one":          {"--base", "http://127.0.0.1:1", "--logged-in", "1.5"},
		"a host that is not a host":  {"--base", "http://127.0.0.1:1", "--hosts", "a b"},
		"a clients file that is not": {"--base", "http://127.0.0.1:1", "--clients", "/nonexistent/clients.json"},
		"a pid that is not a number": {"--base", "http://127.0.0.1:1", "--cpu-pid", "nginx"},
	}
	for name, args := range tests {
		t.Run(name, func(t *testing.T) {
			var out, errw bytes.Buffer
			if err := Main(context.Background(), append([]string{"replay"}, args...), &out, &errw); err == nil {
				t.Errorf("%v: no error", args)
			}
		})
	}
	if _, err := LoadClients([]byte(`{"profiles":[{"name":"x","kind":"robot","weight":1,"user_agent":"x"}]}`)); err == nil ||
		!strings.Contains(err.Error(), "profiles[0].kind") {
		t.Errorf("a profile of an unknown kind: %v", err)
	}
}

func TestAcceptsCoding(t *testing.T) {
	tests := map[string]struct {
		ae, coding string
		want       bool
	}{
		"listed":             {"gzip, deflate, br", "br", true},
		"not listed":         {"gzip, deflate", "br", false},
		"refused with q=0":   {"br;q=0, gzip", "br", false},
		"by a star":          {"*", "zstd", true},
		"x-gzip is gzip":     {"x-gzip", "gzip", true},
		"no header, nothing": {"", "gzip", false},
	}
	for name, tt := range tests {
		if got := acceptsCoding(tt.ae, tt.coding); got != tt.want {
			t.Errorf("%s: acceptsCoding(%q, %q) = %v", name, tt.ae, tt.coding, got)
		}
	}
}

func TestCPUTicksReadsProcesses(t *testing.T) {
	self, err := cpuTicks([]int{os.Getpid()})
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the kernel has charged at least one tick more
	// (bounded: 5 s of wall clock).
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for i := 0; i < 1_000_000; i++ {
			x += i
		}
		if now, err := cpuTicks([]int{os.Getpid()}); err == nil && now > self {
			return
		}
	}
	t.Errorf("own CPU ticks did not grow from %d in 5 s of work (x=%d)", self, x)
}

func TestCPUTicksCountsAGoneProcessAsZero(t *testing.T) {
	// PID_MAX_LIMIT is 2^22: this pid cannot exist.
	if n, err := cpuTicks([]int{1 << 23}); err != nil || n != 0 {
		t.Errorf("cpuTicks(gone) = %d, %v; want 0, nil", n, err)
	}
}
