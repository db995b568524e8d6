package store

import (
	"slices"
	"testing"

	"github.com/tiercache/tiercache/internal/store/l2"
)

func TestPendingWrites(t *testing.T) {
	items := func(keys ...string) []l2.Item {
		var out []l2.Item
		for _, k := range keys {
			out = append(out, l2.Item{Key: k})
		}
		return out
	}
	tests := map[string]func(t *testing.T, p *pendingWrites){
		"a queued write goes out": func(t *testing.T, p *pendingWrites) {
			seq := p.add("k")
			if !p.take("k", seq) {
				t.Fatal("take refused the only write")
			}
			if again := p.landed(items("k")); len(again) != 0 {
				t.Fatalf("landed asks to delete %v again", again)
			}
		},
		"an older write of a key gives way to a newer one": func(t *testing.T, p *pendingWrites) {
			old, newer := p.add("k"), p.add("k")
			if p.take("k", old) {
				t.Fatal("the older write was taken")
			}
			if !p.take("k", newer) {
				t.Fatal("the newer write was refused")
			}
		},
		"a delete cancels a queued write": func(t *testing.T, p *pendingWrites) {
			seq := p.add("k")
			p.deleted("k")
			if p.take("k", seq) {
				t.Fatal("a write queued before the delete was taken")
			}
		},
		"a write after a delete goes out": func(t *testing.T, p *pendingWrites) {
			p.add("k")
			p.deleted("k")
			if !p.take("k", p.add("k")) {
				t.Fatal("a write queued after the delete was refused")
			}
		},
		"a delete during a write's flight deletes it again after": func(t *testing.T, p *pendingWrites) {
			seq := p.add("k")
			p.take("k", seq)
			p.deleted("k")
			if again := p.landed(items("k")); !slices.Equal(again, []string{"k"}) {
				t.Fatalf("landed = %v, want [k] to delete again", again)
			}
			if len(p.flying) != 0 || len(p.latest) != 0 {
				t.Fatalf("state left behind: %v %v", p.flying, p.latest)
			}
		},
		"cancel drops a queued write but leaves flights alone": func(t *testing.T, p *pendingWrites) {
			a := p.add("a")
			p.take("a", a)
			b := p.add("b")
			p.cancel("a")
			p.cancel("b")
			if p.take("b", b) {
				t.Fatal("a cancelled write was taken")
			}
			if again := p.landed(items("a")); len(again) != 0 {
				t.Fatalf("cancel made landed delete %v again", again)
			}
		},
		"a write that could not be queued is forgotten": func(t *testing.T, p *pendingWrites) {
			p.remove("k", p.add("k"))
			if len(p.latest) != 0 {
				t.Fatalf("latest = %v, want empty", p.latest)
			}
		},
	}
	for name, fn := range tests {
		t.Run(name, func(t *testing.T) { fn(t, newPendingWrites()) })
	}
}
