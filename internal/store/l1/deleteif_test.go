package l1

import (
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/entry"
)

func TestDeleteIfDecisions(t *testing.T) {
	long := key("shop", "/"+strings.Repeat("x", 300)) // stored under its digest
	byTarget := func(target string) func(*entry.Entry) bool {
		return func(e *entry.Entry) bool { return e.Target == target }
	}
	tests := map[string]struct {
		stored  string // key stored under ("" none)
		asked   string
		match   func(*entry.Entry) bool
		deleted bool
	}{
		"an entry the match accepts is deleted":         {stored: key("shop", "/a"), asked: key("shop", "/a"), match: byTarget("/a"), deleted: true},
		"an entry the match refuses stays":              {stored: key("shop", "/a"), asked: key("shop", "/a"), match: byTarget("/newer")},
		"another key's entry is not looked at":          {stored: key("shop", "/a"), asked: key("shop", "/b"), match: byTarget("/a")},
		"a missing key deletes nothing":                 {asked: key("shop", "/a"), match: byTarget("/a")},
		"an entry under a long (digested) key is found": {stored: long, asked: long, match: byTarget("/a"), deleted: true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := newCache(t, smallConfig())
			if tt.stored != "" {
				mustSet(t, c, tt.stored, response("shop", "/a", 10))
			}
			removals := c.Removals()
			if got := c.DeleteIf(tt.asked, tt.match); got != tt.deleted {
				t.Fatalf("DeleteIf = %v, want %v", got, tt.deleted)
			}
			if tt.stored != "" {
				_, err := c.Get(tt.stored)
				if gone := err != nil; gone != tt.deleted {
					t.Fatalf("the stored entry gone: %v, want %v", gone, tt.deleted)
				}
			}
			if c.Removals() != removals {
				t.Fatalf("Removals went from %d to %d: DeleteIf is not a purge", removals, c.Removals())
			}
			if tt.deleted {
				if s := c.Stats(); s.Entries != 0 || s.Bytes != 0 {
					t.Fatalf("after the delete: %d entries, %d bytes; want none", s.Entries, s.Bytes)
				}
			}
		})
	}
}
