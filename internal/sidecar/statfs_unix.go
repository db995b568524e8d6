//go:build linux || darwin || freebsd

package sidecar

import "syscall"

// freeBytes is the space of path's filesystem available to an unprivileged
// writer (statfs f_bavail × f_bsize).
func freeBytes(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
