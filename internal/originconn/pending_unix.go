//go:build unix

package originconn

import (
	"net"
	"syscall"
)

// waitingOn returns a check for bytes already waiting on c's socket, when
// c is one (not TLS): it reads them without blocking (they are past a
// response, and discarded) and reports whether there were any, or whether
// the origin has closed its side (the connection is done either way).
func waitingOn(c net.Conn) func() bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	// Made once per connection: a check costs a system call, no
	// allocation. The Conn calls it under its lock.
	var (
		buf  [1]byte
		more bool
	)
	read := func(fd uintptr) bool {
		n, err := syscall.Read(int(fd), buf[:])
		more = n > 0 || n == 0 && err == nil
		return true // never wait
	}
	return func() bool {
		more = false
		_ = raw.Read(read)
		return more
	}
}
