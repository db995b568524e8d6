package connguard

import (
	"os"
	"syscall"
)

// writeMore writes p with MSG_MORE; ok is false when the connection has
// no socket to do it on (nothing was written then).
func (c *conn) writeMore(p []byte) (n int, ok bool, err error) {
	if c.raw == nil {
		return 0, false, nil
	}
	var werr error
	err = c.raw.Write(func(fd uintptr) bool {
		for n < len(p) {
			m, err := syscall.SendmsgN(int(fd), p[n:], nil, nil, syscall.MSG_MORE|syscall.MSG_NOSIGNAL)
			switch err {
			case nil:
				n += m
			case syscall.EINTR:
			case syscall.EAGAIN:
				return false // wait until writable (or the write deadline)
			default:
				werr = os.NewSyscallError("sendmsg", err)
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

// push sends what MSG_MORE held back: setting TCP_NODELAY (which net sets
// on every TCP connection already) pushes the pending segments.
func (c *conn) push() {
	if c.raw == nil {
		return
	}
	_ = c.raw.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	})
}
