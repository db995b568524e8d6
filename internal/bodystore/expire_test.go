package bodystore

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

func TestASoftPurgeMarksTheEntriesABodyStoreRestartBringsBack(t *testing.T) {
	s, _ := testStore(t, Options{})
	t0 := time.Unix(1700000000, 0).UTC() // putAs: stored at t0, fresh for an hour
	bodies := map[string]stored{
		"sale":  putAs(t, s, "GET http://h/a", "h", "/a", "sale"),
		"other": putAs(t, s, "GET http://h/b", "h", "/b"),
		"gone":  putAs(t, s, "GET http://h/c", "h", "/c", "sale"),
	}
	mtimes := map[string]time.Time{}
	for name, b := range bodies {
		p := filepath.Join(s.dir, fileName(b.ref.ID, bodySuffix))
		mt := time.Now().Add(-time.Duration(len(name)) * time.Minute).Truncate(time.Second)
		must(t, os.Chtimes(p, mt, mt))
		mtimes[name] = mt
	}
	// Removed behind the store's back after the purge took its snapshot
	// would be the same: a file that is gone is skipped, not counted.
	must(t, os.Remove(filepath.Join(s.dir, fileName(bodies["gone"].ref.ID, bodySuffix))))

	at := t0.Add(10 * time.Minute)
	n := s.ExpireMatching(at, func(e *entry.Entry) bool { return slices.Contains(e.Tags, "sale") })
	if n != 1 {
		t.Fatalf("ExpireMatching concerned %d bodies, want 1", n)
	}
	if again := s.ExpireMatching(at, func(e *entry.Entry) bool { return slices.Contains(e.Tags, "sale") }); again != 1 {
		t.Fatalf("a second soft purge concerned %d bodies, want the same 1 (already stale, still concerned)", again)
	}
	for name, b := range bodies {
		if name == "gone" {
			continue
		}
		fi, err := os.Stat(filepath.Join(s.dir, fileName(b.ref.ID, bodySuffix)))
		must(t, err)
		if !fi.ModTime().Equal(mtimes[name]) {
			t.Errorf("%s: modification time %s after the purge, was %s (the restart scan orders by it)", name, fi.ModTime(), mtimes[name])
		}
	}

	_, rec, m := reopen(t, s, 64<<20)
	if got := errorsCounted(t, m, metrics.BodyOpRecover); got != 0 {
		t.Fatalf("the restart found %v damaged files after the rewrite", got)
	}
	if len(rec) != 2 {
		t.Fatalf("recovered %d bodies, want 2", len(rec))
	}
	for _, r := range rec {
		var e entry.Entry
		must(t, entry.Decode(r.Entry, &e))
		want := t0.Add(time.Hour)
		if r.Key == bodies["sale"].key {
			want = at
		}
		if !e.FreshUntil().Equal(want) || e.File == nil || e.Host != "h" {
			t.Errorf("recovered %s: fresh until t0+%s, file %+v; want fresh until t0+%s", r.Key, e.FreshUntil().Sub(t0), e.File, want.Sub(t0))
		}
	}
}
