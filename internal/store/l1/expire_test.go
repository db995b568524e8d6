package l1

import (
	"slices"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

func TestExpireMatchingEndsFreshnessAndKeepsEverythingElse(t *testing.T) {
	c := newCache(t, smallConfig())
	base := response("a.example", "/x", 0) // stored at t0, fresh for 300s
	t0 := base.ResponseTime
	mustSet(t, c, key("a.example", "/a"), response("a.example", "/a", 100, "sale"))
	mustSet(t, c, key("a.example", "/b"), response("a.example", "/b", 100))
	mustSet(t, c, key("a.example", "/c"), response("a.example", "/c", 100, "sale"))
	later := response("a.example", "/d", 100, "sale")
	later.RequestTime, later.ResponseTime = t0.Add(2*time.Minute), t0.Add(2*time.Minute)
	mustSet(t, c, key("a.example", "/d"), later)
	vary := response("a.example", "/e", 0, "sale")
	vary.Kind, vary.Vary, vary.Nonce = entry.KindVary, []string{"accept"}, 7
	mustSet(t, c, key("a.example", "/e"), vary)
	bytesBefore := c.Stats().Bytes
	removals := c.Removals()

	at := t0.Add(time.Minute)
	n := c.ExpireMatching(at, func(e *entry.Entry) bool { return slices.Contains(e.Tags, "sale") })
	if n != 2 {
		t.Fatalf("ExpireMatching concerned %d responses, want 2 (/a and /c; /d was requested after the purge, /e is a marker)", n)
	}
	for target, wantUntil := range map[string]time.Time{
		"/a": at, "/c": at, // marked
		"/b": t0.Add(300 * time.Second),               // not selected
		"/d": t0.Add(2*time.Minute + 300*time.Second), // fetched after the purge
	} {
		got := mustGet(t, c, key("a.example", target))
		if !got.FreshUntil().Equal(wantUntil) {
			t.Errorf("%s fresh until t0+%s, want t0+%s", target, got.FreshUntil().Sub(t0), wantUntil.Sub(t0))
		}
		if got.Get("Etag") != `"abc"` || len(got.Body) != 100 || !got.ResponseTime.Equal(base.ResponseTime) && target != "/d" {
			t.Errorf("%s lost its validators, body or stored times: %+v", target, got)
		}
	}
	if m := mustGet(t, c, key("a.example", "/e")); m.Kind != entry.KindVary || m.Nonce != 7 {
		t.Errorf("the Vary marker changed: %+v", m)
	}
	if c.Removals() == removals {
		t.Error("ExpireMatching did not count as a removal: a copy read from L2 before it could be promoted over it")
	}
	if s := c.Stats(); s.Bytes != bytesBefore || s.Bytes != liveFootprint(c) || s.Entries != 5 {
		t.Errorf("after the rewrite: %d entries, %d bytes (live %d), want 5 entries and %d bytes", s.Entries, s.Bytes, liveFootprint(c), bytesBefore)
	}
}

func TestExpireMatchingLeavesAnEntryReplacedDuringTheScan(t *testing.T) {
	c := newCache(t, smallConfig())
	k := key("a.example", "/a")
	mustSet(t, c, k, response("a.example", "/a", 10))
	t0 := response("a.example", "/a", 0).ResponseTime
	newer := response("a.example", "/a", 20)
	newer.RequestTime, newer.ResponseTime = t0.Add(time.Minute), t0.Add(time.Minute)

	// match runs between the scan's read and its rewrite: a fill stored
	// there must not be overwritten with the old entry, marked.
	n := c.ExpireMatching(t0.Add(30*time.Second), func(e *entry.Entry) bool {
		mustSet(t, c, k, newer)
		return true
	})
	if n != 0 {
		t.Fatalf("ExpireMatching counted %d, want 0: the entry it read was replaced", n)
	}
	got := mustGet(t, c, k)
	if len(got.Body) != 20 || !got.FreshUntil().Equal(newer.FreshUntil()) {
		t.Fatalf("the newer entry was replaced by the old one or marked: body %d bytes, fresh until t0+%s", len(got.Body), got.FreshUntil().Sub(t0))
	}
}
