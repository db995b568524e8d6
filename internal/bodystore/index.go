package bodystore

import (
	"encoding/binary"
	"slices"
	"strings"
	"time"

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
// Memory per file: the item (id, size, two 64-bit key hashes, the
// identity, a chain pointer), its LRU element, its slots in items and
// byPrim, and copies of Host, Target and Tags. Measured: 265 bytes per
// file for a 12-byte host, a 27-byte target and one tag, of which the
// identity index adds about 200; in general about 230 bytes plus the
// length of Host, Target and each tag (+16 per tag). The file's trailer
// holds those strings too, so the index never holds more per file than a
// constant and what the file takes of the budget; at the default
// threshold (64 KiB) it is under 0.5% of the budget (a 10 GiB store of
// 64 KiB bodies: at most 163,840 files, about 40 MiB with short URLs).

// ident is what purges select a committed file by: 64-bit hashes (the
// first bytes of their SHA-256) of its cache key and of that key's primary
// key (cachekey.Primary), and the identity of its entry. A collision of
// the hashes could only remove a body too many (a miss), never keep one.
type ident struct {
	key, prim    uint64
	host, target string
	tags         []string
	// piece: the file is a piece of a partial response (its entry is
	// version 4), never a complete body.
	piece bool
	// requested is the entry's RequestTime as the file records it (a
	// purge's repeat keeps what was requested after the purge).
	requested time.Time
}

// shortHash is the index's hash of a key.
func shortHash(key string) uint64 {
	h := keyHash(key)
	return binary.LittleEndian.Uint64(h[:8])
}

// identOf copies e's identity (Decode aliases its input, which must not be
// kept alive by the index).
func identOf(e *entry.Entry) ident {
	who := ident{host: strings.Clone(e.Host), target: strings.Clone(e.Target), piece: e.Kind == entry.KindPartial, requested: e.RequestTime}
	if len(e.Tags) > 0 {
		who.tags = make([]string, len(e.Tags))
		for i, t := range e.Tags {
			who.tags[i] = strings.Clone(t)
		}
	}
	return who
}

// withKey sets the key hashes of who for a body stored under key.
func (who ident) withKey(key string) ident {
	who.key, who.prim = shortHash(key), shortHash(cachekey.Primary(key))
	return who
}

// indexLocked adds it to the chain of its primary key.
func (s *Store) indexLocked(it *item) {
	it.next = s.byPrim[it.who.prim]
	s.byPrim[it.who.prim] = it
}

// unindexLocked takes it out of the chain of its primary key.
func (s *Store) unindexLocked(it *item) {
	head := s.byPrim[it.who.prim]
	switch {
	case head == it && it.next == nil:
		delete(s.byPrim, it.who.prim)
	case head == it:
		s.byPrim[it.who.prim] = it.next
	default:
		for q := head; q != nil; q = q.next {
			if q.next == it {
				q.next = it.next
				break
			}
		}
	}
	it.next = nil
}

// identity is the entry purges select it by: its identity only.
func (it *item) identity() *entry.Entry {
	kind := entry.KindResponse
	if it.who.piece {
		kind = entry.KindPartial
	}
	return &entry.Entry{
		Kind: kind, Host: it.who.host, Target: it.who.target,
		Tags: slices.Clone(it.who.tags), File: &entry.BodyFile{ID: it.id},
		RequestTime: it.who.requested,
	}
}

// RemoveKey deletes the committed body stored under key and, when key is
// a primary key, those stored under its variants (cachekey.Primary):
// deleting a primary key retires every variant of the resource, and so
// does a purge or an invalidation of it. It finds them whether or not L1
// still holds their entries. Readers that have them open keep reading;
// fills in progress are not affected (their entries do not exist yet: a
// purge overtakes them through its watches).
func (s *Store) RemoveKey(key string) { s.RemoveKeyMatching(key, nil) }

// RemoveKeyMatching is RemoveKey for the bodies whose entries match
// selects (given as RemoveMatching gives them; nil selects all), and
// returns how many it deleted.
func (s *Store) RemoveKeyMatching(key string, match func(e *entry.Entry) bool) int {
	prim := cachekey.Primary(key)
	all := len(prim) == len(key)
	h, ph := shortHash(key), shortHash(prim)
	var hit []*item
	s.mu.Lock()
	for it := s.byPrim[ph]; it != nil; it = it.next {
		if all || it.who.key == h {
			hit = append(hit, it)
		}
	}
	s.mu.Unlock()
	if match != nil {
		hit = slices.DeleteFunc(hit, func(it *item) bool { return !match(it.identity()) })
	}
	if len(hit) == 0 {
		return 0
	}
	paths := make([]string, 0, len(hit))
	s.mu.Lock()
	for _, it := range hit {
		// Ids are never reused: one still indexed is the one found.
		if el, ok := s.items[it.id]; ok {
			s.forgetLocked(el)
			paths = append(paths, s.path(it.id, bodySuffix))
		}
	}
	s.mu.Unlock()
	s.unlink(paths)
	return len(paths)
}

// RemoveMatching deletes every committed body whose entry match selects,
// and returns how many it deleted. match is given an entry of Kind
// KindResponse (KindPartial for a piece file) holding only the identity
// of the body's entry (Host, Target, Tags), the RequestTime its file
// records and File with the body's ID: what purges select by
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
		if match(it.identity()) {
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
