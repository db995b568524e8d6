package bodystore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"syscall"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// Body is an open, verified body file, for one request. Its descriptor
// may be shared with other requests (handle.go): it is only read at
// explicit offsets, never moved.
type Body struct {
	h    *handle
	size int64
	sec  Section          // what Section returns, so a hit allocates less
	hdr  [headerSize]byte // scratch for the checks
}

// Open opens the body ref names for key and verifies that it is that body:
// header magic, id and sha256(key), the file's size, and the body size
// and CRC its trailer records equal to ref's. A file that is gone gives an
// error matching fs.ErrNotExist (and the index forgets it); any other
// mismatch an error wrapping ErrMismatch; a shortage of descriptors or
// memory an error for which Transient is true, and the file stays. Open counts as a use for the
// LRU. A file served before is not opened again: its kept descriptor is
// checked with fstat (handle.go). Open does not retain key: the caller
// may reuse its bytes.
func (s *Store) Open(key string, ref entry.BodyFile) (*Body, error) {
	b, ok, err := s.shared(key, ref)
	if !ok {
		b, err = s.open(key, ref)
	}
	if err != nil {
		s.m.BodyStoreError(metrics.BodyOpOpen)
		return nil, err
	}
	return b, nil
}

func (s *Store) open(key string, ref entry.BodyFile) (*Body, error) {
	// The checks run on the raw descriptor: os.Open would cost more
	// system calls (on Linux it tries to register every file with the
	// network poller), and the descriptor is only ever read with pread
	// and sendfile, which take it as it is.
	path := s.path(ref.ID, bodySuffix)
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	for i := 0; err == syscall.EINTR && i < 3; i++ {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	}
	if err != nil {
		if err == syscall.ENOENT {
			s.forget(ref.ID)
		}
		return nil, fmt.Errorf("bodystore: opening a body: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	b := &Body{size: ref.Size, sec: Section{fd: -1}}
	if err := s.verify(fd, b.hdr[:], key, ref); err != nil {
		_ = syscall.Close(fd)
		if errors.Is(err, errDamaged) {
			// Not ours, or not whole: never to be served to anyone.
			s.Remove(ref.ID)
		}
		return nil, fmt.Errorf("bodystore: body %x: %w", ref.ID, err)
	}
	b.h = s.keep(fd, key, ref.ID)
	return b, nil
}

// Transient reports whether err, from Open or Create, is a failure of the
// moment rather than of the file: the process or the system is out of
// file descriptors (EMFILE, ENFILE) or the kernel out of memory (ENOMEM,
// ENOBUFS), or a call was interrupted or would block (EINTR, EAGAIN). The
// file may well be intact: its entry is kept, and a later Open, once
// descriptors are free again, serves it. Every other error (gone,
// damaged, another key's, EIO, EACCES) is about the file or the disk.
func Transient(err error) bool {
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return false
	}
	switch errno {
	case syscall.EMFILE, syscall.ENFILE, syscall.ENOMEM, syscall.ENOBUFS, syscall.EINTR, syscall.EAGAIN:
		return true
	}
	return false
}

// errDamaged marks a mismatch that makes the file useless to everyone
// (as opposed to a file that is fine but belongs to another key).
var errDamaged = errors.New("damaged")

// verify checks the open file fd against key and ref with an fstat and a
// pread of the header into buf (headerSize bytes). What the trailer
// records (body size and CRC) is in the index for every file the store
// committed or recovered; only a file the index does not know (its Remove
// or eviction is under way) costs a pread of the trailer. On success a
// file of the index becomes its most recently used.
func (s *Store) verify(fd int, buf []byte, key string, ref entry.BodyFile) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	size := st.Size
	if size < headerSize+tailSize {
		return fmt.Errorf("%w (%w): file of %d bytes", ErrMismatch, errDamaged, size)
	}
	if err := pread(fd, buf[:headerSize], 0); err != nil {
		return err
	}
	if err := checkHeader(buf, ref.ID); err != nil {
		return fmt.Errorf("%w (%w)", err, errDamaged)
	}
	if !headerKeyMatches(buf, key) {
		return fmt.Errorf("%w: the file belongs to another key", ErrMismatch)
	}
	s.mu.Lock()
	if el, ok := s.items[ref.ID]; ok {
		err := el.Value.(*item).matches(size, ref)
		if err == nil {
			s.lru.MoveToFront(el)
		}
		s.mu.Unlock()
		return err
	}
	s.mu.Unlock()
	if err := pread(fd, buf[:tailSize], size-tailSize); err != nil {
		return err
	}
	tl, err := parseTail(buf[:tailSize], size)
	if err != nil {
		return fmt.Errorf("%w (%w)", err, errDamaged)
	}
	return (&item{size: size, body: tl.size, crc: tl.crc}).matches(size, ref)
}

// matches checks a file of size bytes, whose trailer records it, against
// ref.
func (it *item) matches(size int64, ref entry.BodyFile) error {
	if size != it.size {
		return fmt.Errorf("%w (%w): the file has %d bytes, %d when it was committed",
			ErrMismatch, errDamaged, size, it.size)
	}
	if it.body != ref.Size || it.crc != ref.CRC {
		return fmt.Errorf("%w: the file holds %d bytes with CRC %08x, the entry wants %d with %08x",
			ErrMismatch, it.body, it.crc, ref.Size, ref.CRC)
	}
	return nil
}

// pread reads exactly len(p) bytes at off.
func pread(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := syscall.Pread(fd, p, off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("pread: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("pread: %w", io.ErrUnexpectedEOF)
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// Size is the body's length.
func (b *Body) Size() int64 { return b.size }

// Section returns a reader of n bytes of the body from off: a *Section,
// which connguard's connection sends with sendfile from that offset
// (connguard.FileRegion) when io.Copy hands it to a ResponseWriter. A
// range outside the body is clamped to it. A Body serves one Section at a
// time: the next call reuses the reader.
func (b *Body) Section(off, n int64) io.Reader {
	off = min(max(off, 0), b.size)
	n = min(max(n, 0), b.size-off)
	fd := -1
	if b.h != nil {
		fd = b.h.fd
	}
	b.sec = Section{fd: fd, off: headerSize + off, n: n}
	return &b.sec
}

// Close releases the file. The Body's Section reads nothing after it.
func (b *Body) Close() error {
	b.sec.fd = -1 // what is left of it fails to read
	if h := b.h; h != nil {
		b.h = nil
		h.release()
	}
	return nil
}

// Section is n bytes of an open body file from offset off. Read reads them
// with pread; FileRegion and Advance let a connection send them with
// sendfile (connguard.FileRegion). Neither moves the descriptor's offset,
// which other requests share.
type Section struct {
	fd  int
	off int64 // in the file: the body starts at headerSize
	n   int64
}

// errClosedBody is what a Section reads after its Body was closed.
var errClosedBody = fmt.Errorf("%w: the body was closed", ErrClosed)

// Read reads the next bytes of the section.
func (s *Section) Read(p []byte) (int, error) {
	if s.n <= 0 {
		return 0, io.EOF
	}
	if s.fd < 0 {
		return 0, errClosedBody
	}
	if int64(len(p)) > s.n {
		p = p[:s.n]
	}
	for {
		k, err := syscall.Pread(s.fd, p, s.off)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("bodystore: pread: %w", err)
		}
		if k == 0 {
			return 0, fmt.Errorf("bodystore: pread: %w", io.ErrUnexpectedEOF)
		}
		s.off, s.n = s.off+int64(k), s.n-int64(k)
		return k, nil
	}
}

// FileRegion returns the descriptor and the offset and length still to
// read; the descriptor is -1 after the Body is closed.
func (s *Section) FileRegion() (fd int, off, n int64) { return s.fd, s.off, s.n }

// Advance records k bytes sent from the region by other means (sendfile).
func (s *Section) Advance(k int64) { s.off, s.n = s.off+k, s.n-k }
