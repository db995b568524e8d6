package l2

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// These tests run against real redis-server processes (test/testredis);
// a machine without one fails them rather than skipping. Every test
// leaves no goroutine behind: each client's pool, subscription and
// reconnection loop ends with Close.
func TestMain(m *testing.M) {
	if _, err := testredis.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// testTimeout is Config.Timeout for tests that are not about timeouts:
// generous, for a busy machine running the race detector.
const testTimeout = 2 * time.Second

// env is a Redis deployment shared by subtests, each with its own prefix.
type env struct {
	mode  string
	addrs []string
	// raw plants and inspects values behind the client's back.
	raw redis.UniversalClient
}

func standaloneEnv(t *testing.T) *env {
	s := testredis.Start(t)
	raw := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = raw.Close() })
	return &env{mode: ModeStandalone, addrs: []string{s.Addr()}, raw: raw}
}

func clusterEnv(t *testing.T) *env {
	c := testredis.StartCluster(t, 3)
	raw := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	t.Cleanup(func() { _ = raw.Close() })
	return &env{mode: ModeCluster, addrs: c.Addrs(), raw: raw}
}

// prefix is a tier prefix unique to the test.
func prefix(t *testing.T, tier string) string {
	return "tc:" + strings.ReplaceAll(t.Name(), "/", ".") + "/" + tier + ":"
}

func (e *env) client(t *testing.T, prefix string) *Client {
	t.Helper()
	return newTestClient(t, Config{Addrs: e.addrs, Mode: e.mode, Prefix: prefix, Timeout: testTimeout})
}

func newTestClient(t testing.TB, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testEntry is a small stored response.
func testEntry(target string, tags ...string) *entry.Entry {
	now := time.Unix(1_700_000_000, 123)
	return &entry.Entry{
		Kind:         entry.KindResponse,
		Host:         "shop.example.com",
		Target:       target,
		Tags:         tags,
		Status:       200,
		Header:       []entry.Field{{Name: "Content-Type", Value: "text/plain"}, {Name: "Etag", Value: `"v1"`}},
		Body:         []byte("body of " + target),
		RequestTime:  now,
		ResponseTime: now.Add(time.Millisecond),
		Lifetime:     time.Minute,
	}
}

func keyFor(target string) string { return "GET shop.example.com" + target }

// sameEntry compares entries by their encoding.
func sameEntry(a, b *entry.Entry) bool {
	return bytes.Equal(entry.Encode(nil, a), entry.Encode(nil, b))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustSet(t *testing.T, c *Client, key string, e *entry.Entry, ttl time.Duration) {
	t.Helper()
	if err := c.Set(ctxT(t), key, e, ttl); err != nil {
		t.Fatalf("Set(%q): %v", key, err)
	}
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
