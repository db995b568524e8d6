package connguard

import (
	"io"
	"os"
	"syscall"
)

// maxSendfile bounds one sendfile call, as net's own does, so that a
// large body on a slow disk does not hold the thread for its whole length.
const maxSendfile = 4 << 20

// sendRegion sends r with sendfile from its offset; handled is false when
// the connection has no socket to do it on, or sendfile cannot read the
// file (nothing was sent then: the caller copies with Read). steady
// re-arms the send timeout after every chunk of progress.
func (c *conn) sendRegion(r FileRegion, steady bool) (written int64, handled bool, err error) {
	src, off, n := r.FileRegion()
	if src < 0 || n <= 0 {
		return 0, false, nil
	}
	return c.sendfile(src, &off, n, r, steady)
}

// sendFile sends what r holds with sendfile, when r is a file (an
// *os.File, or an *io.LimitedReader of one), from and moving the file's
// own offset, as net's sendFile does for a *net.TCPConn; but progress
// re-arms the send timeout. handled is false when r is no file, or
// sendfile cannot read it (nothing was sent then).
func (c *conn) sendFile(r io.Reader) (written int64, handled bool, err error) {
	n := int64(-1) // to the end of the file
	lr, limited := r.(*io.LimitedReader)
	if limited {
		if n, r = lr.N, lr.R; n <= 0 {
			return 0, true, nil
		}
	}
	// Like net, any syscall.Conn: os.File.WriteTo hands itself on as an
	// os.fileWithoutWriteTo. A socket or pipe is refused by sendfile
	// (EINVAL), before anything is sent.
	f, ok := r.(syscall.Conn)
	if !ok || c.raw == nil {
		return 0, false, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var serr error
	if rc.Read(func(fd uintptr) bool {
		written, handled, serr = c.sendfile(int(fd), nil, n, nil, true)
		return true
	}) != nil {
		return 0, false, nil // the file is closed: the caller's Read says so
	}
	if limited {
		lr.N -= written
	}
	return written, handled, serr
}

// sendfile sends n bytes (n < 0: up to the end) of the file src from *off
// with sendfile(2), or from src's own offset, which it moves, when off is
// nil. A file that ends first ends a region with io.ErrUnexpectedEOF (r
// is told what was sent, with Advance), a plain file without error, as
// io.Copy would. steady re-arms the send timeout after each chunk of
// progress, inside the wait for the socket, so that the deadline is never
// older than the last byte the client took.
func (c *conn) sendfile(src int, off *int64, n int64, r FileRegion, steady bool) (written int64, handled bool, err error) {
	if c.raw == nil {
		return 0, false, nil
	}
	var serr error
	err = c.raw.Write(func(fd uintptr) bool {
		for n != 0 {
			chunk := maxSendfile
			if n > 0 {
				chunk = int(min(n, maxSendfile))
			}
			var k int
			var err error
			if off != nil {
				o := *off
				k, err = syscall.Sendfile(int(fd), src, &o, chunk)
			} else {
				k, err = syscall.Sendfile(int(fd), src, nil, chunk)
			}
			if k > 0 {
				written += int64(k)
				if n > 0 {
					n -= int64(k)
				}
				if off != nil {
					*off += int64(k)
				}
				if r != nil {
					r.Advance(int64(k))
				}
				if steady {
					c.arm()
				}
			}
			switch {
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return false // wait until writable (or the write deadline)
			case err != nil:
				serr = os.NewSyscallError("sendfile", err)
				return true
			case k == 0 && r != nil: // the file is shorter than the region
				serr = io.ErrUnexpectedEOF
				return true
			case k == 0: // the end of a plain file
				return true
			}
		}
		return true
	})
	if serr != nil {
		err = serr
	}
	if written == 0 && isUnsupported(err) {
		return 0, false, nil
	}
	return written, true, err
}

// isUnsupported: sendfile cannot read this file (a filesystem without
// it); Read can.
func isUnsupported(err error) bool {
	se, ok := err.(*os.SyscallError)
	return ok && (se.Err == syscall.EINVAL || se.Err == syscall.ENOSYS || se.Err == syscall.EOPNOTSUPP)
}
