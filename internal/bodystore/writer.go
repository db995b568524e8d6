package bodystore

import (
	"fmt"
	"hash/crc32"
	"os"
	"sync"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

type writerState uint8

const (
	writing writerState = iota
	committed
	aborted
)

// Writer fills one body file. Write, Commit and Abort are called by the
// fill's goroutine; Follow, and Abort, may be called from any goroutine.
type Writer struct {
	s    *Store
	id   [16]byte
	key  string
	hint int64 // -1: unknown

	f   *os.File // the temp file, written only by the fill's goroutine
	crc uint32   // of the body so far, fill's goroutine only

	// end serialises Commit and Abort, so that Store.Close aborting a
	// fill never races its Commit.
	end sync.Mutex

	// mu guards what followers read; cond is broadcast whenever any of it
	// changes.
	mu      sync.Mutex
	cond    sync.Cond
	written int64 // body bytes in the file
	state   writerState
	err     error // the error that broke the writer
	// held: followers are not shown the body's end (HoldEnd) until
	// Release.
	held bool

	reserved int64 // guarded by s.mu
}

func (w *Writer) tmpPath() string  { return w.s.path(w.id, tmpSuffix) }
func (w *Writer) bodyPath() string { return w.s.path(w.id, bodySuffix) }

// open creates the temp file and writes the header.
func (w *Writer) open() error {
	f, err := os.OpenFile(w.tmpPath(), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("bodystore: creating a body file: %w", err)
	}
	h := makeHeader(w.id, w.key)
	if _, err := f.Write(h[:]); err != nil {
		_ = f.Close()
		_ = os.Remove(w.tmpPath())
		return fmt.Errorf("bodystore: writing a body file's header: %w", err)
	}
	w.f = f
	return nil
}

// ID is the body's id.
func (w *Writer) ID() [16]byte { return w.id }

// Write appends p to the body. A write error (ENOSPC, EIO, the budget, a
// body longer than the size hint or than MaxObject) is returned and
// breaks the writer: later calls return the same error, and the caller
// keeps serving its client from the origin stream and Aborts.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	err, st := w.err, w.state
	w.mu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case st != writing:
		return 0, ErrClosed
	case len(p) == 0:
		return 0, nil
	}
	end := w.written + int64(len(p)) // only this goroutine changes written
	if w.hint >= 0 && end > w.hint {
		return 0, w.fail(fmt.Errorf("%w: more than the %d bytes announced", ErrLength, w.hint))
	}
	if w.hint < 0 {
		if end > w.s.maxObject {
			return 0, w.fail(fmt.Errorf("%w: more than %d bytes", ErrTooLarge, w.s.maxObject))
		}
		if err := w.grow(headerSize+end, growStep); err != nil {
			return 0, w.fail(err)
		}
	}
	n, err := w.f.Write(p)
	w.crc = crc32.Update(w.crc, castagnoli, p[:n])
	if err != nil {
		return n, w.fail(fmt.Errorf("bodystore: writing a body file: %w", err))
	}
	w.mu.Lock()
	w.written = end
	w.cond.Broadcast()
	w.mu.Unlock()
	return n, nil
}

// fail breaks the writer with err (the first error wins) and wakes the
// followers.
func (w *Writer) fail(err error) error {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		w.cond.Broadcast()
	} else {
		err = w.err
	}
	w.mu.Unlock()
	w.s.m.BodyStoreError(metrics.BodyOpWrite)
	return err
}

// grow makes the reservation at least n bytes, reserving at least step
// bytes at a time (but not beyond the largest file MaxObject allows).
func (w *Writer) grow(n, step int64) error {
	s := w.s
	s.mu.Lock()
	if n <= w.reserved {
		s.mu.Unlock()
		return nil
	}
	step = max(n-w.reserved, min(step, headerSize+s.maxObject-w.reserved))
	victims, err := s.reserveLocked(step)
	if err == nil {
		w.reserved += step
	}
	s.mu.Unlock()
	s.unlink(victims)
	return err
}

// Commit finishes the body: the length written must equal the size hint
// (when there was one), meta(ref) must return the encoded version 2 entry
// that refers to this body (it is stored in the trailer for a restart);
// then the trailer is written and the file renamed into place. On error
// nothing is committed and the writer is aborted. The returned ref has
// Chunks 0; the caller sets it when it writes L2 chunks.
func (w *Writer) Commit(meta func(entry.BodyFile) []byte) (entry.BodyFile, error) {
	w.end.Lock()
	defer w.end.Unlock()
	w.mu.Lock()
	err, st := w.err, w.state
	w.mu.Unlock()
	if st != writing {
		if st == committed {
			return entry.BodyFile{}, fmt.Errorf("%w: already committed", ErrClosed)
		}
		return entry.BodyFile{}, ErrAborted
	}
	if err == nil {
		err = w.commit(meta)
	}
	if err != nil {
		w.s.m.BodyStoreError(metrics.BodyOpCommit)
		w.abortLocked(err)
		return entry.BodyFile{}, err
	}
	return entry.BodyFile{ID: w.id, Size: w.written, CRC: w.crc}, nil
}

func (w *Writer) commit(meta func(entry.BodyFile) []byte) error {
	if w.hint >= 0 && w.written != w.hint {
		return fmt.Errorf("%w: %d bytes written, %d announced", ErrLength, w.written, w.hint)
	}
	ref := entry.BodyFile{ID: w.id, Size: w.written, CRC: w.crc}
	enc := meta(ref)
	who, err := checkEntry(enc, w.id, w.written, w.crc)
	if err != nil {
		return fmt.Errorf("bodystore: the entry to commit: %w", err)
	}
	who = who.withKey(w.key)
	trailer := appendTrailer(make([]byte, 0, 4+len(w.key)+len(enc)+tailSize), w.key, enc, w.written, w.crc)
	size := headerSize + w.written + int64(len(trailer))
	if err := w.grow(size, 0); err != nil {
		return err
	}
	if _, err := w.f.Write(trailer); err != nil {
		return fmt.Errorf("bodystore: writing a body file's trailer: %w", err)
	}
	if err := w.f.Close(); err != nil {
		return fmt.Errorf("bodystore: closing a body file: %w", err)
	}

	// The rename happens under w.mu so that Follow opens the temp name
	// before it and the final name after it, never neither.
	w.mu.Lock()
	err = os.Rename(w.tmpPath(), w.bodyPath())
	if err == nil {
		w.state = committed
		w.cond.Broadcast()
	}
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("bodystore: renaming a body file into place: %w", err)
	}

	s := w.s
	s.mu.Lock()
	s.reserved -= w.reserved
	w.reserved = 0
	delete(s.writers, w.id)
	s.addLocked(&item{id: w.id, size: size, body: w.written, crc: w.crc, who: who})
	s.mu.Unlock()
	return nil
}

// HoldEnd keeps the body's end from followers until Release: they read
// every byte but the last of a body whose length was announced (a client
// that knows the length has the whole response with its last byte), and
// no body's io.EOF, even once it is committed. A fill uses it to store its
// response, and hand it to its waiters, before any client has all of it,
// so that what a client asks next finds it stored. A writer that breaks or
// is aborted shows everything written, as without HoldEnd. Call it before
// the first Follow.
func (w *Writer) HoldEnd() {
	w.mu.Lock()
	w.held = true
	w.mu.Unlock()
}

// Release lets followers read the body's end (see HoldEnd).
func (w *Writer) Release() {
	w.mu.Lock()
	w.held = false
	w.cond.Broadcast()
	w.mu.Unlock()
}

// Abort discards the body: the temp file is removed, the reservation
// released, and followers get ErrAborted. It is a no-op after Commit
// (successful or not) and after an earlier Abort.
func (w *Writer) Abort() {
	w.end.Lock()
	defer w.end.Unlock()
	w.mu.Lock()
	st := w.state
	w.mu.Unlock()
	if st == writing {
		w.abortLocked(ErrAborted)
	}
}

// abortLocked runs with w.end held and the state still writing.
func (w *Writer) abortLocked(cause error) {
	_ = w.f.Close() // may already be closed by a failed commit
	w.mu.Lock()
	_ = os.Remove(w.tmpPath())
	w.state = aborted
	if w.err == nil {
		w.err = cause
	}
	w.cond.Broadcast()
	w.mu.Unlock()

	s := w.s
	s.mu.Lock()
	s.reserved -= w.reserved
	w.reserved = 0
	delete(s.writers, w.id)
	s.mu.Unlock()
}
