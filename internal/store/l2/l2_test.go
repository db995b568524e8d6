package l2

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/entry"
)

// TestL2 runs every behaviour against a standalone server and a
// three-master cluster, started once; subtests run in parallel, each tier
// under its own prefix.
func TestL2(t *testing.T) {
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"an entry round-trips with its tags", testRoundTrip},
		{"entries and tag sets get the TTL set", testTTL},
		{"a missing key is ErrNotFound", testMissing},
		{"tiers never read each other's entries", testTierIsolation},
		{"a foreign or corrupt value is a miss and is deleted", testCorrupt},
		{"set refuses a TTL <= 0 and a nil entry", testSetRefuses},
		{"delete removes only the keys named", testDelete},
		{"purge tags deletes tagged entries across slots", testPurgeTags},
		{"purge matching scans every master", testPurgeMatching},
		{"published messages reach subscribers", testPubSub},
		{"the invalidation sequence counts from a random start and starts anew when lost", testSeq},
		{"one of many concurrent lease takers wins", testLease},
		{"hottest returns live keys in hotness order within maxBytes", testHottest},
		{"the hot set is trimmed", testHotTrim},
		{"set many stores every item", testSetMany},
		{"rewrites change entries in place by key, tag and scan", testRewrite},
	}
	envs := []*env{standaloneEnv(t), clusterEnv(t)}
	for _, e := range envs {
		t.Run(e.mode, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.fn(t, e)
				})
			}
		})
	}
}

func testRoundTrip(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	want := testEntry("/p/1", "red", "blue")
	want.Vary = []string{"accept-encoding"}
	mustSet(t, c, keyFor("/p/1"), want, time.Minute)
	got, err := c.Get(ctxT(t), keyFor("/p/1"))
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !sameEntry(&got, want) {
		t.Fatalf("Get = %+v, want %+v", got, want)
	}
	for _, tag := range want.Tags {
		members, err := e.raw.SMembers(ctxT(t), c.k.tagKey(tag)).Result()
		if err != nil || len(members) != 1 || members[0] != c.k.entryKey(keyFor("/p/1")) {
			t.Fatalf("tag set %s = %v, %v; want the entry's key name", tag, members, err)
		}
	}
}

func testTTL(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	pttl := func(name string) time.Duration {
		t.Helper()
		d, err := e.raw.PTTL(ctx, name).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	near := func(what string, got, want time.Duration) {
		t.Helper()
		if got > want || got < want-2*time.Second {
			t.Fatalf("%s: PTTL = %s, want just under %s", what, got, want)
		}
	}
	mustSet(t, c, "k1", testEntry("/1", "tag"), 10*time.Second+250*time.Millisecond)
	near("entry", pttl(c.k.entryKey("k1")), 10*time.Second+250*time.Millisecond)
	near("tag set", pttl(c.k.tagKey("tag")), 10*time.Second+250*time.Millisecond)

	// A shorter-lived entry with the tag leaves the set's TTL alone; a
	// longer-lived one extends it.
	mustSet(t, c, "k2", testEntry("/2", "tag"), 3*time.Second)
	near("tag set after a shorter entry", pttl(c.k.tagKey("tag")), 10*time.Second+250*time.Millisecond)
	mustSet(t, c, "k3", testEntry("/3", "tag"), 30*time.Second)
	near("tag set after a longer entry", pttl(c.k.tagKey("tag")), 30*time.Second)

	// Sub-millisecond TTLs round up rather than to "no expiry".
	mustSet(t, c, "k4", testEntry("/4"), time.Microsecond)
	if d := pttl(c.k.entryKey("k4")); d == -1 {
		t.Fatalf("entry with a 1µs TTL has no expiry")
	}
}

func testMissing(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	if _, err := c.Get(ctxT(t), "never stored"); err != ErrNotFound {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
}

func testTierIsolation(t *testing.T, e *env) {
	a := e.client(t, prefix(t, "a"))
	b := e.client(t, prefix(t, "b"))
	ctx := ctxT(t)
	key := keyFor("/same")
	mustSet(t, a, key, testEntry("/same"), time.Minute)
	if _, err := b.Get(ctx, key); err != ErrNotFound {
		t.Fatalf("tier b read tier a's entry: %v", err)
	}

	// Tier b's value for the very same cache key, copied under tier a's
	// key name, is still not tier a's entry.
	mustSet(t, b, key, testEntry("/same"), time.Minute)
	v, err := e.raw.Get(ctx, b.k.entryKey(key)).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.raw.Set(ctx, a.k.entryKey(key), v, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Get(ctx, key); err != ErrNotFound {
		t.Fatalf("tier a accepted tier b's value: %v", err)
	}
	if n := e.raw.Exists(ctx, a.k.entryKey(key)).Val(); n != 0 {
		t.Fatalf("tier b's value under tier a's name was not deleted")
	}
	if _, err := b.Get(ctx, key); err != nil {
		t.Fatalf("tier b lost its own entry: %v", err)
	}
}

func testCorrupt(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	other := e.client(t, prefix(t, "other"))
	key := keyFor("/x")
	good := wrap(c.k.prefix, key, testEntry("/x"))
	corrupt := append([]byte(nil), good...)
	corrupt[len(corrupt)-3] ^= 0xff // a body byte: the entry checksum fails
	headerLen := len(valueMagic) + 1 + len(c.k.prefix) + 1 + len(key)
	// The same value with the prefix length as a two-byte uvarint.
	overlong := append([]byte(valueMagic), good[len(valueMagic)]|0x80, 0)
	overlong = append(overlong, good[len(valueMagic)+1:]...)

	values := map[string][]byte{
		"empty":                          {},
		"garbage":                        []byte("hello, world"),
		"magic only":                     []byte(valueMagic),
		"huge prefix length":             append([]byte(valueMagic), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01),
		"truncated in the prefix":        good[:len(valueMagic)+5],
		"truncated in the key":           good[:headerLen-3],
		"truncated after the key":        good[:headerLen],
		"overlong prefix length":         overlong,
		"truncated in the entry":         good[:len(good)-1],
		"corrupted entry bytes":          corrupt,
		"raw entry without our wrapper":  entry.Encode(nil, testEntry("/x")),
		"another key's value":            wrap(c.k.prefix, keyFor("/y"), testEntry("/y")),
		"another tier's value":           wrap(other.k.prefix, key, testEntry("/x")),
		"trailing bytes after the entry": append(append([]byte(nil), good...), 0),
	}
	ctx := ctxT(t)
	name := c.k.entryKey(key)
	for what, v := range values {
		if err := e.raw.Set(ctx, name, v, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Get(ctx, key); err != ErrNotFound {
			t.Errorf("%s: Get = %v, want ErrNotFound", what, err)
		}
		if e.raw.Exists(ctx, name).Val() != 0 {
			t.Errorf("%s: value not deleted", what)
		}
	}
	// A value of another type under the name is a Redis error, not a
	// crash, and not "unavailable".
	if err := e.raw.SAdd(ctx, name, "m").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, key); err == nil || IsUnavailable(err) {
		t.Errorf("Get of a set: err = %v, want a WRONGTYPE error that is not 'unavailable'", err)
	}
	// And the real thing still works.
	if err := e.raw.Set(ctx, name, good, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, key); err != nil {
		t.Fatalf("Get of a good value: %v", err)
	}
}

func testSetRefuses(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	for _, ttl := range []time.Duration{0, -time.Second} {
		if err := c.Set(ctx, "k", testEntry("/k"), ttl); err == nil {
			t.Errorf("Set with ttl %s succeeded", ttl)
		}
	}
	if err := c.Set(ctx, "k", nil, time.Minute); err == nil {
		t.Error("Set of a nil entry succeeded")
	}
	err := c.SetMany(ctx, []Item{{Key: "ok", Entry: testEntry("/ok"), TTL: time.Minute}, {Key: "bad", Entry: testEntry("/bad")}})
	if err == nil {
		t.Error("SetMany with a zero TTL succeeded")
	}
	if _, err := c.Get(ctx, "ok"); err != ErrNotFound {
		t.Errorf("SetMany stored part of a refused batch: %v", err)
	}
}

func testDelete(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	for i := range 3 {
		mustSet(t, c, fmt.Sprint("k", i), testEntry(fmt.Sprint("/", i)), time.Minute)
	}
	if err := c.Delete(ctx, "k0", "k1", "never stored"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	for i, want := range []error{ErrNotFound, ErrNotFound, nil} {
		if _, err := c.Get(ctx, fmt.Sprint("k", i)); err != want {
			t.Errorf("Get(k%d) = %v, want %v", i, err, want)
		}
	}
	if err := c.Delete(ctx); err != nil {
		t.Fatalf("Delete of nothing: %v", err)
	}
	if n, err := c.DeleteCount(ctx, "k1", "k2", "never stored"); err != nil || n != 1 {
		t.Fatalf("DeleteCount = %d, %v; want 1 (only k2 was left)", n, err)
	}
}

func testPurgeTags(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	// Entries 0-19 tagged red, 10-29 blue (10-19 both), 40-49 green,
	// the rest untagged: 30 entries go, counted once each.
	var items []Item
	for i := range 50 {
		var tags []string
		if i < 20 {
			tags = append(tags, "red")
		}
		if i >= 10 && i < 30 {
			tags = append(tags, "blue")
		}
		if i >= 40 {
			tags = append(tags, "green")
		}
		items = append(items, Item{Key: fmt.Sprint("k", i), Entry: testEntry(fmt.Sprint("/", i), tags...), TTL: time.Minute})
	}
	if err := c.SetMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	// A stale member (entry already gone) is not counted, and a member
	// that is not one of this tier's entry names is never deleted.
	if err := c.Delete(ctx, "k15"); err != nil {
		t.Fatal(err)
	}
	outsider := "tc:someone-else:e:" + strings.Repeat("0", hashLen)
	if err := e.raw.Set(ctx, outsider, "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.raw.SAdd(ctx, c.k.tagKey("red"), outsider).Err(); err != nil {
		t.Fatal(err)
	}

	n, err := c.PurgeTags(ctx, []string{"red", "blue", "red", "no such tag"})
	if err != nil {
		t.Fatalf("PurgeTags: %v", err)
	}
	if n != 29 {
		t.Errorf("PurgeTags = %d, want 29 (30 tagged, one already gone)", n)
	}
	for i := range 50 {
		_, err := c.Get(ctx, fmt.Sprint("k", i))
		if gone := err == ErrNotFound; gone != (i < 30) {
			t.Errorf("k%d: Get = %v after the purge", i, err)
		}
	}
	for _, tag := range []string{"red", "blue"} {
		if e.raw.Exists(ctx, c.k.tagKey(tag)).Val() != 0 {
			t.Errorf("tag set %s still exists", tag)
		}
	}
	if e.raw.SCard(ctx, c.k.tagKey("green")).Val() != 10 {
		t.Error("tag set green changed")
	}
	if e.raw.Exists(ctx, outsider).Val() != 1 {
		t.Error("a foreign key listed in a tag set was deleted")
	}
}

func testPurgeMatching(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	other := e.client(t, prefix(t, "other"))
	ctx := ctxT(t)
	const total = 2400
	for start := 0; start < total; start += 400 {
		var items []Item
		for i := start; i < start+400; i++ {
			dir := "/b/"
			if i%2 == 0 {
				dir = "/a/"
			}
			target := fmt.Sprint(dir, i)
			items = append(items, Item{Key: keyFor(target), Entry: testEntry(target), TTL: time.Minute})
		}
		if err := c.SetMany(ctx, items); err != nil {
			t.Fatal(err)
		}
		if err := other.SetMany(ctx, items[:10]); err != nil {
			t.Fatal(err)
		}
	}
	// Garbage under an entry name is skipped, not matched, not fatal.
	if err := e.raw.Set(ctx, c.k.entryKey("junk"), "junk", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int64
	var inMatch atomic.Int32
	n, err := c.PurgeMatching(ctx, func(key string, en *entry.Entry) bool {
		calls.Add(1)
		if inMatch.Add(1) != 1 {
			t.Error("match called concurrently")
		}
		defer inMatch.Add(-1)
		if key != keyFor(en.Target) {
			t.Errorf("match got key %q for target %q", key, en.Target)
		}
		return strings.HasPrefix(en.Target, "/a/")
	})
	if err != nil {
		t.Fatalf("PurgeMatching: %v", err)
	}
	if n != total/2 || calls.Load() != total {
		t.Fatalf("PurgeMatching = %d after %d calls, want %d after %d", n, calls.Load(), total/2, total)
	}
	for _, i := range []int{0, 1, 2, 3, total - 2, total - 1} {
		target := fmt.Sprint("/b/", i)
		if i%2 == 0 {
			target = fmt.Sprint("/a/", i)
		}
		_, err := c.Get(ctx, keyFor(target))
		if gone := err == ErrNotFound; gone != (i%2 == 0) {
			t.Errorf("%s: Get = %v after the purge", target, err)
		}
	}
	if _, err := other.Get(ctx, keyFor("/a/0")); err != nil {
		t.Errorf("another tier's entry went with the purge: %v", err)
	}
	// Never KEYS, on any node.
	err = forEachNode(ctx, e, func(info string) error {
		if strings.Contains(info, "cmdstat_keys:") {
			return errors.New("KEYS was called")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// forEachNode calls fn with INFO commandstats of every master.
func forEachNode(ctx context.Context, e *env, fn func(info string) error) error {
	if cc, ok := e.raw.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return fn(n.Info(ctx, "commandstats").Val())
		})
	}
	return fn(e.raw.Info(ctx, "commandstats").Val())
}

func testPubSub(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	other := e.client(t, prefix(t, "other"))
	c.healthInterval = 200 * time.Millisecond // exercise the PING probe too
	ctx := ctxT(t)
	subCtx, cancel := context.WithCancel(ctx)
	subscribed := make(chan struct{}, 10)
	got := make(chan []byte, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(subCtx, func(b []byte) { got <- b }, func(time.Time) { subscribed <- struct{}{} })
	}()
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		t.Fatal("not subscribed after 10s")
	}
	time.Sleep(500 * time.Millisecond) // a quiet channel is probed, and survives
	if err := other.Publish(ctx, []byte("not for us")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		msg := fmt.Sprint("purge ", i)
		start := time.Now()
		if err := c.Publish(ctx, []byte(msg)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		select {
		case b := <-got:
			if string(b) != msg {
				t.Fatalf("got %q, want %q", b, msg)
			}
			if d := time.Since(start); d > 100*time.Millisecond {
				t.Errorf("message took %s", d)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("message %q not delivered", msg)
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Subscribe returned %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Subscribe did not return after its context ended")
	}
	if len(subscribed) != 0 {
		t.Errorf("onSubscribed called %d more times on a healthy connection", len(subscribed))
	}
}

func testLease(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	const ttl = 400 * time.Millisecond
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		tokens []string
	)
	for range 16 {
		wg.Go(func() {
			tok, ok, err := c.AcquireLease(ctx, "k", ttl)
			if err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				tokens = append(tokens, tok)
				mu.Unlock()
			} else if tok != "" {
				t.Errorf("a lost race returned token %q", tok)
			}
		})
	}
	wg.Wait()
	if len(tokens) != 1 || tokens[0] == "" {
		t.Fatalf("winners' tokens: %q, want exactly one", tokens)
	}
	acquired := time.Now()
	if d := e.raw.PTTL(ctx, c.k.leaseKey("k")).Val(); d <= 0 || d > ttl {
		t.Fatalf("lease PTTL = %s, want (0, %s]", d, ttl)
	}
	// Someone else's token does not release it.
	if err := c.ReleaseLease(ctx, "k", "not-the-token"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.AcquireLease(ctx, "k", ttl); ok {
		t.Fatal("lease taken again after a release with the wrong token")
	}
	// It expires by itself after ttl.
	waitFor(t, 5*time.Second, "the lease to expire", func() bool {
		return e.raw.Exists(ctx, c.k.leaseKey("k")).Val() == 0
	})
	if d := time.Since(acquired); d < ttl-50*time.Millisecond {
		t.Fatalf("lease gone after %s, before its ttl %s", d, ttl)
	}
	tok, ok, err := c.AcquireLease(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("AcquireLease after expiry: %v %v", ok, err)
	}
	// Only the holder's token extends it.
	if held, err := c.ExtendLease(ctx, "k", tokens[0], time.Hour); err != nil || held {
		t.Fatalf("ExtendLease with an expired holder's token = %v, %v; want not held", held, err)
	}
	if held, err := c.ExtendLease(ctx, "k", tok, time.Hour); err != nil || !held {
		t.Fatalf("ExtendLease by the holder = %v, %v; want held", held, err)
	}
	if d := e.raw.PTTL(ctx, c.k.leaseKey("k")).Val(); d <= time.Minute {
		t.Fatalf("lease PTTL after extending to 1h = %s", d)
	}
	// The holder's token releases it; the old holder's does nothing.
	if err := c.ReleaseLease(ctx, "k", tokens[0]); err != nil {
		t.Fatal(err)
	}
	if e.raw.Exists(ctx, c.k.leaseKey("k")).Val() != 1 {
		t.Fatal("an expired holder's token released the new holder's lease")
	}
	if err := c.ReleaseLease(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c.AcquireLease(ctx, "k", ttl); !ok {
		t.Fatal("lease not free after release")
	}
	if _, _, err := c.AcquireLease(ctx, "k2", 0); err == nil {
		t.Fatal("AcquireLease with ttl 0 succeeded")
	}
}

func testHottest(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	hit := func(key string, n int) {
		for range n {
			if err := c.RecordHit(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Hotness: gone (no entry) 9, k0 6, k1 5, k2 4, junk 3, k3 2, k4 1.
	var want []*entry.Entry
	for i := range 5 {
		en := testEntry(fmt.Sprint("/", i))
		en.Body = []byte(strings.Repeat("x", 100))
		want = append(want, en)
		mustSet(t, c, fmt.Sprint("k", i), en, time.Minute)
	}
	hit("gone", 9)
	for i, n := range []int{6, 5, 4, 2, 1} {
		hit(fmt.Sprint("k", i), n)
	}
	if err := e.raw.Set(ctx, c.k.entryKey("junk"), "junk", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	hit("junk", 3)

	check := func(n int, maxBytes int64, wantN int) {
		t.Helper()
		got, err := c.Hottest(ctx, n, maxBytes)
		if err != nil {
			t.Fatalf("Hottest(%d, %d): %v", n, maxBytes, err)
		}
		if len(got) != wantN {
			t.Fatalf("Hottest(%d, %d) returned %d entries, want %d", n, maxBytes, len(got), wantN)
		}
		for i := range got {
			if got[i].Key != fmt.Sprint("k", i) || !sameEntry(&got[i].Entry, want[i]) {
				t.Fatalf("Hottest(%d, %d)[%d] = %q %+v, want k%d", n, maxBytes, i, got[i].Key, got[i].Entry, i)
			}
		}
	}
	size := int64(entry.EncodedSize(want[0]))
	check(10, 0, 5)
	check(3, 0, 3)
	check(10, 2*size, 2)
	check(10, 2*size+1, 2)
	check(10, 3*size, 3)
	check(10, size-1, 0)
	check(0, 0, 0)
}

func testHotTrim(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	c.hotMax, c.hotTrimEvery = 5, 4
	ctx := ctxT(t)
	for i := range 20 {
		// k0 is hit on every round: it must survive every trim.
		if err := c.RecordHit(ctx, "k0"); err != nil {
			t.Fatal(err)
		}
		if err := c.RecordHit(ctx, fmt.Sprint("k", i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.raw.ZCard(ctx, c.k.hot).Val(); n > 5+4 {
		t.Fatalf("hot set has %d members, want at most 5 (+ 4 between trims)", n)
	}
	top := e.raw.ZRevRange(ctx, c.k.hot, 0, 0).Val()
	if len(top) != 1 || top[0] != hash("k0") {
		t.Fatalf("hottest member %v, want hash of k0", top)
	}
}

func testSetMany(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	var items []Item
	for i := range 100 {
		items = append(items, Item{Key: fmt.Sprint("k", i), Entry: testEntry(fmt.Sprint("/", i), fmt.Sprint("tag", i%7)), TTL: time.Duration(i+1) * time.Second})
	}
	if err := c.SetMany(ctx, items); err != nil {
		t.Fatal(err)
	}
	if err := c.SetMany(ctx, nil); err != nil {
		t.Fatalf("SetMany of nothing: %v", err)
	}
	for _, it := range items {
		got, err := c.Get(ctx, it.Key)
		if err != nil || !sameEntry(&got, it.Entry) {
			t.Fatalf("Get(%s) = %v", it.Key, err)
		}
	}
	if d := e.raw.PTTL(ctx, c.k.tagKey("tag0")).Val(); d < 90*time.Second {
		t.Fatalf("tag0 set PTTL %s, want its longest entry's ~99s", d)
	}
}

func testSeq(t *testing.T, e *env) {
	p := prefix(t, "a")
	c := e.client(t, p)
	ctx := ctxT(t)
	n0, existed, err := c.Seq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if existed || n0 < 1<<32 {
		t.Fatalf("a new tier's sequence: %d (existed %v), want a random start >= 2^32, not existing before", n0, existed)
	}
	if n, existed, err := c.Seq(ctx); err != nil || !existed || n != n0 {
		t.Fatalf("read again: %d, %v, %v; want %d, existing", n, existed, err, n0)
	}
	for i := uint64(1); i <= 3; i++ {
		if n, err := c.NextSeq(ctx); err != nil || n != n0+i {
			t.Fatalf("next number: %d, %v; want %d", n, err, n0+i)
		}
	}
	if n, _, err := c.Seq(ctx); err != nil || n != n0+3 {
		t.Fatalf("after three numbers: %d, %v; want %d", n, err, n0+3)
	}
	if got, err := e.raw.Get(ctx, p+"iseq").Uint64(); err != nil || got != n0+3 {
		t.Fatalf("the counter in Redis (%siseq): %d, %v; want %d", p, got, err, n0+3)
	}
	// Lost (a flush, a restart without persistence, an eviction): the
	// next number comes from a new random start, not from 1.
	if err := e.raw.Del(ctx, p+"iseq").Err(); err != nil {
		t.Fatal(err)
	}
	n, err := c.NextSeq(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n < 1<<32 || n == n0+4 {
		t.Fatalf("the first number after the counter was lost: %d, want a new random start", n)
	}
}
