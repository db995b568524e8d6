package connguard

import (
	"os"
	"syscall"
)

// steadyWrite: a Write longer than this, under a send timeout, is written
// by writeSteady, which re-arms the timeout after each partial write. A
// shorter one is armed once: it completes once the client has taken at
// most steadyWrite bytes, and whether the kernel wakes a writer for less
// is its own affair (it waits for a third of the send buffer to free).
const steadyWrite = 64 << 10

// maxWrite bounds one write(2), as net's own does.
const maxWrite = 1 << 30

// writeSteady writes p as net's Write would (write(2) until done, waiting
// for the socket when it is full), but re-arms the send timeout after
// each write that made progress, so that a body written in one call to a
// slow but steady reader is not cut at the first deadline. ok is false
// when the connection has no socket (nothing was written then).
func (c *conn) writeSteady(p []byte) (n int, ok bool, err error) {
	if c.raw == nil {
		return 0, false, nil
	}
	var werr error
	err = c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, err := syscall.Write(int(fd), p[n:min(len(p), n+maxWrite)])
			if m > 0 {
				n += m
				c.arm()
			}
			switch {
			case err == syscall.EINTR:
			case err == syscall.EAGAIN:
				return false // wait until writable (or the write deadline)
			case err != nil:
				werr = os.NewSyscallError("write", err)
				return true
			case m == 0:
				werr = os.NewSyscallError("write", syscall.EIO)
				return true
			}
		}
		return true
	})
	if werr != nil {
		err = werr
	}
	return n, true, err
}
