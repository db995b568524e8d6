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
// file (nothing was sent then: the caller copies with Read).
func (c *conn) sendRegion(r FileRegion) (written int64, handled bool, err error) {
	src, off, n := r.FileRegion()
	if src < 0 || n <= 0 {
		return 0, false, nil
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return 0, false, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false, nil
	}
	var serr error
	err = rc.Write(func(fd uintptr) bool {
		for n > 0 {
			o := off
			k, err := syscall.Sendfile(int(fd), src, &o, int(min(n, maxSendfile)))
			if k > 0 {
				off, n, written = off+int64(k), n-int64(k), written+int64(k)
				r.Advance(int64(k))
			}
			switch {
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return false // wait until writable (or the write deadline)
			case err != nil:
				serr = os.NewSyscallError("sendfile", err)
				return true
			case k == 0: // the file is shorter than the region
				serr = io.ErrUnexpectedEOF
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
