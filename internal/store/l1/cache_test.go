package l1

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/entry"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sidecarConfig is the L1 of a sidecar with tierconfig's defaults: 256 MiB
// in 256 shards of 1 MiB, entries up to 1 MiB (in practice 1 MiB less 224
// bytes, see Config.MaxEntrySize), and LifeWindow.
func sidecarConfig() Config {
	return Config{MaxSize: 256 * mib, MaxEntrySize: 1 * mib, Shards: 256, LifeWindow: LifeWindow}
}

// smallConfig is 4 MiB in 16 shards of 256 KiB.
func smallConfig() Config {
	return Config{MaxSize: 4 << 20, MaxEntrySize: 256 << 10, Shards: 16, LifeWindow: time.Hour}
}

func newCache(t testing.TB, cfg Config) *Cache {
	t.Helper()
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func response(host, target string, bodyLen int, tags ...string) *entry.Entry {
	now := time.Unix(1700000000, 0).UTC()
	return &entry.Entry{
		Kind:   entry.KindResponse,
		Host:   host,
		Target: target,
		Tags:   tags,
		Status: 200,
		Header: []entry.Field{
			{Name: "Cache-Control", Value: "public, max-age=300"},
			{Name: "Content-Type", Value: "text/plain"},
			{Name: "Date", Value: "Tue, 14 Nov 2023 22:13:20 GMT"},
			{Name: "Etag", Value: `"abc"`},
			{Name: "Last-Modified", Value: "Tue, 14 Nov 2023 20:00:00 GMT"},
			{Name: "Vary", Value: "Accept-Encoding"},
		},
		Body:         bytes.Repeat([]byte("b"), bodyLen),
		RequestTime:  now.Add(-time.Millisecond),
		ResponseTime: now,
		Lifetime:     300 * time.Second,
	}
}

// ofSize gives e a body that makes its encoding exactly size bytes.
func ofSize(e *entry.Entry, size int) *entry.Entry {
	e.Body = nil
	for n := size - entry.EncodedSize(e); ; n-- {
		e.Body = make([]byte, n)
		if entry.EncodedSize(e) <= size {
			break
		}
	}
	if entry.EncodedSize(e) != size {
		panic(fmt.Sprintf("cannot make an entry of exactly %d bytes", size))
	}
	return e
}

func key(host, target string) string { return "GET http://" + host + target }

func mustGet(t *testing.T, c *Cache, k string) entry.Entry {
	t.Helper()
	e, err := c.Get(k)
	if err != nil {
		t.Fatalf("Get(%.40q) = %v", k, err)
	}
	return e
}

func mustSet(t testing.TB, c *Cache, k string, e *entry.Entry) {
	t.Helper()
	if err := c.Set(k, e); err != nil {
		t.Fatalf("Set(%.40q) = %v", k, err)
	}
}

func TestSetThenGetReturnsTheEntry(t *testing.T) {
	c := newCache(t, smallConfig())
	want := response("a.example", "/x?y=1", 1024, "t1", "t2")
	want.Flags = entry.FlagMustRevalidate
	want.StaleIfError = time.Minute
	mustSet(t, c, "k", want)

	got := mustGet(t, c, "k")
	if got.Host != want.Host || got.Target != want.Target || got.Status != want.Status ||
		got.Flags != want.Flags || got.StaleIfError != want.StaleIfError ||
		!got.ResponseTime.Equal(want.ResponseTime) || !bytes.Equal(got.Body, want.Body) ||
		!slices.Equal(got.Header, want.Header) || !slices.Equal(got.Tags, want.Tags) {
		t.Fatalf("Get = %+v\nwant %+v", got, want)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 0 || s.Entries != 1 {
		t.Fatalf("Stats = %+v", s)
	}
}

func TestMissIsErrNotFound(t *testing.T) {
	c := newCache(t, smallConfig())
	if _, err := c.Get("nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
	if s := c.Stats(); s.Misses != 1 || s.Hits != 0 {
		t.Fatalf("Stats = %+v", s)
	}
}

func TestSetReplacesTheEntry(t *testing.T) {
	c := newCache(t, smallConfig())
	mustSet(t, c, "k", response("h", "/old", 5000))
	mustSet(t, c, "k", response("h", "/new", 10))
	if got := mustGet(t, c, "k"); got.Target != "/new" {
		t.Fatalf("Target = %q", got.Target)
	}
	want := footprint(1, entry.EncodedSize(response("h", "/new", 10)))
	if s := c.Stats(); s.Entries != 1 || s.Bytes != want || s.Evictions != 0 {
		t.Fatalf("Stats = %+v, want 1 entry of %d bytes, no evictions", s, want)
	}
}

func TestDeleteRemovesTheEntry(t *testing.T) {
	c := newCache(t, smallConfig())
	mustSet(t, c, "k", response("h", "/", 100))
	mustSet(t, c, "other", response("h", "/o", 100))
	c.Delete("k")
	c.Delete("never-set")
	if _, err := c.Get("k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete = %v", err)
	}
	mustGet(t, c, "other")
	want := footprint(len("other"), entry.EncodedSize(response("h", "/o", 100)))
	if s := c.Stats(); s.Entries != 1 || s.Bytes != want || s.Evictions != 0 {
		t.Fatalf("Stats = %+v, want 1 entry of %d bytes and no evictions", s, want)
	}
}

func TestDeleteMatching(t *testing.T) {
	c := newCache(t, smallConfig())
	set := func(host, target string, tags ...string) {
		mustSet(t, c, key(host, target), response(host, target, 10, tags...))
	}
	set("a.example", "/api/1", "product")
	set("a.example", "/api/2", "product", "sale")
	set("a.example", "/static/x.css")
	set("b.example", "/api/1", "sale")
	set("b.example", "/home")
	vary := response("a.example", "/api/3", 0)
	vary.Kind, vary.Vary, vary.Nonce = entry.KindVary, []string{"accept"}, 7
	mustSet(t, c, key("a.example", "/api/3"), vary)

	steps := []struct {
		name  string
		match func(e *entry.Entry) bool
		want  int
		gone  []string
	}{
		{"by tag", func(e *entry.Entry) bool { return slices.Contains(e.Tags, "sale") },
			2, []string{key("a.example", "/api/2"), key("b.example", "/api/1")}},
		{"by host and target prefix", func(e *entry.Entry) bool {
			return e.Host == "a.example" && strings.HasPrefix(e.Target, "/api/")
		}, 2, []string{key("a.example", "/api/1"), key("a.example", "/api/3")}},
		{"by origin-form URL on every host", func(e *entry.Entry) bool { return e.Target == "/home" },
			1, []string{key("b.example", "/home")}},
		{"nothing", func(*entry.Entry) bool { return false }, 0, nil},
	}
	for _, s := range steps {
		if n := c.DeleteMatching(s.match); n != s.want {
			t.Fatalf("%s: deleted %d, want %d", s.name, n, s.want)
		}
		for _, k := range s.gone {
			if _, err := c.Get(k); !errors.Is(err, ErrNotFound) {
				t.Fatalf("%s: %q still there", s.name, k)
			}
		}
	}
	mustGet(t, c, key("a.example", "/static/x.css"))
	if s := c.Stats(); s.Entries != 1 {
		t.Fatalf("Entries = %d, want 1", s.Entries)
	}
}

func TestTooLargeIsRefusedWithoutEvictingAnything(t *testing.T) {
	cfg := smallConfig()
	c := newCache(t, cfg)
	if c.MaxEntrySize() != cfg.MaxEntrySize-entryOverhead {
		t.Fatalf("MaxEntrySize = %d, want the shard size less bigcache's overhead", c.MaxEntrySize())
	}
	// Fill to about 70%, entries spread over all shards without any
	// shard overflowing.
	var keys []string
	for i := 0; i < 2600; i++ {
		k := fmt.Sprintf("k%d", i)
		mustSet(t, c, k, response("h", "/"+k, 800))
		keys = append(keys, k)
	}
	before := c.Stats()
	if before.Evictions != 0 {
		t.Fatalf("the fill itself evicted %d entries", before.Evictions)
	}

	huge := ofSize(response("h", "/huge", 0), int(c.MaxEntrySize())+1)
	for _, k := range append(keys[:50:50], "new-key") {
		if err := c.Set(k, huge); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("Set(%q, %d bytes) = %v, want ErrTooLarge", k, entry.EncodedSize(huge), err)
		}
	}
	after := c.Stats()
	if after.Evictions != 0 || after.Entries != before.Entries || after.Bytes != before.Bytes {
		t.Fatalf("refused Sets changed the cache: before %+v, after %+v", before, after)
	}
	for _, k := range keys {
		mustGet(t, c, k)
	}
}

// bigcache grows a shard's queue by doubling and refuses to grow it when
// capacity+entry would reach the maximum, so with a lazily grown queue an
// entry of more than half a shard fails once the queue is half grown, and
// first evicts the whole shard (with bigcache's own growth, a 600 KiB Set
// into a 1 MiB shard holding 70 entries of 4 KB evicts all 70 and fails).
// New allocates queues whole; this checks that an entry of exactly
// MaxEntrySize() fits whatever the shard holds.
func TestEntriesUpToTheLimitAlwaysFit(t *testing.T) {
	t.Run("into one shard after fills of every size", func(t *testing.T) {
		for _, fill := range []int{0, 10, 40, 70, 120, 200, 300} {
			c := newCache(t, Config{MaxSize: 1 << 20, MaxEntrySize: 1 << 20, Shards: 1, LifeWindow: time.Hour})
			for i := range fill {
				mustSet(t, c, fmt.Sprint(i), ofSize(response("h", "/", 0), 4000))
			}
			for _, size := range []int{600 << 10, int(c.MaxEntrySize())} {
				mustSet(t, c, "big", ofSize(response("h", "/big", 0), size))
				if got := mustGet(t, c, "big"); entry.EncodedSize(&got) != size {
					t.Fatalf("fill %d: got back %d bytes, want %d", fill, entry.EncodedSize(&got), size)
				}
			}
			_ = c.Close()
		}
	})
	t.Run("into random shards holding random entries", func(t *testing.T) {
		c := newCache(t, Config{MaxSize: 1 << 20, MaxEntrySize: 256 << 10, Shards: 4, LifeWindow: time.Hour})
		rng := rand.New(rand.NewPCG(1, 2))
		big := ofSize(response("h", "/big", 0), int(c.MaxEntrySize()))
		longKey := strings.Repeat("k", maxRawKey) // the longest raw key
		for round := range 60 {
			for range rng.IntN(300) {
				k := fmt.Sprintf("s%d", rng.Int())
				mustSet(t, c, k, response("h", "/"+k, rng.IntN(4000)))
			}
			k := fmt.Sprintf("%d%s", round, longKey)[:maxRawKey]
			mustSet(t, c, k, big)
			if got := mustGet(t, c, k); len(got.Body) != len(big.Body) {
				t.Fatalf("round %d: body %d bytes", round, len(got.Body))
			}
		}
	})
}

func TestLongKeys(t *testing.T) {
	c := newCache(t, smallConfig())
	long1 := "GET http://h/" + strings.Repeat("a", 300)
	long2 := long1[:len(long1)-1] + "b"                  // same length, differs at the end
	huge := "GET http://h/" + strings.Repeat("z", 70000) // beyond bigcache's uint16 key length
	hashy := "#" + strings.Repeat("0", 64)               // looks like a digest
	for _, k := range []string{long1, long2, huge, hashy, ""} {
		mustSet(t, c, k, response("h", k[:min(len(k), 20)], 10))
	}
	for _, k := range []string{long1, long2, huge, hashy, ""} {
		if got := mustGet(t, c, k); got.Target != k[:min(len(k), 20)] {
			t.Fatalf("Get(%.30q...) returned %q", k, got.Target)
		}
	}
	// Stored keys are bounded, so a huge URL costs its entry, not twice it.
	want := footprint(digestLen, entry.EncodedSize(response("h", huge[:20], 10)))
	before := c.Stats().Bytes
	c.Delete(huge)
	if got := before - c.Stats().Bytes; got != want {
		t.Fatalf("the huge key's entry took %d bytes, want %d", got, want)
	}
	// A raw key equal to the digest of another key is digested itself.
	mustSet(t, c, storedKey(long1), response("h", "/impostor", 1))
	if got := mustGet(t, c, long1); got.Target == "/impostor" {
		t.Fatal("a raw key replaced a long key's entry")
	}
}

// Callers pass keys that are unsafe strings over a buffer they reuse.
func TestKeysAreNotRetained(t *testing.T) {
	c := newCache(t, smallConfig())
	buf := []byte("GET http://h/first")
	k := unsafe.String(&buf[0], len(buf))
	mustSet(t, c, k, response("h", "/first", 10))
	copy(buf, "GET http://h/other")
	mustSet(t, c, k, response("h", "/other", 10))
	copy(buf, "GET http://h/first")
	if got := mustGet(t, c, "GET http://h/first"); got.Target != "/first" {
		t.Fatalf("Target = %q", got.Target)
	}
	if got := mustGet(t, c, "GET http://h/other"); got.Target != "/other" {
		t.Fatalf("Target = %q", got.Target)
	}
}

func TestGetResultIsIndependent(t *testing.T) {
	c := newCache(t, smallConfig())
	mustSet(t, c, "k", response("h", "/1", 100))
	e := mustGet(t, c, "k")
	mustSet(t, c, "k", response("h", "/2", 100))
	c.Reset()
	if e.Target != "/1" || len(e.Body) != 100 {
		t.Fatalf("an earlier Get result changed: %q", e.Target)
	}
}

func TestCorruptValuesAreMissesAndDeleted(t *testing.T) {
	c := newCache(t, smallConfig())
	good := entry.Encode(nil, response("h", "/", 100))
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	newer := bytes.Clone(good)
	newer[3] = 99
	for name, v := range map[string][]byte{
		"garbage":         []byte("not an entry at all"),
		"a flipped bit":   flipped,
		"a truncation":    good[:len(good)-1],
		"a newer version": newer,
		"empty":           {},
	} {
		t.Run(name, func(t *testing.T) {
			if err := c.bc.Set("k", v); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Get("k"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get = %v, want ErrNotFound", err)
			}
			if c.bc.Len() != 0 {
				t.Fatal("the corrupt value was not deleted")
			}
		})
	}
	if s := c.Stats(); s.Hits != 0 || s.Misses != 5 || s.Evictions != 0 {
		t.Fatalf("Stats = %+v, want 5 misses", s)
	}
}

func TestDeleteMatchingRemovesCorruptValues(t *testing.T) {
	c := newCache(t, smallConfig())
	mustSet(t, c, "good", response("h", "/", 1))
	if err := c.bc.Set("bad", []byte("TCE\x01garbage")); err != nil {
		t.Fatal(err)
	}
	if n := c.DeleteMatching(func(*entry.Entry) bool { return false }); n != 0 {
		t.Fatalf("deleted %d", n)
	}
	if c.bc.Len() != 1 {
		t.Fatalf("%d values left, want only the good one", c.bc.Len())
	}
}

func TestBytesAndEvictions(t *testing.T) {
	cfg := Config{MaxSize: 1 << 20, MaxEntrySize: 64 << 10, Shards: 4, LifeWindow: time.Hour}
	c := newCache(t, cfg)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3000 { // about 8 MiB through a 1 MiB cache
		mustSet(t, c, fmt.Sprint(i), response("h", "/", rng.IntN(5000)))
	}
	s := c.Stats()
	if s.Evictions == 0 {
		t.Fatal("no evictions counted")
	}
	if s.Bytes <= 0 || s.Bytes > cfg.MaxSize {
		t.Fatalf("Bytes = %d, want within (0, %d]", s.Bytes, cfg.MaxSize)
	}
	if want := liveFootprint(c); s.Bytes != want {
		t.Fatalf("Bytes = %d, but live entries take %d", s.Bytes, want)
	}
	if int64(3000) != s.Entries+s.Evictions {
		t.Fatalf("%d entries + %d evictions != 3000 sets", s.Entries, s.Evictions)
	}
	if s.NoSpace != s.Evictions || s.Expired != 0 {
		t.Fatalf("%d evictions: %d for space, %d expired; want all for space (nothing is past an hour)", s.Evictions, s.NoSpace, s.Expired)
	}
	if s.Capacity != cfg.MaxSize {
		t.Fatalf("Capacity = %d, want %d", s.Capacity, cfg.MaxSize)
	}

	c.Reset()
	after := c.Stats()
	if after.Entries != 0 || after.Bytes != 0 || after.Evictions != s.Evictions {
		t.Fatalf("after Reset: %+v", after)
	}
}

// liveFootprint adds up the entries bigcache holds, independently of the
// counters.
func liveFootprint(c *Cache) int64 {
	var n int64
	it := c.bc.Iterator()
	for it.SetNext() {
		info, err := it.Value()
		if err == nil {
			n += footprint(len(info.Key()), len(info.Value()))
		}
	}
	return n
}

func TestConcurrentUse(t *testing.T) {
	c := newCache(t, Config{MaxSize: 1 << 20, MaxEntrySize: 32 << 10, Shards: 8, LifeWindow: time.Hour})
	const workers, ops = 6, 3000
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for range ops {
				k := fmt.Sprintf("k%d", rng.IntN(200))
				switch r := rng.IntN(100); {
				case r < 50:
					if e, err := c.Get(k); err == nil && key("h", "/"+k) != key(e.Host, e.Target) {
						t.Errorf("Get(%q) returned %q", k, e.Target)
					}
				case r < 90:
					_ = c.Set(k, response("h", "/"+k, rng.IntN(3000), fmt.Sprint("t", rng.IntN(4))))
				case r < 96:
					c.Delete(k)
				case r < 98:
					tag := fmt.Sprint("t", rng.IntN(4))
					c.DeleteMatching(func(e *entry.Entry) bool { return slices.Contains(e.Tags, tag) })
				case r < 99:
					_ = c.Stats()
				default:
					c.Reset()
				}
			}
		})
	}
	wg.Wait()
	if s, want := c.Stats().Bytes, liveFootprint(c); s != want {
		t.Fatalf("after concurrent use Bytes = %d, but live entries take %d", s, want)
	}
}

func TestCloseStopsTheCleaner(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	c, err := New(context.Background(), smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	mustSet(t, c, "k", response("h", "/", 1))
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	goleak.VerifyNone(t, ignore)
	mustGet(t, c, "k") // still usable
}

func TestEndingTheContextStopsTheCleaner(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := New(ctx, smallConfig())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	goleak.VerifyNone(t, ignore)
	_ = c.Close() // and Close after that is harmless
}

func TestNewRefusesAnInvalidConfig(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	for _, cfg := range []Config{{}, {MaxSize: -1, Shards: -1}, {MaxSize: 1 << 20, MaxEntrySize: 1, Shards: 3, LifeWindow: time.Hour}} {
		if c, err := New(context.Background(), cfg); err == nil || c != nil {
			t.Fatalf("New(%+v) = %v, %v", cfg, c, err)
		}
	}
	goleak.VerifyNone(t, ignore)
}

// bigcache's clock cannot be injected and counts whole seconds, so this
// waits for a one-second LifeWindow to pass.
func TestEntriesPastTheLifeWindowAreMisses(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for bigcache's clock")
	}
	cfg := smallConfig()
	cfg.LifeWindow = time.Second
	c := newCache(t, cfg)
	mustSet(t, c, "k", response("h", "/", 1))
	mustGet(t, c, "k")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := c.Get("k"); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("entry still served 5s after a 1s LifeWindow")
		}
		time.Sleep(50 * time.Millisecond)
	}
	for c.Stats().Evictions == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the cleaner did not count the expired entry as an eviction")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
		t.Fatalf("after cleaning: %+v", s)
	}
}

func TestGetAllocations(t *testing.T) {
	c := newCache(t, smallConfig())
	mustSet(t, c, "GET http://h/k", response("h", "/k", 1024))
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := c.Get("GET http://h/k"); err != nil {
			t.Fatal(err)
		}
	})
	// bigcache v3.1.0's Get copies the stored key to compare it (the copy
	// escapes through its collision log call) and copies the value; Decode
	// allocates the header slice.
	if allocs > 3 {
		t.Fatalf("Get: %v allocs, want <= 3 (bigcache's key and value copies, the header slice)", allocs)
	}
}

// TestEvictionsOfExpiredEntriesAreCountedApart: an entry past LifeWindow
// that bigcache's cleaner drops counts as expired, not as lack of space,
// so that tiercache_l1_evictions_total{reason="space"} alone says L1 is too
// small. Capacity is MaxSize rounded up to a whole MiB.
func TestEvictionsOfExpiredEntriesAreCountedApart(t *testing.T) {
	c := newCache(t, Config{MaxSize: 1<<20 + 1, MaxEntrySize: 64 << 10, Shards: 4, LifeWindow: time.Second})
	mustSet(t, c, "a", response("h", "/a", 100))
	mustSet(t, c, "b", response("h", "/b", 100))
	// The cleaner runs every second; an entry set at second s is dropped
	// at the first tick past s+1. Bounded: give up after 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for c.Stats().Expired < 2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s := c.Stats()
	if s.Expired != 2 || s.NoSpace != 0 || s.Evictions != 2 || s.Entries != 0 {
		t.Fatalf("after LifeWindow: %+v, want 2 expired, none for space, no entries", s)
	}
	if s.Capacity != 2<<20 {
		t.Fatalf("Capacity = %d, want 2 MiB (1 MiB + 1 byte rounded up)", s.Capacity)
	}
}
