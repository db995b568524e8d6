package bodystore

import (
	"container/list"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/tiercache/tiercache/internal/entry"
)

// Hits share open descriptors, the way nginx's open_file_cache does: a
// file served once keeps its descriptor (a handle) for the next hits, so
// that a hit costs an fstat before sendfile instead of open, fstat, a
// read of the header, fcntl and close. Sendfile and pread take the offset
// as an argument (Section), so any number of responses read one
// descriptor at once.
//
// A handle is counted: one reference for the store while it keeps it,
// one per Body that serves it. The descriptor is closed when the last
// goes, never before: a descriptor number closed under a reader could be
// reused by the next open and send another file's bytes. The store drops
// its reference when the file leaves the index (eviction, Remove,
// RemoveKey, a purge) and when the handle falls off the end of the list
// of kept handles (Options.MaxOpen).
//
// Every hit on a kept handle checks the file with fstat: a file unlinked
// under the store (no links left) or of another size than when it was
// committed is dropped, and the hit opens the path as a first hit does,
// which reports a file that is gone as gone and removes a damaged one.
type handle struct {
	fd   int
	key  string // the key whose header check the file passed, a copy of its own
	refs atomic.Int32
	el   *list.Element // in Store.kept while the store keeps it (s.mu)
}

// DefaultMaxOpen is the default of Options.MaxOpen: at most this many
// body files keep a descriptor open between hits, and never more than a
// quarter of the process's limit on open files.
const DefaultMaxOpen = 1024

// maxOpenFor bounds want (0: DefaultMaxOpen) to a quarter of the soft
// limit on open files (which Go raises to the hard limit at start), so
// that kept descriptors never crowd out connections.
func maxOpenFor(want int) int {
	switch {
	case want < 0:
		return 0
	case want == 0:
		want = DefaultMaxOpen
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur/4 < uint64(want) {
		want = int(rl.Cur / 4)
	}
	return want
}

// release drops one reference; the last closes the descriptor.
func (h *handle) release() {
	if h.refs.Add(-1) == 0 {
		_ = syscall.Close(h.fd)
	}
}

// shared returns a Body over the kept handle of ref's file when there is
// one for key and the file still checks out, counting the hit as a use.
// ok is false when the hit must open the file itself; err is set (and ok
// true) when the file is intact but is not the body ref names.
func (s *Store) shared(key string, ref entry.BodyFile) (b *Body, ok bool, err error) {
	s.mu.Lock()
	el, indexed := s.items[ref.ID]
	if !indexed {
		s.mu.Unlock()
		return nil, false, nil
	}
	it := el.Value.(*item)
	h := it.h
	if h == nil || h.key != key {
		s.mu.Unlock()
		return nil, false, nil
	}
	if err := it.matches(it.size, ref); err != nil {
		s.mu.Unlock()
		return nil, true, fmt.Errorf("bodystore: body %x: %w", ref.ID, err)
	}
	size := it.size
	h.refs.Add(1)
	s.lru.MoveToFront(el)
	s.kept.MoveToFront(h.el)
	s.mu.Unlock()

	var st syscall.Stat_t
	if err := syscall.Fstat(h.fd, &st); err != nil || st.Nlink == 0 || st.Size != size {
		// Deleted, truncated or replaced under the store: forget the
		// handle and let the caller open the path and judge.
		h.release()
		s.mu.Lock()
		if it.h == h {
			s.dropLocked(it)
		}
		s.mu.Unlock()
		return nil, false, nil
	}
	return &Body{h: h, size: ref.Size, sec: Section{fd: -1}}, true, nil
}

// keep makes a handle of fd, a file just opened and verified for key, and
// keeps it for the next hits when the file is in the index and has none
// yet. The returned handle holds the caller's reference.
func (s *Store) keep(fd int, key string, id [16]byte) *handle {
	h := &handle{fd: fd}
	h.refs.Store(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.items[id]
	if !ok || s.maxOpen == 0 || s.closed {
		return h
	}
	it := el.Value.(*item)
	if it.h != nil {
		return h
	}
	// The key outlives this call: never the caller's string, which may
	// alias a buffer the caller reuses (the proxy's pooled key buffers),
	// or the key check of later hits would compare a key with itself.
	h.key = strings.Clone(key)
	h.refs.Add(1)
	it.h = h
	h.el = s.kept.PushFront(it)
	for s.kept.Len() > s.maxOpen {
		s.dropLocked(s.kept.Back().Value.(*item))
	}
	return h
}

// dropLocked stops keeping the handle of it.
func (s *Store) dropLocked(it *item) {
	h := it.h
	if h == nil {
		return
	}
	s.kept.Remove(h.el)
	h.el, it.h = nil, nil
	h.release()
}
