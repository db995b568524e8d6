package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/test/testredis"
)

// Tests run against real redis-server processes (test/testredis); a
// machine without one fails them rather than skipping.
func TestMain(m *testing.M) {
	if _, err := testredis.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// relaxedTimeout is Options.Timeout for tests that are not about
// timeouts: generous, for a busy machine running the race detector.
const relaxedTimeout = 2 * time.Second

// clock is an injected clock that only moves when told to.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := new(clock)
	c.ns.Store(time.Now().UnixNano())
	return c
}

func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// fixture is one Layered store and its parts.
type fixture struct {
	s  *Layered
	l1 *l1.Cache
	l2 *l2.Client // nil without Redis
	m  *metrics.Metrics
}

// storeOpts describe a fixture; zero fields take test defaults.
type storeOpts struct {
	addr   string // Redis; "" for L1 only
	prefix string // L2 key prefix; default from the test name
	clock  *clock
	// l2Timeout is l2.Config.Timeout (default relaxedTimeout).
	l2Timeout time.Duration
	opts      func(*Options) // last say on Options
}

func newFixture(t testing.TB, so storeOpts) *fixture {
	t.Helper()
	cfg := l1.Config{MaxSize: 1 << 20, MaxEntrySize: 16 << 10, Shards: 16, LifeWindow: time.Hour}
	c1, err := l1.New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("l1.New: %v", err)
	}
	t.Cleanup(func() { _ = c1.Close() })
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{l1: c1, m: m}
	if so.addr != "" {
		if so.prefix == "" {
			so.prefix = testPrefix(t)
		}
		if so.l2Timeout == 0 {
			so.l2Timeout = relaxedTimeout
		}
		f.l2, err = l2.New(l2.Config{Addrs: []string{so.addr}, Prefix: so.prefix, Timeout: so.l2Timeout})
		if err != nil {
			t.Fatalf("l2.New: %v", err)
		}
		t.Cleanup(func() { _ = f.l2.Close() })
	}
	if so.clock == nil {
		so.clock = newClock()
	}
	o := Options{
		L1:      c1,
		L2:      f.l2,
		Timeout: relaxedTimeout,
		Metrics: m,
		Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
		Now:     so.clock.Now,
	}
	if so.opts != nil {
		so.opts(&o)
	}
	f.s, err = New(context.Background(), o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = f.s.Close() })
	return f
}

// testPrefix is an L2 prefix unique to the test; stores of one test that
// share it share their entries, like the replicas of a tier.
func testPrefix(t testing.TB) string {
	return "tc:" + strings.ReplaceAll(t.Name(), "/", ".") + "/tier:"
}

// rawClient inspects Redis behind the stores' backs.
func rawClient(t *testing.T, addr string) *redis.Client {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// entryName is the Redis key of key's entry (DESIGN.md "Redis (L2)").
func entryName(prefix, key string) string {
	sum := sha256.Sum256([]byte(key))
	return prefix + "e:" + hex.EncodeToString(sum[:])
}

// response is a stored 200 received at now, fresh for lifetime.
func response(now time.Time, target string, lifetime time.Duration) *entry.Entry {
	return &entry.Entry{
		Kind:         entry.KindResponse,
		Host:         "shop.example.com",
		Target:       target,
		Status:       200,
		Header:       []entry.Field{{Name: "Content-Type", Value: "text/plain"}},
		Body:         []byte("body of " + target),
		RequestTime:  now.Add(-time.Millisecond),
		ResponseTime: now,
		Lifetime:     lifetime,
	}
}

func keyFor(target string) string { return "GET shop.example.com" + target }

// sameEntry compares entries by their encoding.
func sameEntry(a, b *entry.Entry) bool {
	return bytes.Equal(entry.Encode(nil, a), entry.Encode(nil, b))
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond every 5ms until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inL2 reports whether Redis holds key's entry.
func inL2(t *testing.T, rc *redis.Client, prefix, key string) bool {
	t.Helper()
	n, err := rc.Exists(context.Background(), entryName(prefix, key)).Result()
	if err != nil {
		t.Fatalf("EXISTS: %v", err)
	}
	return n == 1
}

func mustSet(t *testing.T, s *Layered, key string, e *entry.Entry) {
	t.Helper()
	if err := s.Set(context.Background(), key, e); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
}

func gauge(g prometheus.Gauge) float64     { return testutil.ToFloat64(g) }
func counter(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }
func l2Errors(m *metrics.Metrics, op string) float64 {
	return testutil.ToFloat64(m.L2Errors.WithLabelValues(op))
}
