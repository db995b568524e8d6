package sidecar

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/test/testredis"
)

// Soft purges through the admin API, against real sidecars sharing a real
// redis-server, in front of real origins.

// validatingOrigin answers a GET of a path with "<path> v<n>" (n counting
// that path's full answers), an ETag naming that version, the Surrogate-Key
// "grp-<first segment>", and cacheControl; a GET whose If-None-Match names
// the current version gets a 304. It records what it was asked.
type validatingOrigin struct {
	*http.Server
	url          string
	cacheControl string
	vary         string

	mu       sync.Mutex
	full     map[string]int      // 200s per path
	inm      map[string][]string // If-None-Match per request, per path ("" none)
	notMod   map[string]int      // 304s per path
	holdFrom int                 // hold the holdFrom-th and later requests of a path (0: never)
	held     chan struct{}       // a request is being held
	release  chan struct{}       // close to let held requests go on
}

func newValidatingOrigin(t *testing.T, cacheControl string) *validatingOrigin {
	t.Helper()
	o := &validatingOrigin{cacheControl: cacheControl, full: map[string]int{}, inm: map[string][]string{},
		notMod: map[string]int{}, held: make(chan struct{}, 16), release: make(chan struct{})}
	srv := newRawOrigin(t, o.serve)
	o.url = srv.URL
	return o
}

func (o *validatingOrigin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.inm[r.URL.Path] = append(o.inm[r.URL.Path], r.Header.Get("If-None-Match"))
	asked := len(o.inm[r.URL.Path])
	hold := o.holdFrom > 0 && asked >= o.holdFrom
	o.mu.Unlock()
	if hold {
		o.held <- struct{}{}
		select {
		case <-o.release:
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Second):
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	current := fmt.Sprintf(`"%s v%d"`, r.URL.Path, o.full[r.URL.Path])
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	w.Header().Set("Cache-Control", o.cacheControl)
	w.Header().Set("Surrogate-Key", "grp-"+seg)
	if o.vary != "" {
		w.Header().Set("Vary", o.vary)
	}
	if o.full[r.URL.Path] > 0 && r.Header.Get("If-None-Match") == current {
		o.notMod[r.URL.Path]++
		w.Header().Set("ETag", current)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	o.full[r.URL.Path]++
	n := o.full[r.URL.Path]
	w.Header().Set("ETag", fmt.Sprintf(`"%s v%d"`, r.URL.Path, n))
	fmt.Fprintf(w, "%s v%d", r.URL.Path, n)
}

// asked returns the If-None-Match of every request for path, in order.
func (o *validatingOrigin) asked(path string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.inm[path]...)
}

// softPurge purges body through n, expecting a 200 soft answer that counts
// l1 and l2 responses.
func softPurge(t *testing.T, n *node, body string, l1, l2 int) {
	t.Helper()
	status, res := n.purge(t, body)
	got2 := -1
	if res.L2 != nil {
		got2 = *res.L2
	}
	if status != http.StatusOK || !res.Soft || res.L1 != l1 || got2 != l2 || res.Purged != max(l1, l2) || res.Bodies != 0 {
		t.Fatalf("purge %s: %d %+v (l2 %d); want 200, soft, %d from L1 and %d from L2", body, status, res, got2, l1, l2)
	}
}

// awaitMessage waits (bounded) until b has applied a purge it was sent:
// its purge count passed before.
func awaitMessage(t *testing.T, b *node, before float64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); b.metric(t, "tiercache_purges_total") == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B never received the purge published by A")
		}
	}
}

func TestASoftPurgedURLIsServedStaleWhileOneRefreshReachesTheOrigin(t *testing.T) {
	rs := testredis.Start(t)
	origin := newValidatingOrigin(t, "max-age=300, stale-while-revalidate=60")
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.url, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	rdb := redisClient(t, rs.Addr())

	a.expect(t, "/p", "MISS", "/p v1")
	waitInL2(t, rdb, defaultPrefix, "/p")
	a.expect(t, "/p", "HIT; layer=l1", "/p v1")
	origin.mu.Lock()
	origin.holdFrom = 2 // the refresh waits at the origin until the test lets it go
	origin.mu.Unlock()

	softPurge(t, a, `{"urls":["/p"],"soft":true}`, 1, 1)
	// While the one refresh is held at the origin, every client gets the
	// stale answer at once.
	const clients = 8
	var wg sync.WaitGroup
	replies := make(chan reply, clients)
	for range clients {
		wg.Go(func() {
			r, err := a.do(http.MethodGet, "/p")
			if err != nil {
				t.Error(err)
			}
			replies <- r
		})
	}
	wg.Wait()
	close(replies)
	for r := range replies {
		if r.status != http.StatusOK || !strings.HasPrefix(r.xcache, "STALE") || r.body != "/p v1" {
			t.Fatalf("a client after the soft purge: %d %q %q, want the stale /p v1", r.status, r.xcache, r.body)
		}
	}
	select {
	case <-origin.held:
	case <-time.After(5 * time.Second):
		t.Fatal("no refresh reached the origin")
	}
	if got := origin.asked("/p"); len(got) != 2 || got[1] != `"/p v1"` {
		t.Fatalf("the origin was asked %q, want the fill and one conditional refresh", got)
	}
	close(origin.release)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r := a.get(t, "/p")
		if r.xcache == "HIT; layer=l1" {
			// The refresh's 304 renewed the entry: fresh again, same body.
			if r.body != "/p v1" {
				t.Fatalf("after the refresh: %q, want /p v1 renewed", r.body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A still answers %q %q: the refresh never renewed the entry", r.xcache, r.body)
		}
	}
	if got := origin.asked("/p"); len(got) != 2 {
		t.Fatalf("the origin was asked %d times (%q), want 2: one refresh for %d stale answers", len(got), got, clients)
	}
}

func TestASoftPurgedURLWithoutStaleWindowsIsRevalidatedOnEveryReplica(t *testing.T) {
	rs := testredis.Start(t)
	origin := newValidatingOrigin(t, "max-age=300")
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.url, "--redis-addr", rs.Addr(), "--config", cfg)
	b := startNode(t, origin.url, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())

	a.expect(t, "/r", "MISS", "/r v1")
	waitInL2(t, rdb, defaultPrefix, "/r")
	b.expect(t, "/r", "HIT; layer=l2", "/r v1")
	b.expect(t, "/r", "HIT; layer=l1", "/r v1")

	before := b.metric(t, "tiercache_purges_total")
	softPurge(t, a, `{"urls":["http://shop.test/r"],"soft":true}`, 1, 1)
	// A asks the origin with its validator, and the 304 renews the entry.
	a.expect(t, "/r", "REVALIDATED", "/r v1")
	a.expect(t, "/r", "HIT; layer=l1", "/r v1")
	// B marked its own L1 copy when A's message arrived: no fresh hit of
	// it any more.
	awaitMessage(t, b, before)
	if r := b.get(t, "/r"); r.xcache == "HIT; layer=l1" || r.body != "/r v1" {
		t.Fatalf("B after the soft purge: %q %q, want /r v1 revalidated, not its fresh L1 copy", r.xcache, r.body)
	}
	b.expect(t, "/r", "HIT; layer=l1", "/r v1")
	asked := origin.asked("/r")
	if len(asked) == 0 || asked[0] != "" {
		t.Fatalf("the origin was asked %q", asked)
	}
	for i, inm := range asked[1:] {
		if inm != `"/r v1"` {
			t.Fatalf("request %d after the fill carried If-None-Match %q, want the stored validator", i+2, inm)
		}
	}
	origin.mu.Lock()
	full, notMod := origin.full["/r"], origin.notMod["/r"]
	origin.mu.Unlock()
	if full != 1 || notMod < 1 || notMod > 2 {
		t.Fatalf("the origin sent %d full answers and %d 304s, want 1 and 1 or 2 (one per replica at most)", full, notMod)
	}
}

// entryKeys counts the tier's entry keys in Redis.
func entryKeys(t *testing.T, rdb redis.UniversalClient) int {
	t.Helper()
	keys, err := rdb.Keys(context.Background(), defaultPrefix+"e:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

// A replica that never held the entries finds them in L2 marked: stale,
// revalidated with their validators, while what the purge does not name
// stays fresh.
func TestASoftPurgeByPrefixTagOrVaryingURLMarksL2ForEveryReplica(t *testing.T) {
	cases := []struct {
		name, path, control, purge string
		vary                       bool
	}{
		{"a soft purge by prefix", "/pre/x", "/other/x", `{"prefix":"/pre/","soft":true}`, false},
		{"a soft purge by tag", "/tagged/x", "/other/y", `{"tags":["grp-tagged"],"soft":true}`, false},
		{"a soft purge by the absolute URL of a varying resource", "/v/x", "/v/y", `{"urls":["http://shop.test/v/x"],"soft":true}`, true},
		{"a soft purge by the origin-form URL of a varying resource", "/w/x", "/w/y", `{"urls":["/w/x"],"soft":true}`, true},
		{"a soft purge naming one entry three ways counts it once", "/pre/x", "/other/x", `{"urls":["http://shop.test/pre/x"],"prefix":"/pre/","tags":["grp-pre"],"soft":true}`, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := testredis.Start(t)
			origin := newValidatingOrigin(t, "max-age=300")
			if c.vary {
				origin.vary = "Accept-Language"
			}
			cfg := writeConfig(t, smallL1)
			a := startNode(t, origin.url, "--redis-addr", rs.Addr(), "--config", cfg)
			b := startNode(t, origin.url, "--redis-addr", rs.Addr(), "--config", cfg)
			a.waitReady(t)
			b.waitReady(t)
			rdb := redisClient(t, rs.Addr())
			lang := http.Header{"Accept-Language": {"de"}}

			want := 2 // one entry per path, or a marker and a variant
			if c.vary {
				want = 4
			}
			for _, p := range []string{c.path, c.control} {
				if r := a.doWith(t, http.MethodGet, p, lang); r.xcache != "MISS" {
					t.Fatalf("A's first GET of %s: %q", p, r.xcache)
				}
			}
			for deadline := time.Now().Add(5 * time.Second); entryKeys(t, rdb) < want; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d entries reached L2", entryKeys(t, rdb), want)
				}
			}
			softPurge(t, a, c.purge, 1, 1)
			if r := b.doWith(t, http.MethodGet, c.path, lang); r.xcache != "REVALIDATED" || r.body != c.path+" v1" {
				t.Fatalf("B's first GET of %s after the soft purge: %q %q, want the L2 copy revalidated", c.path, r.xcache, r.body)
			}
			if r := b.doWith(t, http.MethodGet, c.control, lang); r.xcache != "HIT; layer=l2" {
				t.Fatalf("B's first GET of %s, which the purge does not name: %q, want a fresh L2 hit", c.control, r.xcache)
			}
			if got := origin.asked(c.path); len(got) != 2 || got[1] != `"`+c.path+` v1"` {
				t.Fatalf("the origin was asked for %s with If-None-Match %q, want the fill and one revalidation", c.path, got)
			}
		})
	}
}
