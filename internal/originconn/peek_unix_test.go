//go:build unix

package originconn

import "syscall"

// peekable reports whether fd has bytes to read, leaving them there.
func peekable(fd uintptr) bool {
	var b [1]byte
	n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return err == nil && n > 0
}
