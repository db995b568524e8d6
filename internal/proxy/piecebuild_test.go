package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/store"
)

// A client that sends one tiny no-cache range after another, while the
// complete response of pieces covering a large representation is being
// built, must not start a full copy per request: each copy reserves the
// whole representation in the body store (evicting other tenants'
// bodies) and all but the last are thrown away.
func TestOneBuildOfACompleteResponseFromPiecesRunsPerKey(t *testing.T) {
	want, o := largeRep(t, "/amp")
	f := newFileFixture(t, "", o, bodystore.Options{})
	gate := make(chan struct{})
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var builds atomic.Int32
	f.px.beforeBuild = func(string) {
		builds.Add(1)
		<-gate
	}

	f.get("/amp", "Range", rangeOf(0, 99999))
	expectBody(t, f.get("/amp"), 200, "MISS; partial", want)
	waitFor(t, func() bool { return builds.Load() == 1 }, "the first build to start")

	const parts = 8
	for i := range parts {
		a := 1000 + i*10
		expectBody(t, f.get("/amp", "Range", rangeOf(a, a+9), "Cache-Control", "no-cache"), 206, "MISS", want[a:a+10])
	}
	release()
	f.px.bg.Wait()
	if n := builds.Load(); n > 2 {
		t.Fatalf("%d builds of the complete response for one key, want at most 2 (the first and one for the parts stored meanwhile)", n)
	}
	e := f.waitStored(t, "/amp")
	if e.Kind != entry.KindResponse || e.File == nil || e.File.Size != fileSize {
		t.Fatalf("stored %+v, want the complete response in one file", e)
	}
	expectBody(t, f.get("/amp"), 200, "HIT; layer=l1", want)
	if b, tmp := f.files(); len(b) != 1 || len(tmp) != 0 {
		t.Fatalf("%d body files and %d temp files, want only the complete one", len(b), len(tmp))
	}
}

// A soft purge that lands after the part completing the pieces was
// stored, but before the build of the complete response began, must not
// be undone by that build storing the complete response fresh.
func TestASoftPurgeBeforeTheBuildFromPiecesStartsIsNotUndone(t *testing.T) {
	want, o := largeRep(t, "/sp")
	var purger *invalidate.Purger
	f := newFileFixture(t, "", o, bodystore.Options{}, func(po *Options) {
		purger = invalidate.NewPurger(store.NewLocal(po.Store.(testStore).c, po.Bodies), po.Config)
		po.Invalidator = purger
	})
	var purged atomic.Bool
	f.px.beforeBuild = func(string) {
		if purged.CompareAndSwap(false, true) {
			if _, err := purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/sp"}, Soft: true}); err != nil {
				t.Errorf("soft purge: %v", err)
			}
		}
	}
	f.get("/sp", "Range", rangeOf(0, 99999))
	expectBody(t, f.get("/sp"), 200, "MISS; partial", want)
	f.px.bg.Wait()
	if !purged.Load() {
		t.Fatal("no build started")
	}
	// The purge was made at the wall clock's time, after the fixture's.
	o.clock.Advance(time.Second)
	before := f.origin.count()
	r := f.get("/sp")
	if x := r.header.Get("X-Cache"); x == "HIT; layer=l1" {
		t.Fatalf("after a soft purge the response is a fresh hit (X-Cache %q): the build undid the purge", x)
	}
	if f.origin.count() == before {
		t.Fatal("after a soft purge the origin was not asked")
	}
}
