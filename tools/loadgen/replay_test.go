package main

import (
	"reflect"
	"strings"
	"testing"
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
