package store

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

func all(string, *entry.Entry) bool { return true }

func TestASoftPurgeRewritesL2EntriesForWhatIsLeftOfTheirUse(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	rc := rawClient(t, srv.Addr())
	ctx := testCtx(t)
	now := clk.Now()

	windows := response(now.Add(-time.Minute), "/windows", 10*time.Minute)
	windows.StaleWhileRevalidate, windows.StaleIfError = 30*time.Second, 2*time.Minute
	validator := response(now.Add(-time.Minute), "/validator", 10*time.Minute)
	validator.Header = append(validator.Header, entry.Field{Name: "Etag", Value: `"v1"`})
	bare := response(now.Add(-time.Minute), "/bare", 10*time.Minute)
	other := response(now.Add(-time.Minute), "/other", 10*time.Minute)
	for _, e := range []*entry.Entry{windows, validator, bare, other} {
		if err := f.l2.Set(ctx, keyFor(e.Target), e, time.Hour); err != nil {
			t.Fatal(err)
		}
	}

	at := now
	n, err := f.s.ExpireL2Keys(ctx, at, []string{keyFor("/windows"), keyFor("/validator"), keyFor("/bare"), keyFor("/missing")}, all)
	if err != nil || n != 3 {
		t.Fatalf("ExpireL2Keys = %d, %v; want 3 responses concerned", n, err)
	}
	for target, ttl := range map[string]time.Duration{
		"/windows":   2 * time.Minute,          // the longer stale window
		"/validator": DefaultRevalidationGrace, // revalidation grace
		"/other":     time.Hour,                // not named
		"/bare":      0,                        // nothing left of its use: deleted
	} {
		got, err := rc.PTTL(ctx, entryName(testPrefix(t), keyFor(target))).Result()
		if err != nil {
			t.Fatal(err)
		}
		if ttl == 0 {
			if got != -2*time.Nanosecond && got >= 0 {
				t.Errorf("%s: still in L2 (PTTL %s), want it deleted", target, got)
			}
			continue
		}
		if got <= ttl-5*time.Second || got > ttl {
			t.Errorf("%s: PTTL %s, want about %s", target, got, ttl)
		}
	}
	for target, until := range map[string]time.Time{
		"/windows": at, "/validator": at, "/other": other.FreshUntil(),
	} {
		e, err := f.l2.Get(ctx, keyFor(target))
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		if !e.FreshUntil().Equal(until) || !bytes.Equal(e.Body, []byte("body of "+target)) {
			t.Errorf("%s: fresh until %s (want %s), body %q", target, e.FreshUntil(), until, e.Body)
		}
	}
	if e, _ := f.l2.Get(ctx, keyFor("/validator")); e.Get("Etag") != `"v1"` {
		t.Error("the soft purge dropped the validator a 304 would renew the entry with")
	}
}

func TestASoftPurgeInL2ByTagAndByScan(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	ctx := testCtx(t)
	now := clk.Now()
	put := func(target string, tags ...string) {
		e := response(now.Add(-time.Second), target, time.Hour)
		e.Tags, e.StaleWhileRevalidate = tags, time.Minute
		if err := f.l2.Set(ctx, keyFor(target), e, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	put("/a", "red")
	put("/b", "red", "blue")
	put("/c", "blue")
	put("/api/d")
	put("/api/e")
	marker := response(now, "/api/v", time.Hour)
	marker.Kind, marker.Vary, marker.Nonce = entry.KindVary, []string{"accept"}, 9
	if err := f.l2.Set(ctx, keyFor("/api/v"), marker, time.Hour); err != nil {
		t.Fatal(err)
	}
	fresh := func(target string) bool {
		e, err := f.l2.Get(ctx, keyFor(target))
		if err != nil {
			t.Fatalf("%s: %v", target, err)
		}
		return e.FreshUntil().After(now)
	}

	if n, err := f.s.ExpireL2Tags(ctx, now, []string{"red"}, all); err != nil || n != 2 {
		t.Fatalf("ExpireL2Tags = %d, %v; want 2", n, err)
	}
	if fresh("/a") || fresh("/b") || !fresh("/c") {
		t.Fatalf("after the tag red: /a fresh %v, /b fresh %v, /c fresh %v", fresh("/a"), fresh("/b"), fresh("/c"))
	}
	// The tag sets keep their members: a hard purge of the tag still
	// finds the entries.
	if n, err := f.l2.PurgeTags(ctx, []string{"red"}); err != nil || n != 2 {
		t.Fatalf("PurgeTags after the soft purge = %d, %v; want the 2 entries still tagged", n, err)
	}

	var seen []string
	n, err := f.s.ExpireL2Matching(ctx, now, func(key string, e *entry.Entry) bool {
		seen = append(seen, e.Target)
		return len(e.Target) > 4 && e.Target[:5] == "/api/"
	})
	if err != nil || n != 2 {
		t.Fatalf("ExpireL2Matching = %d, %v; want 2 (the marker is not a response)", n, err)
	}
	if fresh("/api/d") || fresh("/api/e") || !fresh("/c") {
		t.Fatal("the scan did not mark exactly the responses under /api/")
	}
	if m, err := f.l2.Get(ctx, keyFor("/api/v")); err != nil || m.Kind != entry.KindVary || m.Nonce != 9 {
		t.Fatalf("the Vary marker changed or went: %+v, %v", m, err)
	}
	slices.Sort(seen)
	if !slices.Contains(seen, "/api/v") {
		t.Fatalf("match saw %q, want every entry, the marker included", seen)
	}
}

func TestASoftPurgeInL2LeavesAnEntryWrittenAfterItsRead(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	ctx := testCtx(t)
	now := clk.Now()
	key := keyFor("/a")
	if err := f.l2.Set(ctx, key, response(now.Add(-time.Minute), "/a", time.Hour), time.Hour); err != nil {
		t.Fatal(err)
	}
	newer := response(now.Add(time.Second), "/a", time.Hour)
	newer.Body = []byte("newer")
	// match runs between the read and the write-back: a fill stored there
	// must not be replaced by the older entry, marked.
	n, err := f.s.ExpireL2Keys(ctx, now, []string{key}, func(string, *entry.Entry) bool {
		if err := f.l2.Set(context.Background(), key, newer, time.Hour); err != nil {
			t.Error(err)
		}
		return true
	})
	if err != nil || n != 0 {
		t.Fatalf("ExpireL2Keys = %d, %v; want 0: the entry it read was replaced", n, err)
	}
	got, err := f.l2.Get(ctx, key)
	if err != nil || string(got.Body) != "newer" || !got.FreshUntil().Equal(newer.FreshUntil()) {
		t.Fatalf("L2 holds %q fresh until %s (%v); want the newer entry untouched", got.Body, got.FreshUntil(), err)
	}
}

func TestASoftPurgeThatDeletesAFileBackedEntryTakesItsChunks(t *testing.T) {
	srv := testredis.Start(t)
	clk := newClock()
	f := newFixture(t, storeOpts{addr: srv.Addr(), clock: clk})
	rc := rawClient(t, srv.Addr())
	ctx := testCtx(t)
	now := clk.Now()
	body := testBody(3*l2.ChunkSize/2, 1)
	e := fileResponse(now.Add(-time.Minute), "/big", time.Hour, body, 1)
	if _, err := f.l2.SetBody(ctx, e.File.ID, bytes.NewReader(body), int64(len(body)), time.Hour); err != nil {
		t.Fatal(err)
	}
	e.File.Chunks = l2.ChunksFor(int64(len(body)))
	if err := f.l2.Set(ctx, keyFor("/big"), e, time.Hour); err != nil {
		t.Fatal(err)
	}
	chunk := func(i int) string { return testPrefix(t) + "b:" + hexID(e.File.ID) + ":" + string(rune('0'+i)) }
	if n, _ := rc.Exists(ctx, chunk(0), chunk(1)).Result(); n != 2 {
		t.Fatalf("%d of the 2 chunks in L2 before the purge", n)
	}
	// No stale window and no validator: nothing is left of its use.
	if n, err := f.s.ExpireL2Keys(ctx, now, []string{keyFor("/big")}, all); err != nil || n != 1 {
		t.Fatalf("ExpireL2Keys = %d, %v; want 1", n, err)
	}
	if n, _ := rc.Exists(ctx, entryName(testPrefix(t), keyFor("/big")), chunk(0), chunk(1)).Result(); n != 0 {
		t.Fatalf("%d of the entry and its chunks left in L2, want none", n)
	}
}

// A soft purge keeps the body files of what it names and marks their
// entries: in L1 and in the files' trailers, which a restart brings back,
// whether or not L1 still holds the entries.
func TestASoftPurgeKeepsBodyFilesAndMarksTheirEntries(t *testing.T) {
	for _, evicted := range []bool{false, true} {
		name := "while L1 holds the entries"
		if evicted {
			name = "after L1 evicted the entries"
		}
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, storeOpts{})
			bodies, dir := openBodies(t)
			compiled, err := tierconfig.Compile(tierconfig.Config{})
			if err != nil {
				t.Fatal(err)
			}
			p := invalidate.NewPurger(NewLocal(f.l1, bodies), tierconfig.NewHolder(compiled))
			keys := map[string]string{}
			for _, target := range []string{"/api/1", "/api/2", "/other"} {
				key := string(cachekey.AppendPrimary(nil, "http", "shop.example", target))
				mustSet(t, f.s, key, fileEntry(t, bodies, key, "shop.example", target))
				keys[target] = key
			}
			if evicted {
				for _, k := range keys {
					f.l1.Delete(k)
				}
			}
			before := time.Now()
			res, err := p.Purge(context.Background(), invalidate.Request{Prefix: "/api/", Soft: true})
			inL1 := 2
			if evicted {
				inL1 = 0
			}
			if err != nil || !res.Soft || res.Purged != 2 || res.L1 != inL1 || res.Bodies != 2 {
				t.Fatalf("answer %+v, %v; want soft, 2 marked: %d in L1, 2 body files", res, err, inL1)
			}
			if !evicted {
				for target, key := range keys {
					e, err := f.l1.Get(key)
					if err != nil {
						t.Fatalf("%s: %v", target, err)
					}
					if stale := !e.FreshUntil().After(time.Now()); stale != (target != "/other") {
						t.Errorf("%s in L1: stale %v", target, stale)
					}
				}
			}
			// Restart: the files come back with their entries as marked.
			if err := bodies.Close(); err != nil {
				t.Fatal(err)
			}
			m, err := metrics.New(prometheus.NewRegistry(), nil)
			if err != nil {
				t.Fatal(err)
			}
			again, rec, err := bodystore.Open(context.Background(), bodystore.Options{Dir: dir, MaxBytes: 64 << 20, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if len(rec) != 3 {
				t.Fatalf("the restart recovered %d bodies, want all 3: a soft purge keeps them", len(rec))
			}
			for _, r := range rec {
				var e entry.Entry
				if err := entry.Decode(r.Entry, &e); err != nil {
					t.Fatal(err)
				}
				until := e.FreshUntil()
				stale := !until.After(time.Now())
				if want := e.Target != "/other"; stale != want || stale && until.Before(before) {
					t.Errorf("%s recovered fresh until %s (purge at %s): stale %v, want %v", e.Target, until, before, stale, want)
				}
			}
		})
	}
}
