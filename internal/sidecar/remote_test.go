package sidecar

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/test/testredis"
)

// The purger's Remote (invalidation.go) reaches L2 through one method: each
// selector, with or without a Match, hard or soft, does to a real Redis
// what it names and counts it.
func TestTheRemoteAppliesEachSelectorAndModeToL2(t *testing.T) {
	rs := testredis.Start(t)
	now := time.Now().Truncate(time.Second)
	cut := now.Add(-time.Minute) // old entries were requested before it
	oldOnly := func(_ string, e *entry.Entry) bool { return e.RequestTime.Before(cut) }
	soft := invalidate.Mode{Soft: true, At: now.Add(time.Second)} // after every request
	// Three entries: "old" and "new" tagged red, "p" under /p/.
	cases := []struct {
		name     string
		sel      invalidate.Selector
		mode     invalidate.Mode
		n        int
		affected []string // removed (hard) or marked stale (soft)
	}{
		{"hard keys delete the keys that exist", invalidate.Selector{Kind: invalidate.SelectKeys, Values: []string{"old", "none"}}, invalidate.Mode{}, 1, []string{"old"}},
		{"hard keys with a match delete what it accepts", invalidate.Selector{Kind: invalidate.SelectKeys, Values: []string{"old", "new"}, Match: oldOnly}, invalidate.Mode{}, 1, []string{"old"}},
		{"hard tags delete the tagged entries", invalidate.Selector{Kind: invalidate.SelectTags, Values: []string{"red"}}, invalidate.Mode{}, 2, []string{"old", "new"}},
		{"hard tags with a match delete what it accepts", invalidate.Selector{Kind: invalidate.SelectTags, Values: []string{"red"}, Match: oldOnly}, invalidate.Mode{}, 1, []string{"old"}},
		{"hard all with a match deletes what it accepts", invalidate.Selector{Kind: invalidate.SelectAll, Match: func(_ string, e *entry.Entry) bool { return strings.HasPrefix(e.Target, "/p/") }}, invalidate.Mode{}, 1, []string{"p"}},
		{"hard all deletes everything", invalidate.Selector{Kind: invalidate.SelectAll}, invalidate.Mode{}, 3, []string{"old", "new", "p"}},
		{"soft keys mark the keys", invalidate.Selector{Kind: invalidate.SelectKeys, Values: []string{"old"}}, soft, 1, []string{"old"}},
		{"soft tags mark the tagged entries", invalidate.Selector{Kind: invalidate.SelectTags, Values: []string{"red"}}, soft, 2, []string{"old", "new"}},
		{"soft all with a match marks what it accepts", invalidate.Selector{Kind: invalidate.SelectAll, Match: oldOnly}, soft, 1, []string{"old"}},
		{"soft all marks everything", invalidate.Selector{Kind: invalidate.SelectAll}, soft, 3, []string{"old", "new", "p"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, c2 := newRemote(t, rs.Addr(), now)
			ctx := context.Background()
			put := func(key, target string, requested time.Time, tags ...string) {
				e := &entry.Entry{Kind: entry.KindResponse, Host: "shop.test", Target: target, Status: 200,
					RequestTime: requested, ResponseTime: requested, Lifetime: time.Hour, Tags: tags,
					StaleIfError: time.Hour} // a soft purge keeps it for its stale window
				if err := c2.Set(ctx, key, e, time.Hour); err != nil {
					t.Fatal(err)
				}
			}
			put("old", "/old", cut.Add(-time.Minute), "red")
			put("new", "/new", now, "red")
			put("p", "/p/1", now)
			n, err := r.Purge(ctx, c.sel, c.mode)
			if err != nil || n != c.n {
				t.Fatalf("Purge = %d, %v; want %d", n, err, c.n)
			}
			for _, key := range []string{"old", "new", "p"} {
				affected := false
				for _, a := range c.affected {
					affected = affected || a == key
				}
				e, err := c2.Get(ctx, key)
				switch {
				case !c.mode.Soft && affected && err == nil:
					t.Errorf("%s is still in L2 after the hard purge", key)
				case (c.mode.Soft || !affected) && err != nil:
					t.Errorf("%s is gone from L2: %v", key, err)
				case c.mode.Soft && affected && e.FreshUntil().After(soft.At):
					t.Errorf("%s is fresh until %v after a soft purge at %v", key, e.FreshUntil(), soft.At)
				case c.mode.Soft && !affected && !e.FreshUntil().After(soft.At):
					t.Errorf("%s was marked stale, though not selected", key)
				}
			}
		})
	}
}

// newRemote returns the purger's Remote over a store on the Redis at addr,
// with an L2 prefix of the test's own, and the L2 client behind it.
func newRemote(t *testing.T, addr string, now time.Time) (remote, *l2.Client) {
	t.Helper()
	c1, err := l1.New(context.Background(), l1.Config{MaxSize: 1 << 20, MaxEntrySize: 16 << 10, Shards: 16, LifeWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c1.Close() })
	c2, err := l2.New(l2.Config{Addrs: []string{addr}, Prefix: "tc:" + strings.ReplaceAll(t.Name(), "/", ".") + "/t:", Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close() })
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.New(context.Background(), store.Options{L1: c1, L2: c2, Timeout: 2 * time.Second, Metrics: m,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return remote{c: c2, st: st, publish: prometheus.NewCounter(prometheus.CounterOpts{Name: "publish_errors"})}, c2
}
