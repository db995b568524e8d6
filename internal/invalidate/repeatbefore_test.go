package invalidate

import (
	"context"
	"encoding/json"
	"maps"
	"net/url"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l1"
)

// putRequested stores a response entry requested at t under the key the
// proxy would use.
func putRequested(t *testing.T, cache *l1.Cache, host, target string, at time.Time) string {
	t.Helper()
	key := string(cachekey.AppendPrimary(nil, "http", host, target))
	e := &entry.Entry{Kind: entry.KindResponse, Host: host, Target: target, Status: 200,
		Body: []byte("x"), RequestTime: at, ResponseTime: at, Lifetime: time.Hour}
	if err := cache.Set(key, e); err != nil {
		t.Fatal(err)
	}
	return key
}

// The ages of what a repeat finds, relative to the purge it repeats, and
// whether it must remove it: what was requested before the purge (a
// late fill's write-back) and within the clock margin after it goes;
// what was fetched afresh later stays, so a purge costs a hot key one
// miss, not two.
var repeatCases = []struct {
	name   string
	after  time.Duration // requested this long after the purge
	remove bool
}{
	{"a response requested before the purge (a late fill's write-back)", -time.Second, true},
	{"a response requested within the clock margin after it", repeatMargin / 2, true},
	{"a response fetched afresh after it", repeatMargin + time.Second, false},
}

// The sidecar that made a purge or an invalidation repeats it on L2 and
// its own L1 for what was requested before it only.
func TestARepeatRemovesOnlyWhatWasRequestedBeforeThePurge(t *testing.T) {
	purges := maps.Clone(purgesOfX)
	purges["a purge by prefix"] = func(p *Purger) { _, _ = p.Purge(context.Background(), Request{Prefix: "/x"}) }
	for name, purge := range purges {
		for _, c := range repeatCases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				p, cache, l2 := repeatingPurger(t, "me") // Close runs it
				purged := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
				p.clock = testingclock.NewFakeClock(purged)
				putRequested(t, cache, "a.example", "/x", purged.Add(-time.Minute))
				purge(p)

				key := putRequested(t, cache, "a.example", "/x", purged.Add(c.after))
				l2.putAt(key, purged.Add(c.after))
				p.Close()
				if present(cache, key) == c.remove {
					t.Errorf("L1: the repeat removed it: %v, want %v", !present(cache, key), c.remove)
				}
				// (The fake L2 only holds exact keys: a prefix purge
				// scans, which the sidecar's Redis test covers.)
				if name != "a purge by prefix" && l2.has(key) == c.remove {
					t.Errorf("L2: the repeat removed it: %v, want %v", !l2.has(key), c.remove)
				}
				ms := l2.messages()
				if len(ms) != 2 || !ms[0].Before.IsZero() || !ms[1].Before.Equal(purged.Add(repeatMargin)) {
					t.Fatalf("messages %+v: want the purge, then its repeat limited to %v", ms, purged.Add(repeatMargin))
				}
			})
		}
	}
}

// A replica applies a repeat's message to its L1 for what was requested
// before the message's limit only; a repeat without a limit (a sidecar of an earlier version) removes
// everything it names, as before.
func TestAReplicaAppliesARepeatToWhatWasRequestedBeforeItsLimit(t *testing.T) {
	purged := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	for name, purge := range purgesOfX {
		for _, c := range repeatCases {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				sender, _, l2 := repeatingPurger(t, "sender")
				sender.clock = testingclock.NewFakeClock(purged)
				purge(sender)
				sender.Close()
				raw := l2.raws()
				if len(raw) != 2 {
					t.Fatalf("%d messages, want the purge and its repeat", len(raw))
				}

				replica, cache, _ := newPurger(t, "")
				replica.clock = testingclock.NewFakeClock(purged.Add(RepeatAfter))
				replica.HandleMessage(raw[0])
				key := putRequested(t, cache, "a.example", "/x", purged.Add(c.after))
				replica.HandleMessage(raw[1])
				if present(cache, key) == c.remove {
					t.Fatalf("the repeat removed it: %v, want %v", !present(cache, key), c.remove)
				}
			})
		}
	}

	t.Run("a limit past the replica's now", func(t *testing.T) {
		// The limit is the sender's clock and a copy here may carry a
		// third replica's: it is compared as it is, never cut to this
		// replica's now (TestALaggingReplicaAppliesARepeatToWhatAnother
		// ReplicaFetchedBeforeThePurge).
		replica, cache, _ := newPurger(t, "")
		now := purged.Add(RepeatAfter)
		replica.clock = testingclock.NewFakeClock(now)
		before := now.Add(time.Hour)
		gone := putRequested(t, cache, "a.example", "/x", now.Add(time.Millisecond))
		kept := putRequested(t, cache, "a.example", "/y", before.Add(time.Millisecond))
		replica.HandleMessage(mustMarshal(t, message{From: "sender", Request: Request{URLs: []string{"http://a.example/x", "http://a.example/y"}},
			Repeat: true, Before: before}))
		if present(cache, gone) {
			t.Fatal("a limit ahead of the replica's clock kept what was requested before it")
		}
		if !present(cache, kept) {
			t.Fatal("a limit ahead of the replica's clock removed what was requested after it")
		}
	})
	t.Run("a repeat without a limit", func(t *testing.T) {
		replica, cache, _ := newPurger(t, "")
		replica.clock = testingclock.NewFakeClock(purged)
		key := putRequested(t, cache, "a.example", "/x", purged.Add(time.Hour))
		replica.HandleMessage(mustMarshal(t, message{From: "old", Request: Request{URLs: []string{"http://a.example/x"}}, Repeat: true}))
		if present(cache, key) {
			t.Fatal("a repeat from a sidecar that sends no limit kept what it names")
		}
	})
}

// A repeat marks no fill: a fill that began after the purge stores its
// response, where the repeat runs and where its message arrives. (Every
// fill that began before the purge was marked by the purge itself.)
func TestARepeatMarksNoFill(t *testing.T) {
	sender, _, l2 := repeatingPurger(t, "sender")
	_, _ = sender.Purge(context.Background(), Request{URLs: []string{"http://a.example/x"}})
	sender.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "a.example", Path: "/y"}})

	replica, _, _ := newPurger(t, "")
	first := l2.raws()
	for _, b := range first {
		replica.HandleMessage(b)
	}
	fills := []*Watch{
		sender.Watch("a.example", "/x"), sender.Watch("a.example", "/y"),
		replica.Watch("a.example", "/x"), replica.Watch("a.example", "/y"),
	}
	sender.Close()
	repeats := l2.raws()[len(first):]
	if len(repeats) != 2 {
		t.Fatalf("%d repeat messages, want 2", len(repeats))
	}
	for _, b := range repeats {
		replica.HandleMessage(b)
	}
	for i, w := range fills {
		if !w.Commit(nil, func() {}) {
			t.Errorf("fill %d, begun after the purge, was not stored: its repeat marked it", i)
		}
		w.End()
	}
}

// mustMarshal is m as a sidecar without an invalidation key publishes it.
func mustMarshal(t *testing.T, m message) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	if err == nil {
		b, err = newChannelAuth(Auth{}).seal(b)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}
