package l2

import (
	"fmt"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// testRewrite spreads entries over every slot (in cluster mode, every
// master) and rewrites them by key, by tag and by scan.
func testRewrite(t *testing.T, e *env) {
	c := e.client(t, prefix(t, "a"))
	ctx := ctxT(t)
	const n = 30
	for i := range n {
		tags := []string{"all"}
		if i%3 == 0 {
			tags = append(tags, "third")
		}
		mustSet(t, c, keyFor(fmt.Sprintf("/r/%d", i)), testEntry(fmt.Sprintf("/r/%d", i), tags...), time.Hour)
	}
	// A Rewrite that sets the lifetime to the step's number: each step
	// leaves its mark on exactly what it rewrote.
	mark := func(step time.Duration, which func(target string) bool) Rewrite {
		return func(key string, e *entry.Entry) Rewritten {
			if !which(e.Target) {
				return Rewritten{}
			}
			e.Lifetime = step
			return Rewritten{Counted: true, Changed: true, TTL: 10 * time.Minute}
		}
	}
	lifetimes := func() map[string]time.Duration {
		out := map[string]time.Duration{}
		for i := range n {
			got, err := c.Get(ctx, keyFor(fmt.Sprintf("/r/%d", i)))
			if err != nil {
				t.Fatalf("/r/%d: %v", i, err)
			}
			out[got.Target] = got.Lifetime
		}
		return out
	}
	everything := func(string) bool { return true }

	var keys []string
	for i := 0; i < n; i += 2 {
		keys = append(keys, keyFor(fmt.Sprintf("/r/%d", i)))
	}
	if got, err := c.RewriteKeys(ctx, append(keys, keyFor("/missing")), mark(1, everything)); err != nil || got != n/2 {
		t.Fatalf("RewriteKeys = %d, %v; want %d", got, err, n/2)
	}
	if got, err := c.RewriteTags(ctx, []string{"third"}, mark(2, everything)); err != nil || got != n/3 {
		t.Fatalf("RewriteTags = %d, %v; want %d", got, err, n/3)
	}
	lt := lifetimes()
	for i := range n {
		want := time.Minute // testEntry's
		switch {
		case i%3 == 0:
			want = 2
		case i%2 == 0:
			want = 1
		}
		if got := lt[fmt.Sprintf("/r/%d", i)]; got != want {
			t.Errorf("/r/%d: lifetime %d after the key and tag rewrites, want %d", i, got, want)
		}
	}
	if got, err := c.RewriteMatching(ctx, mark(3, func(tgt string) bool { return tgt == "/r/7" || tgt == "/r/8" })); err != nil || got != 2 {
		t.Fatalf("RewriteMatching = %d, %v; want 2", got, err)
	}
	if lt := lifetimes(); lt["/r/7"] != 3 || lt["/r/8"] != 3 || lt["/r/9"] != 2 {
		t.Fatalf("after the scan: /r/7 %d, /r/8 %d, /r/9 %d; want 3, 3, 2", lt["/r/7"], lt["/r/8"], lt["/r/9"])
	}
	d, err := e.raw.PTTL(ctx, c.k.entryKey(keyFor("/r/7"))).Result()
	if err != nil || d > 10*time.Minute || d < 9*time.Minute {
		t.Fatalf("PTTL of a rewritten entry %s, %v; want the rewrite's 10m", d, err)
	}
	// Counted but unchanged: nothing is written.
	before, _ := e.raw.Get(ctx, c.k.entryKey(keyFor("/r/1"))).Bytes()
	got, err := c.RewriteKeys(ctx, []string{keyFor("/r/1")}, func(string, *entry.Entry) Rewritten { return Rewritten{Counted: true} })
	after, _ := e.raw.Get(ctx, c.k.entryKey(keyFor("/r/1"))).Bytes()
	if err != nil || got != 1 || string(before) != string(after) {
		t.Fatalf("an unchanged entry: RewriteKeys = %d, %v, value changed %v", got, err, string(before) != string(after))
	}
}
