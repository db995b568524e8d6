package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
)

func testReplay(t *testing.T, seed uint64) *Replay {
	t.Helper()
	cfg := DefaultReplayConfig()
	cfg.Seed = seed
	var err error
	if cfg.Clients, err = readClients(""); err != nil {
		t.Fatal(err)
	}
	rp, err := NewReplay(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rp
}

func TestReplayIsDeterminedByTheSeed(t *testing.T) {
	a, b, c := testReplay(t, 7), testReplay(t, 7), testReplay(t, 8)
	same := 0
	for n := uint64(0); n < 500; n++ {
		ra, rb := a.Request(n), b.Request(n)
		if !reflect.DeepEqual(ra, rb) {
			t.Fatalf("request %d differs between two replays of seed 7:\n%+v\n%+v", n, ra, rb)
		}
		if reflect.DeepEqual(ra, c.Request(n)) {
			same++
		}
	}
	if same > 50 {
		t.Errorf("seeds 7 and 8 made %d of 500 requests alike", same)
	}
}

func TestReplayLooksLikeABrowserMix(t *testing.T) {
	rp := testReplay(t, 1)
	const n = 20000
	kinds, hosts, urls := map[string]int{}, map[string]int{}, map[string]int{}
	var withCookie, withAnalytics, signedIn, campaign, noAE, browsers int
	ae := map[string]bool{}
	for i := uint64(0); i < n; i++ {
		r := rp.Request(i)
		kinds[r.Kind]++
		hosts[r.Host]++
		urls[r.Host+r.Path]++
		ae[r.Header.Get("Accept-Encoding")] = true
		if r.Header.Get("Accept-Encoding") == "" {
			noAE++
		}
		c := r.Header.Get("Cookie")
		if c != "" {
			withCookie++
		}
		if strings.Contains(c, "_ga=") {
			withAnalytics++
		}
		if r.Session != "" {
			signedIn++
			if !strings.Contains(c, "sid="+r.Session) {
				t.Fatalf("request %d: session %q not in Cookie %q", i, r.Session, c)
			}
		}
		if strings.Contains(r.Path, "utm_") || strings.Contains(r.Path, "clid=") {
			campaign++
		}
		if strings.Contains(r.Header.Get("User-Agent"), "Mozilla") && !strings.Contains(r.Header.Get("User-Agent"), "bot") {
			browsers++
		}
	}
	for _, k := range []string{"html", "json", "css", "js", "image"} {
		if kinds[k] < n/50 {
			t.Errorf("kind %s: %d of %d requests", k, kinds[k], n)
		}
	}
	if len(hosts) != 2 {
		t.Errorf("hosts = %v, want two", hosts)
	}
	if len(ae) < 5 {
		t.Errorf("only %d distinct Accept-Encoding values", len(ae))
	}
	share := func(x int) float64 { return float64(x) / n }
	checks := []struct {
		what     string
		got      float64
		min, max float64
	}{
		{"browser requests", share(browsers), 0.85, 0.97},
		{"requests with analytics cookies", share(withAnalytics), 0.6, 0.85},
		{"signed-in requests", share(signedIn), 0.08, 0.2},
		{"requests without Accept-Encoding (curl)", share(noAE), 0.005, 0.05},
		{"requests with tracking parameters", share(campaign), 0.01, 0.06},
	}
	for _, c := range checks {
		if c.got < c.min || c.got > c.max {
			t.Errorf("%s: %.3f, want between %.2f and %.2f", c.what, c.got, c.min, c.max)
		}
	}
	// Zipf: the hottest URL is asked far more than the median one, and
	// most of the space is asked at least once.
	top := 0
	for _, v := range urls {
		top = max(top, v)
	}
	if top < 200 || len(urls) < 1500 {
		t.Errorf("hottest URL %d requests, %d distinct URLs: not a Zipf over thousands", top, len(urls))
	}
}

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
