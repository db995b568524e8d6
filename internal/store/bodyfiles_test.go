package store

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// fileEntry is a response whose body is a committed file of bodies,
// stored under key.
func fileEntry(t *testing.T, bodies *bodystore.Store, key, host, target string, tags ...string) *entry.Entry {
	t.Helper()
	return committedFile(t, bodies, key, &entry.Entry{Kind: entry.KindResponse, Host: host, Target: target, Tags: tags,
		Status: 200, ResponseTime: time.Now(), Lifetime: time.Hour})
}

// committedFile commits a body for e, stored under key, into bodies and
// returns e referring to it.
func committedFile(t *testing.T, bodies *bodystore.Store, key string, e *entry.Entry) *entry.Entry {
	t.Helper()
	body := []byte("the body of " + e.Host + e.Target)
	w, err := bodies.Create(key, int64(len(body)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	ref, err := w.Commit(func(ref entry.BodyFile) []byte {
		m := *e
		m.File = &ref
		return entry.Encode(nil, &m)
	})
	if err != nil {
		t.Fatal(err)
	}
	e.File = &ref
	return e
}

func openBodies(t *testing.T) (*bodystore.Store, string) {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bodies, _, err := bodystore.Open(context.Background(), bodystore.Options{Dir: dir, MaxBytes: 64 << 20, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bodies.Close() })
	return bodies, dir
}

func TestAnEntryWithABodyFileStaysInL1(t *testing.T) {
	srv := testredis.Start(t)
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	bodies, _ := openBodies(t)
	ctx := testCtx(t)
	inline := response(time.Now(), "/inline", time.Minute)
	mustSet(t, f.s, keyFor("/inline"), inline)
	queued := fileEntry(t, bodies, keyFor("/queued"), "shop.example.com", "/queued")
	mustSet(t, f.s, keyFor("/queued"), queued)
	shared := fileEntry(t, bodies, keyFor("/shared"), "shop.example.com", "/shared")
	if err := f.s.SetShared(ctx, keyFor("/shared"), shared); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/queued", "/shared"} {
		var e entry.Entry
		if layer, err := f.s.Get(ctx, keyFor(k), &e); err != nil || layer != LayerL1 || e.File == nil {
			t.Fatalf("%s: layer %q, err %v, file %v", k, layer, err, e.File)
		}
	}
	// Close flushes the queue: only the inline entry reaches Redis.
	if n := entriesAfterFlush(t, f, srv.Addr()); n != 1 {
		t.Fatalf("Redis holds %d entries, want only the inline one", n)
	}
	if !inL2(t, rawClient(t, srv.Addr()), testPrefix(t), keyFor("/inline")) {
		t.Fatal("the inline entry is not in Redis")
	}
}

// TestPurgesAndInvalidationsRemoveTheBodyFilesOfWhatTheyRemove: every
// kind of purge and invalidation removes the body files of what it
// names, and only those, whether or not L1 still holds their entries. A
// file whose entry left L1 (bigcache evicts when full; a flood of small
// URLs does it) and that a purge missed would be recovered at the next
// start and its purged response served again.
func TestPurgesAndInvalidationsRemoveTheBodyFilesOfWhatTheyRemove(t *testing.T) {
	targets := []string{"/a", "/api/1", "/api/2", "/tagged", "/other", "/v"}
	cases := []struct {
		name string
		// purge returns the purge's answer, or nil when it is not a
		// purge.
		purge func(p *invalidate.Purger) *invalidate.Result
		gone  []string // targets whose files go; the others' stay
	}{
		{"a purge by URL", func(p *invalidate.Purger) *invalidate.Result {
			return answer(p.Purge(context.Background(), invalidate.Request{URLs: []string{"/a"}}))
		}, []string{"/a"}},
		{"a purge by the URL of a varying resource", func(p *invalidate.Purger) *invalidate.Result {
			return answer(p.Purge(context.Background(), invalidate.Request{URLs: []string{"http://shop.example/v"}}))
		}, []string{"/v"}},
		{"a purge by prefix", func(p *invalidate.Purger) *invalidate.Result {
			return answer(p.Purge(context.Background(), invalidate.Request{Prefix: "/api/"}))
		}, []string{"/api/1", "/api/2"}},
		{"a purge by tag", func(p *invalidate.Purger) *invalidate.Result {
			return answer(p.Purge(context.Background(), invalidate.Request{Tags: []string{"blue"}}))
		}, []string{"/tagged"}},
		{"a purge of everything", func(p *invalidate.Purger) *invalidate.Result {
			return answer(p.Purge(context.Background(), invalidate.Request{All: true}))
		}, targets},
		{"an unsafe method's invalidation", func(p *invalidate.Purger) *invalidate.Result {
			p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "shop.example", Path: "/other"}})
			return nil
		}, []string{"/other"}},
		{"an unsafe method's invalidation of a varying resource", func(p *invalidate.Purger) *invalidate.Result {
			p.Invalidate(context.Background(), []*url.URL{{Scheme: "http", Host: "shop.example", Path: "/v"}})
			return nil
		}, []string{"/v"}},
		{"another sidecar's purge by tag", func(p *invalidate.Purger) *invalidate.Result {
			p.HandleMessage([]byte(`{"from":"other","tags":["blue"]}`))
			return nil
		}, []string{"/tagged"}},
		{"a resubscription that may have missed purges", func(p *invalidate.Purger) *invalidate.Result {
			p.Subscribed(context.Background(), time.Now()) // the first: keeps L1
			p.Subscribed(context.Background(), time.Now()) // unsequenced without L2: clears it
			return nil
		}, targets},
	}
	for _, c := range cases {
		for _, evicted := range []bool{false, true} {
			name := c.name
			if evicted {
				name += " after L1 evicted the entries"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t, storeOpts{})
				bodies, dir := openBodies(t)
				compiled, err := tierconfig.Compile(tierconfig.Config{})
				if err != nil {
					t.Fatal(err)
				}
				p := invalidate.NewPurger(NewLocal(f.l1, bodies), tierconfig.NewHolder(compiled))
				files := map[string]string{}
				var keys []string
				for _, target := range targets {
					key := string(cachekey.AppendPrimary(nil, "http", "shop.example", target))
					if target == "/v" {
						// A response with Vary: Accept-Encoding, under a
						// variant key behind a marker.
						marker := &entry.Entry{Kind: entry.KindVary, Host: "shop.example", Target: target,
							Vary: []string{"accept-encoding"}, Nonce: 7, ResponseTime: time.Now(), Lifetime: time.Hour}
						mustSet(t, f.s, key, marker)
						keys = append(keys, key)
						key = string(cachekey.AppendVariant([]byte(key), 7)) + "gzip"
					}
					var tags []string
					if target == "/tagged" {
						tags = []string{"blue"}
					}
					e := fileEntry(t, bodies, key, "shop.example", target, tags...)
					mustSet(t, f.s, key, e)
					keys = append(keys, key)
					files[target] = filepath.Join(dir, fmt.Sprintf("%x.body", e.File.ID))
				}
				if evicted {
					for _, k := range keys {
						f.l1.Delete(k)
					}
				}
				// A purge counts each response it removes once, whether
				// L1 still held it or only its file was left, and says
				// what went from each layer.
				if res := c.purge(p); res != nil {
					inL1 := len(c.gone)
					if evicted {
						inL1 = 0
					}
					if res.Purged != len(c.gone) || res.L1 != inL1 || res.Bodies != len(c.gone) {
						t.Errorf("the purge answered %+v, want %d purged: %d from L1, %d body files", *res, len(c.gone), inL1, len(c.gone))
					}
				}
				for _, target := range targets {
					_, err := os.Stat(files[target])
					if gone := os.IsNotExist(err); gone != slices.Contains(c.gone, target) {
						t.Errorf("%s: file gone %v (stat: %v)", target, gone, err)
					}
				}
			})
		}
	}
}

// answer is a purge's answer; a failed purge answers -1 responses.
func answer(res invalidate.Result, err error) *invalidate.Result {
	if err != nil {
		return &invalidate.Result{Purged: -1}
	}
	return &res
}
