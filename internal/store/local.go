package store

import (
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l1"
)

// BodyRemover deletes body files: the body store (bodystore.Store).
// Removing a file that is gone is not an error. RemoveKey and
// RemoveMatching find the files by the key and identity their entries
// were stored with, so they remove files whose entries have already left
// L1.
type BodyRemover interface {
	// Remove deletes the body id.
	Remove(id [16]byte)
	// RemoveKey deletes the body stored under key and, key being a
	// primary key, those stored under its variants.
	RemoveKey(key string)
	// RemoveKeyMatching is RemoveKey for the bodies whose entries match
	// selects (given as RemoveMatching gives them, with RequestTime).
	RemoveKeyMatching(key string, match func(e *entry.Entry) bool) int
	// RemoveMatching deletes the bodies whose entries match selects
	// (given an entry with Kind, Host, Target, Tags, File.ID and the
	// RequestTime the file records only).
	RemoveMatching(match func(e *entry.Entry) bool) int
	// ExpireMatching applies a soft purge made at at to the entries
	// recorded with the bodies match selects (given as RemoveMatching
	// gives them), which a restart brings back, and returns how many it
	// concerned; the bodies stay.
	ExpireMatching(at time.Time, match func(e *entry.Entry) bool) int
}

// Local is this sidecar's L1 as purges and invalidations remove entries
// from it (invalidate.Local): every entry it deletes takes its body file,
// if it has one, with it, and so does every entry it would have deleted
// had L1 still held it. A file's entry may have left L1 (evicted, or
// dropped by a rebuild) while the file stayed; a purge that did not
// remove it would see it come back at the next start, when the body store
// recovers its files. So the files are found in the body store's own
// index, not through L1. A soft purge (ExpireMatching) marks the entries
// in L1 and those recorded with the files, and keeps the files.
type Local struct {
	l1     *l1.Cache
	bodies BodyRemover
}

// NewLocal returns the Local of cache whose entries' body files are in
// bodies (nil: none, and Local only deletes entries).
func NewLocal(cache *l1.Cache, bodies BodyRemover) *Local {
	return &Local{l1: cache, bodies: bodies}
}

// Delete removes the entry under key and the body file stored under key
// (key being a primary key, also those of its variants, which deleting
// the primary key retires).
func (l *Local) Delete(key string) {
	l.l1.Delete(key)
	if l.bodies != nil {
		l.bodies.RemoveKey(key)
	}
}

// PurgeIf deletes the entry under key when match selects it (reporting
// whether it did), and the
// body files stored under key that match selects: the file of the entry
// L1 holds as match decided for that entry, every other as match decides
// for what the body store recorded of its entry (identity and
// RequestTime), and, when match took a Vary marker, every file of the
// variants it retired. It is a purge's repeat (internal/invalidate),
// which keeps what was requested after the purge.
func (l *Local) PurgeIf(key string, match func(e *entry.Entry) bool) bool {
	var (
		file   *[16]byte
		hit    bool
		marker bool
	)
	deleted := l.l1.PurgeIf(key, func(e *entry.Entry) bool {
		hit = match(e)
		if e.File != nil {
			id := e.File.ID
			file = &id
		}
		marker = hit && e.Kind == entry.KindVary
		return hit
	})
	switch {
	case l.bodies == nil:
	case marker:
		l.bodies.RemoveKey(key)
	default:
		l.bodies.RemoveKeyMatching(key, func(e *entry.Entry) bool {
			if file != nil && e.File.ID == *file {
				return hit
			}
			return match(e)
		})
	}
	return deleted
}

// DeleteMatching deletes every entry match selects, and the body files of
// every entry match selects whether or not L1 still holds it, and returns
// how many L1 entries it deleted (l1.Cache.DeleteMatching). match sees
// each L1 entry and, once, each body file whose entry it did not see in
// L1 (with the identity only: Kind, Host, Target, Tags, File.ID).
func (l *Local) DeleteMatching(match func(e *entry.Entry) bool) int {
	if l.bodies == nil {
		return l.l1.DeleteMatching(match)
	}
	n, _, _, _ := l.deleteMatching(match)
	return n
}

// DeleteMatchingCount is DeleteMatching counting what a purge's answer
// reports: the stored responses (whole or partial) it deleted from L1, the body files it
// deleted, and of those the files whose entries L1 no longer held
// (responses L1 did not count).
func (l *Local) DeleteMatchingCount(match func(e *entry.Entry) bool) (responses, files, filesOnly int) {
	if l.bodies == nil {
		l.l1.DeleteMatching(func(e *entry.Entry) bool {
			hit := match(e)
			if hit && (e.Kind == entry.KindResponse || e.Kind == entry.KindPartial) {
				responses++
			}
			return hit
		})
		return responses, 0, 0
	}
	_, responses, files, filesOnly = l.deleteMatching(match)
	return responses, files, filesOnly
}

// deleteMatching is DeleteMatching with bodies, returning l1's count and
// DeleteMatchingCount's.
func (l *Local) deleteMatching(match func(e *entry.Entry) bool) (n, responses, files, filesOnly int) {
	// What match decided for the files of the entries L1 holds: match
	// is not asked twice about one stored response (it may count them).
	seen := make(map[[16]byte]bool)
	n = l.l1.DeleteMatching(func(e *entry.Entry) bool {
		hit := match(e)
		if e.File != nil {
			seen[e.File.ID] = hit
		}
		if hit && (e.Kind == entry.KindResponse || e.Kind == entry.KindPartial) {
			responses++
		}
		return hit
	})
	files = l.bodies.RemoveMatching(l.filesMatch(seen, match, &filesOnly))
	return n, responses, files, filesOnly
}

// filesMatch is match for the body files: what match decided for a file
// whose entry L1 held, else match itself, counting in only the files it
// selects that L1 did not hold. A piece file of a partial response
// (KindPartial) is removed but never counted: its partial response is
// counted when L1 holds it, and without it the piece was no stored
// response (a restart removes pieces).
func (l *Local) filesMatch(seen map[[16]byte]bool, match func(e *entry.Entry) bool, only *int) func(e *entry.Entry) bool {
	return func(e *entry.Entry) bool {
		if hit, ok := seen[e.File.ID]; ok {
			return hit
		}
		hit := match(e)
		if hit && e.Kind != entry.KindPartial {
			*only++
		}
		return hit
	}
}

// ExpireMatching applies a soft purge made at at (entry.Entry.Expire) to
// the L1 entries match selects and to the entries recorded with the body
// files of entries it selects, whether or not L1 still holds them, and
// returns how many stored responses of L1 the purge concerned. The files
// stay. match is asked as DeleteMatching asks it.
func (l *Local) ExpireMatching(at time.Time, match func(e *entry.Entry) bool) int {
	n, _, _ := l.ExpireMatchingCount(at, match)
	return n
}

// ExpireMatchingCount is ExpireMatching counting as DeleteMatchingCount
// does: the L1 responses the purge concerned, the body files whose
// entries it concerned, and of those the files whose entries L1 no
// longer held.
func (l *Local) ExpireMatchingCount(at time.Time, match func(e *entry.Entry) bool) (responses, files, filesOnly int) {
	if l.bodies == nil {
		return l.l1.ExpireMatching(at, match), 0, 0
	}
	seen := make(map[[16]byte]bool)
	responses = l.l1.ExpireMatching(at, func(e *entry.Entry) bool {
		hit := match(e)
		if e.File != nil {
			seen[e.File.ID] = hit
		}
		return hit
	})
	files = l.bodies.ExpireMatching(at, l.filesMatch(seen, match, &filesOnly))
	return responses, files, filesOnly
}

// Reset drops every entry and every body file.
func (l *Local) Reset() {
	if l.bodies != nil {
		l.bodies.RemoveMatching(func(*entry.Entry) bool { return true })
	}
	l.l1.Reset()
}
