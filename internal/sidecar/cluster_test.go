package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/test/testredis"
)

// These tests run several sidecars in this process, sharing real
// redis-server processes (test/testredis), in front of one httptest
// origin. Every request carries the same Host, so that the sidecars, which
// listen on different ports, compute the same cache keys.

const testHost = "shop.test"

// smallL1 keeps the several L1s of one test process small.
const smallL1 = "l1: {maxSize: 32Mi, shards: 32}\n"

// countingOrigin counts the requests it gets per method and path. A GET
// answers "<path> v<n>", n counting that path's GETs, fresh for 5 minutes
// and tagged (Surrogate-Key) "all" and "grp-<first path segment>".
type countingOrigin struct {
	*httptest.Server
	delay time.Duration

	mu     sync.Mutex
	counts map[string]int // "GET /a"
}

func newOrigin(t *testing.T, delay time.Duration) *countingOrigin {
	t.Helper()
	o := &countingOrigin{delay: delay, counts: map[string]int{}}
	o.Server = httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(o.Close)
	return o
}

func (o *countingOrigin) serve(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.counts[r.Method+" "+r.URL.Path]++
	n := o.counts[r.Method+" "+r.URL.Path]
	o.mu.Unlock()
	if o.delay > 0 {
		select {
		case <-time.After(o.delay):
		case <-r.Context().Done():
			return
		}
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		_, _ = io.WriteString(w, "changed")
		return
	}
	seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Surrogate-Key", "all grp-"+seg)
	w.Header().Set("Content-Type", "text/plain")
	_, _ = fmt.Fprintf(w, "%s v%d", r.URL.Path, n)
}

// count is how many requests with method for path the origin got.
func (o *countingOrigin) count(method, path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[method+" "+path]
}

// total is how many requests the origin got.
func (o *countingOrigin) total() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range o.counts {
		n += c
	}
	return n
}

// node is a running sidecar with a client sized for concurrent use.
type node struct {
	*sidecar
	hc          *http.Client
	base, admin string
	once        sync.Once
}

// startNode starts a sidecar in front of upstream (see start) and stops it
// when the test ends.
func startNode(t *testing.T, upstream string, extra ...string) *node {
	t.Helper()
	return startNodeLogging(t, io.Discard, upstream, extra...)
}

// startNodeLogging is startNode with the sidecar's log going to stderr.
func startNodeLogging(t *testing.T, stderr io.Writer, upstream string, extra ...string) *node {
	t.Helper()
	s := startLogging(t, stderr, upstream, extra...)
	n := &node{
		sidecar: s,
		hc: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second},
		},
		base:  "http://" + s.addrs.Serve,
		admin: "http://" + s.addrs.Admin,
	}
	t.Cleanup(func() { n.shutdown(t) })
	return n
}

// shutdown stops the sidecar (once; the test's cleanup calls it too).
func (n *node) shutdown(t *testing.T) {
	t.Helper()
	n.once.Do(func() {
		// Idle keep-alive connections first: the server's graceful
		// shutdown waits for a connection that never carried a request
		// (one the client dialled but did not need) for up to 5s.
		n.hc.CloseIdleConnections()
		n.client.CloseIdleConnections()
		n.cancel()
		select {
		case err := <-n.done:
			if err != nil {
				t.Errorf("sidecar %s: Run: %v", n.addrs.Serve, err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("sidecar %s did not stop", n.addrs.Serve)
		}
	})
}

// reply is what a client saw.
type reply struct {
	status int
	xcache string
	body   string
	took   time.Duration
}

// do sends method path to the sidecar with Host testHost. It is safe to
// call from any goroutine.
func (n *node) do(method, path string) (reply, error) {
	req, err := http.NewRequest(method, n.base+path, nil)
	if err != nil {
		return reply{}, err
	}
	req.Host = testHost
	start := time.Now()
	resp, err := n.hc.Do(req)
	if err != nil {
		return reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return reply{}, err
	}
	return reply{status: resp.StatusCode, xcache: resp.Header.Get("X-Cache"), body: string(b), took: time.Since(start)}, nil
}

// get GETs path and fails the test on a transport error or a non-200.
func (n *node) get(t *testing.T, path string) reply {
	t.Helper()
	r, err := n.do(http.MethodGet, path)
	if err != nil {
		t.Fatalf("GET %s%s: %v", n.base, path, err)
	}
	if r.status != http.StatusOK {
		t.Fatalf("GET %s%s: status %d %q", n.base, path, r.status, r.body)
	}
	return r
}

// expect GETs path and checks X-Cache and body.
func (n *node) expect(t *testing.T, path, xcache, body string) reply {
	t.Helper()
	r := n.get(t, path)
	if r.xcache != xcache || r.body != body {
		t.Fatalf("GET %s via %s: X-Cache %q body %q, want %q %q", path, n.base, r.xcache, r.body, xcache, body)
	}
	return r
}

// adminGet GETs an admin path and returns status and body.
func (n *node) adminGet(path string) (int, string, error) {
	resp, err := n.hc.Get(n.admin + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric returns the value of the sample whose line starts with name
// (e.g. `tiercache_l2_circuit_open`), or -1 when there is none.
func (n *node) metric(t *testing.T, name string) float64 {
	t.Helper()
	_, body, err := n.adminGet("/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return metricValue(body, name)
}

func metricValue(body, name string) float64 {
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// purgeResult is the admin API's answer to a purge.
type purgeResult struct {
	Purged int    `json:"purged"`
	L1     int    `json:"l1"`
	L2     *int   `json:"l2"`
	Bodies int    `json:"bodies"`
	Soft   bool   `json:"soft"`
	Error  string `json:"error"`
}

// purge POSTs body to the admin /purge and returns the status and answer.
func (n *node) purge(t *testing.T, body string) (int, purgeResult) {
	t.Helper()
	resp, err := n.hc.Post(n.admin+"/purge", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("purge %s: %v", body, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var res purgeResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("purge %s: status %d, answer %q: %v", body, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, res
}

// waitReady polls /readyz until it answers 200. With L2 and warm start on
// (the default) that also means the sidecar has subscribed to the tier's
// invalidations.
func (n *node) waitReady(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for range 400 {
		status, body, err := n.adminGet("/readyz")
		if err == nil && status == http.StatusOK {
			return time.Since(start)
		}
		last = fmt.Sprintf("%d %q %v", status, body, err)
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("sidecar %s not ready after 10s; last /readyz: %s", n.base, last)
	return 0
}

// writeConfig writes a tier config file and returns its path.
func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tier.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// redisClient is a go-redis client for inspecting what the sidecars
// stored; several addresses make it a cluster client.
func redisClient(t *testing.T, addrs ...string) redis.UniversalClient {
	t.Helper()
	c := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs:           addrs,
		Protocol:        2,
		DisableIdentity: true,
		DialTimeout:     time.Second,
		ReadTimeout:     time.Second,
		WriteTimeout:    time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// entryName is the Redis key (DESIGN.md, "Redis (L2)") of the entry for a
// GET of http://shop.test<path> in the tier with this key prefix.
func entryName(prefix, path string) string {
	return prefix + "e:" + keyHash(path)
}

// keyHash is the hex SHA-256 of the cache key of a GET of
// http://shop.test<path>, as in the tier's entry names and hot set.
func keyHash(path string) string {
	sum := sha256.Sum256(cachekey.AppendPrimary(nil, "http", testHost, path))
	return hex.EncodeToString(sum[:])
}

// waitInL2 waits (bounded) until the asynchronous L2 write of path's entry
// has landed, without touching any sidecar.
func waitInL2(t *testing.T, rdb redis.UniversalClient, prefix, path string) time.Duration {
	t.Helper()
	took, ok := inL2Within(rdb, prefix, path)
	if !ok {
		t.Fatalf("%s (for %s) did not reach L2 within 5s", entryName(prefix, path), path)
	}
	return took
}

// inL2Within polls L2 for path's entry for about 5s (500 polls), and
// returns how long it took to appear, or false.
func inL2Within(rdb redis.UniversalClient, prefix, path string) (time.Duration, bool) {
	name := entryName(prefix, path)
	start := time.Now()
	for range 500 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		n, err := rdb.Exists(ctx, name).Result()
		cancel()
		if err == nil && n == 1 {
			return time.Since(start), true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, false
}

// awaitEviction polls b, every 5 ms for at most a second, until it stops
// answering path from its L1, and returns the first other reply and the
// time since since.
func awaitEviction(t *testing.T, b *node, path string, since time.Time) (reply, time.Duration) {
	t.Helper()
	for range 200 {
		r := b.get(t, path)
		if r.xcache != "HIT; layer=l1" {
			return r, time.Since(since)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s still served %s from its L1 a second after the purge", b.base, path)
	return reply{}, 0
}

const defaultPrefix = "tc:default/default:"

func TestAFillInOneSidecarIsAnL2HitInAnotherThenAnL1Hit(t *testing.T) {
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	b := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())

	a.expect(t, "/one", "MISS", "/one v1")
	landed := waitInL2(t, rdb, defaultPrefix, "/one")
	b.expect(t, "/one", "HIT; layer=l2", "/one v1")
	b.expect(t, "/one", "HIT; layer=l1", "/one v1")
	a.expect(t, "/one", "HIT; layer=l1", "/one v1")
	if n := origin.count("GET", "/one"); n != 1 {
		t.Fatalf("the origin got %d requests for /one, want 1", n)
	}
	t.Logf("A's fill reached L2 %s after A answered", landed)
}

func TestAPurgeThroughOneSidecarReachesEverySidecarOfTheTier(t *testing.T) {
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	b := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())

	cases := []struct {
		name, path, purge string
	}{
		{"a purge by absolute URL", "/byurl/x", `{"urls":["http://shop.test/byurl/x"]}`},
		{"a purge by origin-form URL", "/byform/x", `{"urls":["/byform/x"]}`},
		{"a purge by tag", "/bytag/x", `{"tags":["grp-bytag"]}`},
		{"a purge by prefix", "/byprefix/x", `{"prefix":"/byprefix/"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v1 := c.path + " v1"
			a.expect(t, c.path, "MISS", v1)
			waitInL2(t, rdb, defaultPrefix, c.path)
			b.expect(t, c.path, "HIT; layer=l2", v1)
			b.expect(t, c.path, "HIT; layer=l1", v1)

			sent := time.Now()
			status, res := a.purge(t, c.purge)
			answered := time.Since(sent)
			if status != http.StatusOK || res.L1 != 1 || res.L2 == nil || *res.L2 != 1 || res.Purged != 1 {
				t.Fatalf("purge %s: status %d, answer %+v (l2 %v), want 200 with one entry from L1 and one from L2",
					c.purge, status, res, res.L2)
			}
			r, took := awaitEviction(t, b, c.path, sent)
			// Its next request goes to the origin: nothing is left in
			// B's L1, nor in L2.
			if r.xcache != "MISS" || r.body != c.path+" v2" {
				t.Fatalf("B after the purge: X-Cache %q body %q, want MISS %q", r.xcache, r.body, c.path+" v2")
			}
			if took >= 100*time.Millisecond {
				t.Fatalf("B served the purged entry for %s after the purge was sent, want < 100ms", took)
			}
			// A never serves the old version again either (it may find B's
			// refill in L2).
			if r := a.get(t, c.path); r.body == v1 {
				t.Fatalf("A after the purge: X-Cache %q body %q, the purged version", r.xcache, r.body)
			}
			t.Logf("purge answered in %s; B stopped serving the entry within %s of sending it", answered, took)
		})
	}
}

func TestAnUnsafeRequestThroughOneSidecarInvalidatesTheURLInEverySidecar(t *testing.T) {
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	b := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, rs.Addr())

	a.expect(t, "/items", "MISS", "/items v1")
	waitInL2(t, rdb, defaultPrefix, "/items")
	b.expect(t, "/items", "HIT; layer=l2", "/items v1")
	b.expect(t, "/items", "HIT; layer=l1", "/items v1")
	a.expect(t, "/items", "HIT; layer=l1", "/items v1")

	sent := time.Now()
	r, err := a.do(http.MethodPost, "/items")
	if err != nil || r.status != http.StatusOK || r.xcache != "BYPASS" || r.body != "changed" {
		t.Fatalf("POST /items: %+v, %v; want 200 BYPASS from the origin", r, err)
	}
	if n := origin.count("POST", "/items"); n != 1 {
		t.Fatalf("the origin got %d POSTs, want 1", n)
	}
	// The invalidation is published before the POST is answered; B drops
	// its copy as soon as the message arrives.
	got, took := awaitEviction(t, b, "/items", sent)
	if got.xcache != "MISS" || got.body != "/items v2" {
		t.Fatalf("B after the POST: X-Cache %q body %q, want MISS \"/items v2\"", got.xcache, got.body)
	}
	if took >= 100*time.Millisecond {
		t.Fatalf("B served the invalidated entry for %s after the POST, want < 100ms", took)
	}
	if r := a.get(t, "/items"); r.body == "/items v1" {
		t.Fatalf("A after its own POST: X-Cache %q body %q, the invalidated version", r.xcache, r.body)
	}
	t.Logf("B stopped serving /items within %s of the POST being sent", took)
}

func TestTiersSharingOneRedisNeverSeeEachOthersEntries(t *testing.T) {
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	tier := func(name string) []string {
		return []string{"--redis-addr", rs.Addr(), "--config", cfg, "--pod-namespace", "shop", "--tier", name}
	}
	red := startNode(t, origin.URL, tier("red")...)
	red2 := startNode(t, origin.URL, tier("red")...)
	blue := startNode(t, origin.URL, tier("blue")...)
	for _, n := range []*node{red, red2, blue} {
		n.waitReady(t)
	}
	rdb := redisClient(t, rs.Addr())
	const redPrefix, bluePrefix = "tc:shop/red:", "tc:shop/blue:"

	red.expect(t, "/iso", "MISS", "/iso v1")
	waitInL2(t, rdb, redPrefix, "/iso")
	if n, err := rdb.Exists(t.Context(), entryName(bluePrefix, "/iso")).Result(); err != nil || n != 0 {
		t.Fatalf("blue's entry name exists after red's fill: %d, %v", n, err)
	}
	// Red's entry is in L2, but blue never reads it.
	blue.expect(t, "/iso", "MISS", "/iso v2")
	waitInL2(t, rdb, bluePrefix, "/iso")
	// And red's replicas keep reading their own tier's entry.
	red2.expect(t, "/iso", "HIT; layer=l2", "/iso v1")

	// A purge of everything in blue leaves red alone: its L2 entry, and
	// the L1 copies of its sidecars.
	status, res := blue.purge(t, `{"all":true}`)
	if status != http.StatusOK || res.L2 == nil || *res.L2 != 1 {
		t.Fatalf("blue's purge: %d %+v, want 200 with one L2 entry", status, res)
	}
	blue.expect(t, "/iso", "MISS", "/iso v3")
	if n, err := rdb.Exists(t.Context(), entryName(redPrefix, "/iso")).Result(); err != nil || n != 1 {
		t.Fatalf("red's entry after blue's purge: exists %d, %v", n, err)
	}
	red.expect(t, "/iso", "HIT; layer=l1", "/iso v1")
	red2.expect(t, "/iso", "HIT; layer=l1", "/iso v1")
}

// herd sends clients concurrent GETs for each of keys, client j of key k
// to nodes[(k+j) % len(nodes)], all released at once, and returns the
// replies by key.
func herd(t *testing.T, nodes []*node, keys []string, clients int) map[string][]reply {
	t.Helper()
	type result struct {
		key string
		r   reply
		err error
	}
	results := make(chan result, len(keys)*clients)
	release := make(chan struct{})
	var wg sync.WaitGroup
	for k, key := range keys {
		for j := range clients {
			n := nodes[(k+j)%len(nodes)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-release
				r, err := n.do(http.MethodGet, key)
				results <- result{key, r, err}
			}()
		}
	}
	close(release)
	wg.Wait()
	close(results)
	out := map[string][]reply{}
	for res := range results {
		if res.err != nil {
			t.Errorf("GET %s: %v", res.key, res.err)
			continue
		}
		out[res.key] = append(out[res.key], res.r)
	}
	return out
}

func TestCrossReplicaCoalescingSendsEachKeyToTheOriginOnce(t *testing.T) {
	const (
		replicas = 4
		nkeys    = 20
		clients  = 10
	)
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("/herd/%d", i)
	}
	var nodes []*node
	run := func(t *testing.T, config string) (*countingOrigin, map[string][]reply, time.Duration) {
		rs := testredis.Start(t)
		origin := newOrigin(t, 200*time.Millisecond)
		cfg := writeConfig(t, config)
		nodes = make([]*node, replicas)
		for i := range nodes {
			nodes[i] = startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
		}
		for _, n := range nodes {
			n.waitReady(t)
		}
		start := time.Now()
		got := herd(t, nodes, keys, clients)
		return origin, got, time.Since(start)
	}

	// The burst is 200 requests at once on two shared cores, under the race
	// detector and beside the other packages' tests: with the default 50ms
	// L2 timeout, L2 calls time out on a starved CPU, the breakers open and
	// every replica fetches for itself (by design). A generous timeout
	// keeps this test about the lease.
	const patientL2 = "l2: {timeout: 3s}\n"

	t.Run("cluster-wide coalescing (the default with L2) fetches each key once", func(t *testing.T) {
		origin, got, took := run(t, smallL1+patientL2)
		xcache := map[string]int{}
		for _, key := range keys {
			var wrong []string
			for _, r := range got[key] {
				xcache[r.xcache]++
				if r.status != http.StatusOK || r.body != key+" v1" {
					wrong = append(wrong, fmt.Sprintf("%d %q (%s)", r.status, r.body, r.xcache))
				}
			}
			if n := origin.count("GET", key); n != 1 || len(wrong) > 0 || len(got[key]) != clients {
				t.Errorf("%s: the origin got %d requests, want 1; %d of %d clients got something else than 200 %q: %v",
					key, n, len(wrong), len(got[key]), key+" v1", wrong)
			}
		}
		t.Logf("%d keys × %d clients over %d replicas in %s: origin requests %d; X-Cache %v",
			nkeys, clients, replicas, took, origin.total(), xcache)
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("replica %d: l2 get/set/lease errors %v/%v/%v, circuit open %v", i,
					n.metric(t, `tiercache_l2_errors_total{op="get"}`), n.metric(t, `tiercache_l2_errors_total{op="set"}`),
					n.metric(t, `tiercache_l2_errors_total{op="lease"}`), n.metric(t, "tiercache_l2_circuit_open"))
			}
		}
	})

	t.Run("per-replica coalescing fetches each key at most once per replica", func(t *testing.T) {
		origin, got, took := run(t, smallL1+patientL2+"coalescing: {clusterWide: false}\n")
		xcache := map[string]int{}
		perKey := map[int]int{} // origin requests per key → keys
		for _, key := range keys {
			n := origin.count("GET", key)
			perKey[n]++
			if n < 1 || n > replicas {
				t.Errorf("%s: the origin got %d requests, want 1 to %d", key, n, replicas)
			}
			for _, r := range got[key] {
				xcache[r.xcache]++
				if r.status != http.StatusOK || !regexp.MustCompile(`^`+regexp.QuoteMeta(key)+` v[1-4]$`).MatchString(r.body) {
					t.Errorf("%s: status %d body %q, want 200 with one of the first four versions", key, r.status, r.body)
				}
			}
		}
		t.Logf("without cluster-wide coalescing: origin requests %d for %d keys (keys by requests per key: %v) in %s; X-Cache %v",
			origin.total(), nkeys, perKey, took, xcache)
	})
}

func TestANewSidecarWarmsItsL1FromTheHottestL2EntriesBeforeItIsReady(t *testing.T) {
	const (
		nkeys   = 200
		nhot    = 20
		workers = 8
	)
	rs := testredis.Start(t)
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	rdb := redisClient(t, rs.Addr())

	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("/warm/%d", i)
		a.expect(t, keys[i], "MISS", keys[i]+" v1")
	}
	for _, k := range keys {
		waitInL2(t, rdb, defaultPrefix, k)
	}
	hot := keys[:nhot]

	// Hits are sampled, 1 in 64, into the tier's hot set. Hit every key a
	// little and the hot ones a lot, in rounds, until each hot key has
	// been sampled (bounded: a key missing after 10 rounds of 192 hits has
	// odds of e^-30).
	hammer := func(paths []string, times int) {
		t.Helper()
		work := make(chan string, workers)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var bad []string
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for p := range work {
					r, err := a.do(http.MethodGet, p)
					if err != nil || r.xcache != "HIT; layer=l1" {
						mu.Lock()
						bad = append(bad, fmt.Sprintf("%s: %q %v", p, r.xcache, err))
						mu.Unlock()
					}
				}
			}()
		}
		for range times {
			for _, p := range paths {
				work <- p
			}
		}
		close(work)
		wg.Wait()
		if len(bad) > 0 {
			t.Fatalf("%d of A's repeated requests were not L1 hits, e.g. %s", len(bad), bad[0])
		}
	}
	hammer(keys, 3)
	missing := hot
	hits := 0
	for round := 0; len(missing) > 0; round++ {
		if round == 10 {
			t.Fatalf("hot keys never sampled into the hot set after %d hits each: %v", hits, missing)
		}
		hammer(missing, 192)
		hits += 192
		missing = waitSampled(t, rdb, missing)
	}
	card, _ := rdb.ZCard(t.Context(), defaultPrefix+"hot").Result()
	before := origin.total()

	c := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	warmed := c.waitReady(t)
	for _, k := range hot {
		c.expect(t, k, "HIT; layer=l1", k+" v1")
	}
	if after := origin.total(); after != before {
		t.Fatalf("the origin got %d requests from the new sidecar, want none", after-before)
	}
	t.Logf("hot set: %d members after %d+ hits per hot key; C ready %s after it listened, holding %v entries in L1",
		card, hits, warmed, c.metric(t, "tiercache_l1_entries"))
}

// waitSampled waits (bounded) for the asynchronous hot-set writes of paths
// to land and returns those still not in the tier's hot set.
func waitSampled(t *testing.T, rdb redis.UniversalClient, paths []string) []string {
	t.Helper()
	var missing []string
	for range 20 {
		missing = missing[:0]
		for _, p := range paths {
			if _, err := rdb.ZScore(t.Context(), defaultPrefix+"hot", keyHash(p)).Result(); err != nil {
				missing = append(missing, p)
			}
		}
		if len(missing) == 0 {
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return missing
}

func TestTwoSidecarsShareARedisCluster(t *testing.T) {
	cluster := testredis.StartCluster(t, 3)
	addrs := strings.Join(cluster.Addrs(), ",")
	origin := newOrigin(t, 0)
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.URL, "--redis-addr", addrs, "--config", cfg)
	b := startNode(t, origin.URL, "--redis-addr", addrs, "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)
	rdb := redisClient(t, cluster.Addrs()...)

	// Enough keys to land on every master.
	fill := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			a.expect(t, p, "MISS", p+" v1")
		}
		for _, p := range paths {
			waitInL2(t, rdb, defaultPrefix, p)
			b.expect(t, p, "HIT; layer=l2", p+" v1")
			b.expect(t, p, "HIT; layer=l1", p+" v1")
		}
	}
	var tagged, prefixed []string
	for i := range 6 {
		tagged = append(tagged, fmt.Sprintf("/ctag/%d", i))
		prefixed = append(prefixed, fmt.Sprintf("/cpre/%d", i))
	}
	fill(append(tagged, prefixed...)...)

	for _, c := range []struct {
		name, purge string
		paths       []string
	}{
		{"a purge by tag", `{"tags":["grp-ctag"]}`, tagged},
		{"a purge by prefix", `{"prefix":"/cpre/"}`, prefixed},
	} {
		t.Run(c.name, func(t *testing.T) {
			sent := time.Now()
			status, res := a.purge(t, c.purge)
			if status != http.StatusOK || res.L2 == nil || *res.L2 != len(c.paths) || res.Error != "" {
				t.Fatalf("purge %s on a cluster: %d %+v, want 200 with %d L2 entries", c.purge, status, res, len(c.paths))
			}
			var slowest time.Duration
			for _, p := range c.paths {
				r, took := awaitEviction(t, b, p, sent)
				if r.xcache != "MISS" || r.body != p+" v2" {
					t.Fatalf("B after the purge: %s X-Cache %q body %q, want MISS %q", p, r.xcache, r.body, p+" v2")
				}
				slowest = max(slowest, took)
			}
			t.Logf("cluster purge of %d entries: B had dropped them all within %s", len(c.paths), slowest)
		})
	}
}

// A purged response that another replica's fill writes back to L2 after
// the purge deleted it (the fill began before the purge, and its replica
// had not yet had the purge's message) is purged again by the sidecar
// that purged, RepeatAfter later: from L2 and from every L1 that read it
// back meanwhile. The late write is made here with the entry's own bytes
// (DUMP before the purge, RESTORE after it): which replica writes it does
// not matter to Redis.
func TestAPurgedResponseWrittenBackToL2ByALateFillIsPurgedAgain(t *testing.T) {
	a, rdb := nodeWithRedis(t)

	a.expect(t, "/late", "MISS", "/late v1")
	writeBack := lateWriteBack(t, rdb, "/late")
	if status, _ := a.purge(t, `{"urls":["http://shop.test/late"]}`); status != http.StatusOK {
		t.Fatalf("purge: %d", status)
	}
	purged := time.Now()
	writeBack()
	// The window: A's L1 has nothing, L2 has the purged response again.
	a.expect(t, "/late", "HIT; layer=l2", "/late v1")

	for {
		r := a.get(t, "/late")
		if r.body != "/late v1" {
			if r.body != "/late v2" {
				t.Fatalf("after the repeat: X-Cache %q body %q, want the origin's v2", r.xcache, r.body)
			}
			break
		}
		if time.Since(purged) > invalidate.RepeatAfter+5*time.Second {
			t.Fatalf("the purged response is still served %s after the purge: nothing purged it again", time.Since(purged))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if since := time.Since(purged); since < invalidate.RepeatAfter/2 {
		t.Fatalf("v1 stopped being served %s after the purge, before any repeat could run: the test did not open the window", since)
	}
}

// The repeat removes only what was requested before the purge (and
// within the clock margin after it): a response fetched afresh after
// that stays in L1 and L2, so a purge costs a hot key one miss, not two.
func TestAPurgesRepeatKeepsWhatWasFetchedAfterThePurge(t *testing.T) {
	a, rdb := nodeWithRedis(t)
	ctx := t.Context()

	// The fetch must land between the margin's end (1 s after the
	// purge) and the repeat (2 s after it); a machine too slow for that
	// window gets another try.
	for try := 1; ; try++ {
		late, fresh := fmt.Sprintf("/late%d", try), fmt.Sprintf("/fresh%d", try)
		a.expect(t, late, "MISS", late+" v1")
		a.expect(t, fresh, "MISS", fresh+" v1")
		writeBack := lateWriteBack(t, rdb, late)
		if status, _ := a.purge(t, `{"urls":["http://shop.test`+late+`","http://shop.test`+fresh+`"]}`); status != http.StatusOK {
			t.Fatalf("purge: %d", status)
		}
		purged := time.Now()
		// A late fill's write-back, and a fetch after the margin.
		writeBack()
		time.Sleep(time.Until(purged.Add(time.Second + 50*time.Millisecond))) // a time to pass, not a barrier
		a.expect(t, fresh, "MISS", fresh+" v2")
		if a.get(t, late).body != late+" v1" {
			if try == 3 {
				t.Fatal("three times the repeat ran before the fetch 1 s after the purge was answered")
			}
			continue
		}
		waitInL2(t, rdb, defaultPrefix, fresh)

		// The write-back going is the sign that the repeat ran.
		for a.get(t, late).body == late+" v1" {
			if time.Since(purged) > invalidate.RepeatAfter+5*time.Second {
				t.Fatalf("the purged response is still served %s after the purge: nothing purged it again", time.Since(purged))
			}
			time.Sleep(20 * time.Millisecond)
		}
		a.expect(t, fresh, "HIT; layer=l1", fresh+" v2")
		n, err := rdb.Exists(ctx, entryName(defaultPrefix, fresh)).Result()
		if err != nil || n != 1 {
			t.Fatalf("the response fetched after the purge is gone from L2 (EXISTS %d, %v): the repeat removed it", n, err)
		}
		return
	}
}

// lateWriteBack returns what writes path's L2 entry, as it is now, back
// into L2: another replica's late fill writing a purged response back
// (which replica writes it does not matter to Redis).
func lateWriteBack(t *testing.T, rdb redis.UniversalClient, path string) (writeBack func()) {
	t.Helper()
	waitInL2(t, rdb, defaultPrefix, path)
	name := entryName(defaultPrefix, path)
	old, err := rdb.Dump(t.Context(), name).Result()
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if err := rdb.RestoreReplace(t.Context(), name, time.Hour, old).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// nodeWithRedis is a ready sidecar with a small L1 and an L2 on a Redis
// of its own, in front of a versioning origin, and a client of that
// Redis.
func nodeWithRedis(t *testing.T) (*node, redis.UniversalClient) {
	t.Helper()
	rs := testredis.Start(t)
	a := startNode(t, newOrigin(t, 0).URL, "--redis-addr", rs.Addr(), "--config", writeConfig(t, smallL1))
	a.waitReady(t)
	return a, redisClient(t, rs.Addr())
}
