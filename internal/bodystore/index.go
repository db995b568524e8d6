package bodystore

import (
	"slices"
	"strings"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
)

// The store finds the files a purge or an invalidation removes by itself,
// never through L1: an entry that left L1 (bigcache evicts when full, a
// rebuild drops it) keeps its committed file, which the next start would
// recover and put back into L1, purged or not. So every committed file is
// indexed by the identity the purger selects entries by, taken from the
// entry in its trailer at Commit and at Open's scan.
//
// Memory per file: the item (id, size, two key hashes, the identity) and
// its LRU element, map slots in items and byPrim, and copies of Host,
// Target and Tags: about 350 bytes plus len(Host) + len(Target) + the
// tags (16 bytes + their length each). The trailer of the file holds
// these strings too, so the index never holds more than a few hundred
// bytes per file beyond what the file itself takes of the budget; with the
// default threshold (64 KiB) that is under 1% of the budget.

// ident is what purges select a committed file by: the hashes of its
// cache key and of that key's primary key (cachekey.Primary), and the
// identity of its entry.
type ident struct {
	key, prim    [32]byte
	host, target string
	tags         []string
}

// identOf copies e's identity (Decode aliases its input, which must not be
// kept alive by the index).
func identOf(e *entry.Entry) ident {
	who := ident{host: strings.Clone(e.Host), target: strings.Clone(e.Target)}
	if len(e.Tags) > 0 {
		who.tags = make([]string, len(e.Tags))
		for i, t := range e.Tags {
			who.tags[i] = strings.Clone(t)
		}
	}
	return who
}

// unindexLocked drops it from byPrim.
func (s *Store) unindexLocked(it *item) {
	l := s.byPrim[it.who.prim]
	if i := slices.Index(l, it); i >= 0 {
		l = slices.Delete(l, i, i+1)
	}
	if len(l) == 0 {
		delete(s.byPrim, it.who.prim)
	} else {
		s.byPrim[it.who.prim] = l
	}
}

// RemoveKey deletes the committed body stored under key and, when key is
// a primary key, those stored under its variants (cachekey.Primary):
// deleting a primary key retires every variant of the resource, and so
// does a purge or an invalidation of it. It finds them whether or not L1
// still holds their entries. Readers that have them open keep reading;
// fills in progress are not affected (their entries do not exist yet: a
// purge overtakes them through its watches).
func (s *Store) RemoveKey(key string) {
	prim := cachekey.Primary(key)
	all := len(prim) == len(key)
	h, ph := keyHash(key), keyHash(prim)
	var paths []string
	s.mu.Lock()
	for _, it := range slices.Clone(s.byPrim[ph]) {
		if !all && it.who.key != h {
			continue
		}
		if el, ok := s.items[it.id]; ok {
			s.forgetLocked(el)
			paths = append(paths, s.path(it.id, bodySuffix))
		}
	}
	s.mu.Unlock()
	s.unlink(paths)
}

// RemoveMatching deletes every committed body whose entry match selects,
// and returns how many it deleted. match is given an entry of Kind
// KindResponse holding only the identity of the body's entry (Host,
// Target, Tags) and File with the body's ID: what purges select by
// (internal/invalidate). match runs without the store's lock held, on a
// fresh entry every call (it may keep it). Bodies committed while it runs
// may or may not be seen.
func (s *Store) RemoveMatching(match func(e *entry.Entry) bool) int {
	s.mu.Lock()
	snap := make([]*item, 0, len(s.items))
	for _, el := range s.items {
		snap = append(snap, el.Value.(*item))
	}
	s.mu.Unlock()

	var hit []*item
	for _, it := range snap {
		e := &entry.Entry{
			Kind: entry.KindResponse, Host: it.who.host, Target: it.who.target,
			Tags: slices.Clone(it.who.tags), File: &entry.BodyFile{ID: it.id},
		}
		if match(e) {
			hit = append(hit, it)
		}
	}
	if len(hit) == 0 {
		return 0
	}
	paths := make([]string, 0, len(hit))
	s.mu.Lock()
	for _, it := range hit {
		// Ids are never reused: one still indexed is the one matched.
		if el, ok := s.items[it.id]; ok {
			s.forgetLocked(el)
			paths = append(paths, s.path(it.id, bodySuffix))
		}
	}
	s.mu.Unlock()
	s.unlink(paths)
	return len(paths)
}
