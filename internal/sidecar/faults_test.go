package sidecar

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/test/testredis"
)

// These tests break Redis under a sidecar that is serving traffic and check
// DESIGN.md's "Failure semantics": no client sees an error caused by L2,
// requests never wait on a sick Redis for long, and once Redis is back the
// circuit breaker closes and fills reach L2 again.

// faultConfig: warm start off, so that a sidecar started during a test
// serves exactly what L2 holds, without a preload.
const faultConfig = smallL1 + "l2: {timeout: 50ms, warmStart: {disabled: true}}\n"

// latencies are client-side request durations.
type latencies []time.Duration

func (l latencies) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (l latencies) max() time.Duration {
	if len(l) == 0 {
		return 0
	}
	return slices.Max(l)
}

func (l latencies) String() string {
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(l),
		l.quantile(0.5).Round(10*time.Microsecond), l.quantile(0.99).Round(10*time.Microsecond), l.max().Round(10*time.Microsecond))
}

// loadResult is what a load run saw.
type loadResult struct {
	hits, misses latencies
	errors       []string
}

// load runs workers goroutines against n until stop closes (or 10 s, or
// 20000 requests per worker): 7 in 8 requests go to one of the 50 keys
// /k/<i> (hits once filled), the rest to a key never requested before (a
// miss). Every answer must be a 200 with the origin's body for the path.
func load(n *node, workers int, stop <-chan struct{}) loadResult {
	var (
		mu  sync.Mutex
		res loadResult
		wg  sync.WaitGroup
	)
	deadline := time.Now().Add(10 * time.Second)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var hits, misses latencies
			var errs []string
		requests:
			for i := 0; i < 20000 && time.Now().Before(deadline); i++ {
				select {
				case <-stop:
					break requests
				default:
				}
				path := fmt.Sprintf("/k/%d", rand.IntN(50))
				if i%8 == 7 {
					path = fmt.Sprintf("/new/%d/%d/%d", w, i, rand.Uint32())
				}
				r, err := n.do(http.MethodGet, path)
				switch {
				case err != nil:
					errs = append(errs, fmt.Sprintf("GET %s: %v", path, err))
				case r.status != http.StatusOK || r.body != "body of "+path:
					errs = append(errs, fmt.Sprintf("GET %s: %d %q (X-Cache %q)", path, r.status, r.body, r.xcache))
				case strings.HasPrefix(r.xcache, "HIT"):
					hits = append(hits, r.took)
				default:
					misses = append(misses, r.took)
				}
			}
			mu.Lock()
			res.hits = append(res.hits, hits...)
			res.misses = append(res.misses, misses...)
			res.errors = append(res.errors, errs...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return res
}

// plainOrigin answers every GET with "body of <path>", fresh for 5 minutes.
func plainOrigin(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = fmt.Fprintf(w, "body of %s", r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// breakerOpen reads tiercache_l2_circuit_open.
func (n *node) breakerOpen(t *testing.T) bool {
	t.Helper()
	return n.metric(t, "tiercache_l2_circuit_open") == 1
}

// awaitBreaker waits, bounded by limit, for the breaker to be open (or
// closed), sending a request for a new key every step so that the sidecar
// makes L2 calls (L1 hits make none), and returns how long it took.
func awaitBreaker(t *testing.T, n *node, open bool, limit time.Duration) (time.Duration, bool) {
	t.Helper()
	start := time.Now()
	for i := 0; time.Since(start) < limit && i < 1000; i++ {
		if n.breakerOpen(t) == open {
			return time.Since(start), true
		}
		path := fmt.Sprintf("/probe/%d/%d", i, rand.Uint32())
		if r, err := n.do(http.MethodGet, path); err != nil || r.status != http.StatusOK || r.body != "body of "+path {
			t.Errorf("GET %s while waiting for the breaker: %+v %v", path, r, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start), false
}

func TestRedisFailuresNeverReachClients(t *testing.T) {
	// A fault breaks Redis (or the network to it); heal brings it back.
	type fault struct {
		breaks, heal func()
	}
	cases := []struct {
		name string
		// viaProxy: the sidecar reaches Redis through a LatencyProxy;
		// otherwise directly, so that a dead server refuses connections
		// as it really does.
		viaProxy bool
		// flap: heal 300ms into the fault, under load, rather than after
		// the load and once the breaker is open.
		flap bool
		// resubscribes: the fault drops the invalidation subscription,
		// which must be counted as lost once Redis is back.
		resubscribes bool
		fault        func(rs *testredis.Server, p *testredis.LatencyProxy) fault
	}{
		{"Redis killed", false, false, true, func(rs *testredis.Server, _ *testredis.LatencyProxy) fault {
			return fault{rs.Kill, rs.Restart}
		}},
		{"Redis paused (SIGSTOP)", false, false, false, func(rs *testredis.Server, _ *testredis.LatencyProxy) fault {
			return fault{rs.Pause, rs.Resume}
		}},
		{"Redis slowed by 200ms, four times the L2 timeout", true, false, false, func(_ *testredis.Server, p *testredis.LatencyProxy) fault {
			return fault{func() { p.SetDelay(0, 200*time.Millisecond) }, func() { p.SetDelay(0, 0) }}
		}},
		{"Redis restarted on the same port", false, true, true, func(rs *testredis.Server, _ *testredis.LatencyProxy) fault {
			return fault{rs.Kill, rs.Restart}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rs := testredis.Start(t)
			addr := rs.Addr()
			var proxy *testredis.LatencyProxy
			if c.viaProxy {
				proxy = testredis.StartLatencyProxy(t, rs.Addr())
				addr = proxy.Addr()
			}
			f := c.fault(rs, proxy)
			origin := plainOrigin(t)
			cfg := writeConfig(t, faultConfig)
			a := startNode(t, origin, "--redis-addr", addr, "--config", cfg)
			for i := range 50 {
				a.get(t, fmt.Sprintf("/k/%d", i))
			}

			stop := make(chan struct{})
			done := make(chan loadResult, 1)
			go func() { done <- load(a, 8, stop) }()
			time.Sleep(300 * time.Millisecond) // a healthy baseline first
			broke := time.Now()
			f.breaks()
			var healed time.Time
			if c.flap {
				time.Sleep(300 * time.Millisecond)
				f.heal()
				healed = time.Now()
				time.Sleep(700 * time.Millisecond)
			} else {
				time.Sleep(time.Second)
			}
			close(stop)
			res := <-done

			t.Logf("under load (1s of it with the fault): hits %s; misses %s; %d errors", res.hits, res.misses, len(res.errors))
			if len(res.errors) > 0 {
				t.Errorf("%d client errors, e.g. %v", len(res.errors), res.errors[:min(5, len(res.errors))])
			}
			if len(res.hits) < 50 || len(res.misses) < 5 {
				t.Errorf("too little load to judge: %d hits, %d misses", len(res.hits), len(res.misses))
			}
			// L2 calls are bounded by 50ms and skipped while the breaker is
			// open: nothing waits on Redis for long. (The max gets some
			// slack for a busy test machine; a wait on any Redis-side
			// timeout — a 5s dial, a 10s coalescing wait — still fails it.)
			for _, l := range []struct {
				name string
				l    latencies
			}{{"hit", res.hits}, {"miss", res.misses}} {
				if p99, m := l.l.quantile(0.99), l.l.max(); p99 >= time.Second || m >= 2*time.Second {
					t.Errorf("%s latency p99 %s, max %s; want p99 < 1s and max < 2s", l.name, p99, m)
				}
			}
			if !c.flap {
				// Still broken: new keys make the sidecar call L2, which
				// fails until the breaker opens.
				openedIn, ok := awaitBreaker(t, a, true, 5*time.Second)
				if !ok {
					t.Fatalf("the circuit breaker not open %s after the fault (%s of it without load)", time.Since(broke), openedIn)
				}
				t.Logf("breaker open (seen %s after the fault)", time.Since(broke).Round(time.Millisecond))
				f.heal()
				healed = time.Now()
			}

			// Back to normal: the breaker closes, and fills reach L2 again.
			if _, ok := awaitBreaker(t, a, false, 15*time.Second); !ok {
				t.Fatalf("the circuit breaker still open %s after Redis was back", time.Since(healed))
			}
			closedIn := time.Since(healed)
			a.get(t, "/after-recovery")
			landed := waitInL2(t, redisClient(t, rs.Addr()), defaultPrefix, "/after-recovery")
			b := startNode(t, origin, "--redis-addr", rs.Addr(), "--config", cfg)
			if r := b.get(t, "/after-recovery"); r.xcache != "HIT; layer=l2" || r.body != "body of /after-recovery" {
				t.Fatalf("a second sidecar after recovery: X-Cache %q body %q, want an L2 hit", r.xcache, r.body)
			}
			if c.resubscribes {
				const lost = `tiercache_l2_errors_total{op="subscribe"}`
				deadline := time.Now().Add(15 * time.Second)
				for a.metric(t, lost) < 1 {
					if time.Now().After(deadline) {
						t.Fatalf("%s = %v after Redis came back, want the lost subscription counted", lost, a.metric(t, lost))
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
			t.Logf("breaker closed within %s of Redis being back; a new fill reached L2 %s after it was served; l2 errors: get %v, set %v, lease %v",
				closedIn.Round(time.Millisecond), landed.Round(time.Millisecond),
				a.metric(t, `tiercache_l2_errors_total{op="get"}`), a.metric(t, `tiercache_l2_errors_total{op="set"}`),
				a.metric(t, `tiercache_l2_errors_total{op="lease"}`))
		})
	}
}

func TestRequestsDoNotWaitOnRedisWhileTheBreakerIsOpen(t *testing.T) {
	rs := testredis.Start(t)
	origin := plainOrigin(t)
	a := startNode(t, origin, "--redis-addr", rs.Addr(), "--config", writeConfig(t, faultConfig))
	for i := range 50 {
		a.get(t, fmt.Sprintf("/k/%d", i))
	}
	// Sequential requests: the latency of one request, not of a queue.
	measure := func(tag string) (hits, misses latencies) {
		t.Helper()
		for i := range 400 {
			r := a.get(t, fmt.Sprintf("/k/%d", i%50))
			if r.xcache != "HIT; layer=l1" {
				t.Fatalf("%s: /k/%d: X-Cache %q, want an L1 hit", tag, i%50, r.xcache)
			}
			hits = append(hits, r.took)
			if i%10 == 0 {
				path := fmt.Sprintf("/m/%s/%d", tag, i)
				r := a.get(t, path)
				if r.body != "body of "+path || r.xcache != "MISS" {
					t.Fatalf("%s: %s: X-Cache %q body %q", tag, path, r.xcache, r.body)
				}
				misses = append(misses, r.took)
			}
		}
		return hits, misses
	}
	hitsBefore, missesBefore := measure("before")

	rs.Pause()
	t.Cleanup(rs.Resume) // runs before the kill registered by Start
	openedIn, ok := awaitBreaker(t, a, true, 5*time.Second)
	if !ok {
		t.Fatalf("the breaker did not open within %s of pausing Redis", openedIn)
	}
	hitsPaused, missesPaused := measure("paused")
	if !a.breakerOpen(t) {
		t.Fatal("the breaker closed while Redis was paused")
	}

	t.Logf("L1 hits: before %s; Redis paused, breaker open %s", hitsBefore, hitsPaused)
	t.Logf("misses: before %s; Redis paused, breaker open %s (breaker opened %s after the pause)",
		missesBefore, missesPaused, openedIn.Round(time.Millisecond))
	if d := hitsPaused.quantile(0.5) - hitsBefore.quantile(0.5); d >= 20*time.Millisecond || hitsPaused.quantile(0.5) >= 20*time.Millisecond {
		t.Errorf("median L1 hit: %s paused vs %s before, want < 20ms and within 20ms", hitsPaused.quantile(0.5), hitsBefore.quantile(0.5))
	}
	// Misses skip L2 altogether while the breaker is open: no 50ms L2
	// timeout in the median (a half-open probe costs one request that).
	if m := missesPaused.quantile(0.5); m >= 50*time.Millisecond {
		t.Errorf("median miss with the breaker open took %s, want < 50ms (the L2 timeout)", m)
	}
}
