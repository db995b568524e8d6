package bodystore

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// ExpireMatching applies a soft purge made at at to the entries recorded
// in the trailers of the committed bodies whose entries match selects
// (given the identity only, as RemoveMatching gives it), and returns how
// many bodies the purge concerned (entry.Entry.Expire). A body stays
// where it is; only its trailer's entry, which a restart puts back into
// L1, gets the freshness the purge ended, so that a restart does not
// bring back as fresh what a soft purge marked stale. The L1 and L2
// entries that refer to a body are the purger's to mark.
//
// The new entry has the length of the old one (only a fixed-size field
// changes) and is written over it in place, keeping the file's
// modification time (the restart scan orders files by it). A write cut
// short by a crash leaves an entry that fails its checksum: the restart
// scan then removes the file, a miss. A body removed or evicted
// meanwhile is skipped. Soft purges of bodies run one at a time.
func (s *Store) ExpireMatching(at time.Time, match func(e *entry.Entry) bool) int {
	s.mu.Lock()
	snap := make([]*item, 0, len(s.items))
	for _, el := range s.items {
		snap = append(snap, el.Value.(*item))
	}
	s.mu.Unlock()

	s.expireMu.Lock()
	defer s.expireMu.Unlock()
	n, failed := 0, 0
	var firstErr error
	for _, it := range snap {
		if it.who.piece {
			// A piece never comes back after a restart (its part lived
			// in L1 only): there is nothing to mark.
			continue
		}
		if !match(it.identity()) {
			continue
		}
		concerned, err := s.expireFile(it, at)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			failed++
			if firstErr == nil {
				firstErr = err
			}
		case concerned:
			n++
		}
	}
	if failed > 0 {
		s.log.Warn("body store: a soft purge could not mark the entries of some body files; a restart may bring them back fresh",
			"files", failed, "error", firstErr)
	}
	return n
}

// expireFile rewrites the entry in the trailer of the file of it as
// entry.Entry.Expire(at) leaves it, and reports whether the purge
// concerned it.
func (s *Store) expireFile(it *item, at time.Time) (concerned bool, err error) {
	path := s.path(it.id, bodySuffix)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	if fi.Size() != it.size {
		return false, fmt.Errorf("%w: %s: %d bytes, committed with %d", ErrMismatch, path, fi.Size(), it.size)
	}
	var t [tailSize]byte
	if _, err := f.ReadAt(t[:], it.size-tailSize); err != nil {
		return false, err
	}
	tl, err := parseTail(t[:], it.size)
	if err != nil {
		return false, err
	}
	if tl.trailerLen > maxTrailer {
		return false, fmt.Errorf("%w: trailer of %d bytes", ErrMismatch, tl.trailerLen)
	}
	v := make([]byte, tl.trailerLen-tailSize)
	off := int64(headerSize) + tl.size
	if _, err := f.ReadAt(v, off); err != nil {
		return false, err
	}
	key, enc, _, err := parseTrailer(v, it.id, tl)
	if err != nil {
		return false, err
	}
	var e entry.Entry
	if err := entry.Decode(enc, &e); err != nil {
		return false, err
	}
	concerned, changed := e.Expire(at)
	if !changed {
		return concerned, nil
	}
	out := entry.Encode(make([]byte, 0, len(enc)), &e)
	if len(out) != len(enc) {
		return false, fmt.Errorf("%w: %s: the expired entry encodes to %d bytes, not %d", ErrMismatch, path, len(out), len(enc))
	}
	if _, err := f.WriteAt(out, off+4+int64(len(key))); err != nil {
		return false, err
	}
	if err := os.Chtimes(path, time.Time{}, fi.ModTime()); err != nil {
		return true, err
	}
	return true, nil
}
