package store

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// fileEntryAt is fileEntry for a response requested at at.
func fileEntryAt(t *testing.T, bodies *bodystore.Store, key, target string, at time.Time) *entry.Entry {
	t.Helper()
	return committedFile(t, bodies, key, &entry.Entry{Kind: entry.KindResponse, Host: "shop.example", Target: target,
		Status: 200, RequestTime: at, ResponseTime: at, Lifetime: time.Hour})
}

// redisFixture is a fixture with L2 on a Redis of its own, its key
// prefix and a client that inspects it.
func redisFixture(t *testing.T) (*fixture, string, *redis.Client) {
	t.Helper()
	srv := testredis.Start(t)
	return newFixture(t, storeOpts{addr: srv.Addr()}), testPrefix(t), rawClient(t, srv.Addr())
}

// A purge's repeat (PurgeIf with the repeat's condition) removes from L1
// and the body store what was requested before the purge, whether L1
// still holds its entry or only its file is left, and keeps the entry
// and the file of what was fetched after it; a Vary marker goes, with
// every variant's file.
func TestARepeatKeepsTheEntriesAndFilesOfWhatWasFetchedAfterThePurge(t *testing.T) {
	purged := time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC)
	before := purged.Add(time.Second)
	older := func(e *entry.Entry) bool { return e.RequestTime.Before(before) }
	cases := []struct {
		name    string
		at      time.Time // requested
		evicted bool      // L1 lost the entry, the file stayed
		varied  bool      // behind a Vary marker
		gone    bool
	}{
		{"a late fill's write-back", purged.Add(-time.Second), false, false, true},
		{"a late fill's write-back L1 evicted", purged.Add(-time.Second), true, false, true},
		{"a fetch after the purge", purged.Add(5 * time.Second), false, false, false},
		{"a fetch after the purge L1 evicted", purged.Add(5 * time.Second), true, false, false},
		{"a variant fetched after the purge, its marker repeated", purged.Add(5 * time.Second), false, true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, storeOpts{})
			bodies, dir := openBodies(t)
			l := NewLocal(f.l1, bodies)
			key := string(cachekey.AppendPrimary(nil, "http", "shop.example", "/r"))
			prim := key
			if c.varied {
				mustSet(t, f.s, key, &entry.Entry{Kind: entry.KindVary, Host: "shop.example", Target: "/r",
					Vary: []string{"accept-encoding"}, Nonce: 7, ResponseTime: c.at, Lifetime: time.Hour})
				key = string(cachekey.AppendVariant([]byte(key), 7)) + "gzip"
			}
			e := fileEntryAt(t, bodies, key, "/r", c.at)
			mustSet(t, f.s, key, e)
			file := filepath.Join(dir, fmt.Sprintf("%x.body", e.File.ID))
			if c.evicted {
				f.l1.Delete(key)
			}
			l.PurgeIf(prim, older)
			_, err := os.Stat(file)
			if gone := os.IsNotExist(err); gone != c.gone {
				t.Errorf("file gone %v, want %v (stat: %v)", gone, c.gone, err)
			}
			if c.evicted || c.varied {
				return
			}
			if _, err := f.l1.Get(key); (err != nil) != c.gone {
				t.Errorf("L1 entry gone %v, want %v", err != nil, c.gone)
			}
		})
	}
}

// DeleteL2KeysIf and DeleteL2TagsIf delete from Redis only what match
// selects: a purge's repeat keeps what was fetched after the purge.
func TestARepeatDeletesFromL2OnlyWhatItsConditionSelects(t *testing.T) {
	f, prefix, rc := redisFixture(t)
	ctx := testCtx(t)
	purged := time.Now() // the store's clock: what it writes to L2 is fresh
	before := purged.Add(time.Second)
	older := func(_ string, e *entry.Entry) bool { return e.RequestTime.Before(before) }
	put := func(target string, at time.Time) string {
		e := response(at, target, time.Hour)
		e.RequestTime, e.Tags = at, []string{"blue"}
		k := keyFor(target)
		if err := f.s.SetShared(ctx, k, e); err != nil {
			t.Fatal(err)
		}
		return k
	}
	for name, del := range map[string]func(keys []string) (int, error){
		"by key": func(keys []string) (int, error) { return f.s.DeleteL2KeysIf(ctx, keys, older) },
		"by tag": func([]string) (int, error) { return f.s.DeleteL2TagsIf(ctx, []string{"blue"}, older) },
	} {
		t.Run(name, func(t *testing.T) {
			stale := put("/stale-"+name, purged.Add(-time.Second))
			fresh := put("/fresh-"+name, purged.Add(5*time.Second))
			n, err := del([]string{stale, fresh})
			if err != nil || n != 1 {
				t.Fatalf("deleted %d (err %v), want 1", n, err)
			}
			if inL2(t, rc, prefix, stale) {
				t.Error("the response requested before the purge is still in L2")
			}
			if !inL2(t, rc, prefix, fresh) {
				t.Error("the response fetched after the purge is gone from L2")
			}
		})
	}
}

// A value under a repeated key that is not an entry this sidecar reads (a
// later version's write-back during a rolling upgrade, or damage) is
// deleted by the repeat, as the purge deleted whatever the key held; a
// soft purge leaves it.
func TestARepeatDeletesAValueItCannotReadUnderItsKeys(t *testing.T) {
	f, prefix, rc := redisFixture(t)
	ctx := testCtx(t)
	k := keyFor("/unreadable")
	if err := rc.Set(ctx, entryName(prefix, k), "not an entry", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.SAdd(ctx, prefix+"t:x", entryName(prefix, k)).Err(); err != nil {
		t.Fatal(err)
	}
	never := func(string, *entry.Entry) bool { return false }
	always := func(string, *entry.Entry) bool { return true }
	// Every soft purge's rewrite (exact keys, tag sets, scans) is given
	// the value as e nil: it leaves it, whatever its condition.
	for name, soft := range map[string]func() (int, error){
		"by key":  func() (int, error) { return f.s.ExpireL2Keys(ctx, time.Now(), []string{k}, always) },
		"by tag":  func() (int, error) { return f.s.ExpireL2Tags(ctx, time.Now(), []string{"x"}, always) },
		"by scan": func() (int, error) { return f.s.ExpireL2Matching(ctx, time.Now(), always) },
	} {
		if n, err := soft(); err != nil || n != 0 {
			t.Fatalf("a soft purge %s = %d, %v; want 0 counted", name, n, err)
		}
		if !inL2(t, rc, prefix, k) {
			t.Fatalf("a soft purge %s deleted a value it cannot read", name)
		}
	}
	n, err := f.s.DeleteL2KeysIf(ctx, []string{k}, never)
	if err != nil || n != 0 {
		t.Fatalf("DeleteL2KeysIf = %d, %v; want 0 counted (it is no stored response)", n, err)
	}
	if inL2(t, rc, prefix, k) {
		t.Fatal("the repeat left a value it cannot read under a key it purges")
	}
}
