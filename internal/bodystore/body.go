package bodystore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// Body is an open, verified body file: one per request, since sendfile
// moves the descriptor's offset.
type Body struct {
	f    *os.File
	size int64
	// pos is the descriptor's offset while it is known: the body's start
	// after Open (which reads the header), -1 once a Section is handed out.
	pos int64
	lr  io.LimitedReader // what Section returns, so a hit allocates less
	hdr [headerSize]byte // scratch for the checks
}

// Open opens the body ref names for key and verifies that it is that body:
// header magic, id and sha256(key), the file's size, and the body size
// and CRC its trailer records equal to ref's. A file that is gone gives an
// error matching fs.ErrNotExist (and the index forgets it); any other
// mismatch an error wrapping ErrMismatch. Open counts as a use for the
// LRU.
func (s *Store) Open(key string, ref entry.BodyFile) (*Body, error) {
	b, err := s.open(key, ref)
	if err != nil {
		s.m.BodyStoreError(metrics.BodyOpOpen)
		return nil, err
	}
	return b, nil
}

func (s *Store) open(key string, ref entry.BodyFile) (*Body, error) {
	// The checks run on the raw descriptor, and the *os.File is made
	// only for a body that passed them. os.Open would cost more system
	// calls: on Linux it tries to register every file with the network
	// poller (two fcntl to set O_NONBLOCK, an epoll_ctl that fails for a
	// regular file, two fcntl to undo it); os.NewFile of a blocking fd
	// asks for its flags once. Regular files never block on read, and
	// sendfile takes the fd as it is.
	path := s.path(ref.ID, bodySuffix)
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		if err == syscall.ENOENT {
			s.forget(ref.ID)
		}
		return nil, fmt.Errorf("bodystore: opening a body: %w", &fs.PathError{Op: "open", Path: path, Err: err})
	}
	b := &Body{size: ref.Size, pos: headerSize}
	if err := s.verify(fd, b.hdr[:], key, ref); err != nil {
		_ = syscall.Close(fd)
		if errors.Is(err, errDamaged) {
			// Not ours, or not whole: never to be served to anyone.
			s.Remove(ref.ID)
		}
		return nil, fmt.Errorf("bodystore: body %x: %w", ref.ID, err)
	}
	b.f = os.NewFile(uintptr(fd), path)
	return b, nil
}

// errDamaged marks a mismatch that makes the file useless to everyone
// (as opposed to a file that is fine but belongs to another key).
var errDamaged = errors.New("damaged")

// verify checks the open file fd against key and ref with an fstat and a
// read of the header into buf (headerSize bytes), which leaves the offset
// at the body's start for sendfile. What the trailer records (body size
// and CRC) is in the index for every file the store committed or
// recovered; only a file the index does not know (its Remove or eviction
// is under way) costs a pread of the trailer. On success a file of the
// index becomes its most recently used.
func (s *Store) verify(fd int, buf []byte, key string, ref entry.BodyFile) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	size := st.Size
	if size < headerSize+tailSize {
		return fmt.Errorf("%w (%w): file of %d bytes", ErrMismatch, errDamaged, size)
	}
	if err := readFull(fd, buf[:headerSize]); err != nil {
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

// readFull reads exactly len(p) bytes at the descriptor's offset.
func readFull(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := syscall.Read(fd, p)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		if n == 0 {
			return fmt.Errorf("read: %w", io.ErrUnexpectedEOF)
		}
		p = p[n:]
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

// Section returns a reader of n bytes of the body from off: an
// *io.LimitedReader whose R is the *os.File positioned there, so io.Copy
// into a ResponseWriter reaches the TCP connection's ReadFrom (sendfile).
// A range outside the body is clamped to it. A Body serves one Section
// at a time: the next call reuses the reader and moves the offset.
func (b *Body) Section(off, n int64) io.Reader {
	off = min(max(off, 0), b.size)
	n = min(max(n, 0), b.size-off)
	// The whole body of a fresh Body needs no seek: Open's read of the
	// header left the offset at the body's start.
	if pos := headerSize + off; pos != b.pos {
		if _, err := b.f.Seek(pos, io.SeekStart); err != nil {
			return &io.LimitedReader{R: errReader{err}, N: n}
		}
	}
	b.pos = -1 // the reader moves it
	b.lr = io.LimitedReader{R: b.f, N: n}
	return &b.lr
}

// Close closes the file.
func (b *Body) Close() error { return b.f.Close() }

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }
