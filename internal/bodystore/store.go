package bodystore

import (
	"container/list"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/tiercache/tiercache/internal/metrics"
)

// Errors. Every one of them is an expected outcome the proxy handles by
// serving from the origin stream (or, for Open, by treating it as a miss).
var (
	// ErrTooLarge: the body is larger than Options.MaxObject.
	ErrTooLarge = errors.New("bodystore: body larger than the per-object maximum")
	// ErrFull: evicting every committed file could not make room within
	// Options.MaxBytes.
	ErrFull = errors.New("bodystore: budget exhausted")
	// ErrExists: CreateWithID for an id the store already has or is
	// writing.
	ErrExists = errors.New("bodystore: body id already present")
	// ErrMismatch: a file is not the body the key and reference name
	// (another key's, damaged, or not ours). It is never served.
	ErrMismatch = errors.New("bodystore: body file does not match")
	// ErrLength: the bytes written differ from the size hint (a truncated
	// body or a Content-Length that lies).
	ErrLength = errors.New("bodystore: body length differs from its size hint")
	// ErrAborted: the writer was aborted; its followers get this.
	ErrAborted = errors.New("bodystore: fill aborted")
	// ErrClosed: the store, writer or follower is closed.
	ErrClosed = errors.New("bodystore: closed")
)

// Defaults of Options.
const (
	DefaultMaxObject = 1 << 30
	// defaultFreeShare is the share of the free space used when MaxBytes
	// is 0, in percent.
	defaultFreeShare = 90
	// growStep is how much a writer without a size hint reserves at a
	// time.
	growStep = 1 << 20
)

// Options configures a Store.
type Options struct {
	// Dir is the directory (--body-dir); made if missing.
	Dir string
	// MaxBytes is the budget for committed files and reservations; 0 means
	// 90% of the space available at start.
	MaxBytes int64
	// MaxObject is the largest body accepted; default DefaultMaxObject.
	MaxObject int64
	// Metrics receives the body store collectors; nil counts nothing.
	Metrics *metrics.Metrics
	// Logger; default slog.Default().
	Logger *slog.Logger
	// MaxOpen is how many body files keep their descriptor open between
	// hits (handle.go); 0 means DefaultMaxOpen, negative none. It never
	// exceeds a quarter of the limit on open files.
	MaxOpen int
}

// Recovered is a body file found valid at start.
type Recovered struct {
	// Key is the exact cache key the body was stored under.
	Key string
	// Entry is the encoded version 2 entry, for L1.
	Entry []byte
}

// Store is a directory of body files with a budget. It is safe for
// concurrent use.
type Store struct {
	dir       string
	maxBytes  int64
	maxObject int64
	m         *metrics.Metrics
	log       *slog.Logger

	mu        sync.Mutex
	lru       *list.List // of *item, most recently used at the front
	items     map[[16]byte]*list.Element
	byPrim    map[uint64]*item // the chain of items under each primary key (index.go)
	writers   map[[16]byte]*Writer
	kept      *list.List // of *item with a kept handle, most recently used at the front
	maxOpen   int
	committed int64 // bytes of the files in items
	reserved  int64 // bytes reserved by writers
	closed    bool

	// expireMu serializes soft purges' rewrites of trailers (expire.go).
	expireMu sync.Mutex

	// opened, when set (by tests, before any Create), runs in create
	// once the writer's file exists and before anything is reserved for
	// it: the store may change in between.
	opened func()
}

// item is a committed file in the index. body and crc are what its
// trailer records, kept so that a hit checks a reference against them
// without reading the trailer.
type item struct {
	id   [16]byte
	size int64 // the whole file
	body int64 // the body's length
	crc  uint32
	who  ident   // what purges select it by (index.go)
	next *item   // the next item under the same primary key, guarded by s.mu
	h    *handle // the kept descriptor, if any (handle.go), guarded by s.mu
}

// path is dir/<hex id><suffix>, built with one allocation (it is on the
// hit path).
func (s *Store) path(id [16]byte, suffix string) string {
	var h [32]byte
	hex.Encode(h[:], id[:])
	var sb strings.Builder
	sb.Grow(len(s.dir) + 1 + len(h) + len(suffix))
	sb.WriteString(s.dir)
	sb.WriteByte(filepath.Separator)
	sb.Write(h[:])
	sb.WriteString(suffix)
	return sb.String()
}

// Create starts a body for key. sizeHint is the body's length when known
// (Content-Length), else -1: then the reservation grows as Write is
// called. Once its temp file is created, it reserves the budget, evicting
// least recently used committed files: a Create that cannot create its
// file (out of descriptors) evicts nothing. ErrTooLarge when sizeHint
// exceeds MaxObject, ErrFull when the budget cannot be met (the file is
// then removed).
func (s *Store) Create(key string, sizeHint int64) (*Writer, error) {
	var id [16]byte
	for range 3 {
		_, _ = rand.Read(id[:]) // never fails (crypto/rand)
		w, err := s.create(id, key, sizeHint)
		if !errors.Is(err, ErrExists) {
			return w, err
		}
		// A collision of random ids is a 2^-128 event; a retry costs
		// nothing.
	}
	return nil, fmt.Errorf("%w: three random ids in a row", ErrExists)
}

// CreateWithID is Create for a body whose id is already known (a replica
// copying a body from L2 chunks keeps its id); ErrExists when that id is
// committed or being written here. Commit checks the bytes written
// against the entry meta returns, so corrupt chunks are never committed.
func (s *Store) CreateWithID(id [16]byte, key string, size int64) (*Writer, error) {
	return s.create(id, key, size)
}

func (s *Store) create(id [16]byte, key string, hint int64) (*Writer, error) {
	if hint > s.maxObject {
		return nil, fmt.Errorf("%w: %d bytes, maximum %d", ErrTooLarge, hint, s.maxObject)
	}
	reserve := int64(headerSize)
	if hint > 0 {
		reserve += hint
	} else if hint < 0 {
		hint = -1
	}
	w := &Writer{s: s, id: id, key: key, hint: hint}
	w.cond.L = &w.mu

	// What refuses the fill without touching the disk is checked first;
	// checkLocked runs again once the file exists, since the store may
	// have changed meanwhile.
	s.mu.Lock()
	err := s.checkLocked(id, reserve)
	s.mu.Unlock()
	if err != nil {
		if errors.Is(err, ErrFull) {
			s.m.BodyStoreError(metrics.BodyOpCreate)
		}
		return nil, err
	}

	// The file is created before anything is evicted for it: a fill that
	// cannot create it (out of descriptors under a flood of connections,
	// EMFILE) serves its client from the origin stream, and must not have
	// emptied part of the cache for nothing. Until it is registered, the
	// writer is the caller's alone (Close does not see it); two creates of
	// one id are kept apart by O_EXCL and by the check below.
	if err := w.open(); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("%w: %v", ErrExists, err)
		}
		s.m.BodyStoreError(metrics.BodyOpCreate)
		return nil, err
	}
	if s.opened != nil {
		s.opened()
	}
	s.mu.Lock()
	var victims []string
	err = s.checkLocked(id, reserve)
	if err == nil {
		victims, err = s.reserveLocked(reserve)
	}
	if err == nil {
		w.reserved = reserve
		s.writers[id] = w
	}
	s.mu.Unlock()
	s.unlink(victims)
	if err != nil {
		_ = w.f.Close()
		_ = os.Remove(w.tmpPath()) // ours: the open created it
		if errors.Is(err, ErrFull) {
			s.m.BodyStoreError(metrics.BodyOpCreate)
		}
		return nil, err
	}
	return w, nil
}

// checkLocked refuses a fill of id reserving n bytes when the store is
// closed, id is committed or being written, or n could not fit even by
// evicting every committed file (the rest is reserved by fills in
// progress).
func (s *Store) checkLocked(id [16]byte, n int64) error {
	if s.closed {
		return ErrClosed
	}
	if _, ok := s.items[id]; ok {
		return ErrExists
	}
	if _, ok := s.writers[id]; ok {
		return ErrExists
	}
	if n > s.maxBytes-s.reserved {
		return fmt.Errorf("%w: %d bytes wanted, %d of %d reserved by fills in progress",
			ErrFull, n, s.reserved, s.maxBytes)
	}
	return nil
}

// reserveLocked adds n to the reservations, evicting least recently used
// committed files until it fits, and returns the paths to unlink once
// s.mu is released. When evicting every committed file would not be
// enough (the rest is reserved by fills in progress), it evicts nothing.
func (s *Store) reserveLocked(n int64) ([]string, error) {
	if n > s.maxBytes-s.reserved {
		return nil, fmt.Errorf("%w: %d bytes wanted, %d of %d reserved by fills in progress",
			ErrFull, n, s.reserved, s.maxBytes)
	}
	var victims []string
	for s.committed+s.reserved+n > s.maxBytes {
		el := s.lru.Back()
		if el == nil { // committed is 0 when the LRU is empty
			break
		}
		it := s.forgetLocked(el)
		victims = append(victims, s.path(it.id, bodySuffix))
	}
	s.reserved += n
	if len(victims) > 0 {
		s.m.BodyStoreEvicted(len(victims))
	}
	return victims, nil
}

// forgetLocked drops a committed file from the index and the budget.
func (s *Store) forgetLocked(el *list.Element) *item {
	it := s.lru.Remove(el).(*item)
	s.dropLocked(it)
	delete(s.items, it.id)
	s.unindexLocked(it)
	s.committed -= it.size
	s.m.BodyStoreUsage(s.committed, len(s.items))
	return it
}

// forget drops id from the index when it is there (a file found gone).
func (s *Store) forget(id [16]byte) {
	s.mu.Lock()
	if el, ok := s.items[id]; ok {
		s.forgetLocked(el)
	}
	s.mu.Unlock()
}

// addLocked puts a committed file at the front of the LRU and indexes it
// by its identity (it.who).
func (s *Store) addLocked(it *item) {
	s.items[it.id] = s.lru.PushFront(it)
	s.indexLocked(it)
	s.committed += it.size
	s.m.BodyStoreUsage(s.committed, len(s.items))
}

func (s *Store) unlink(paths []string) {
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("body store: removing an evicted body file", "path", p, "error", err)
		}
	}
}

// Remove deletes the committed body id (purge, replacement or eviction of
// the entry that refers to it). Readers that have it open keep reading.
// A fill in progress under that id is not affected: its entry does not
// exist yet.
func (s *Store) Remove(id [16]byte) {
	s.forget(id)
	s.unlink([]string{s.path(id, bodySuffix)})
}

// Close aborts the fills in progress (their followers get ErrAborted) and
// refuses new ones, and closes the kept descriptors (a Body still open
// keeps its own until its Close). Committed files stay for the next
// start.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	for s.kept.Len() > 0 {
		s.dropLocked(s.kept.Front().Value.(*item))
	}
	ws := make([]*Writer, 0, len(s.writers))
	for _, w := range s.writers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.Abort()
	}
	return nil
}

// Usage reports the committed bytes and files and the bytes reserved by
// fills in progress.
func (s *Store) Usage() (committed int64, files int, reserved int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.committed, len(s.items), s.reserved
}
