//go:build !(linux || darwin || freebsd)

package sidecar

import "errors"

func freeBytes(string) (int64, error) {
	return 0, errors.New("the free space is not known on this platform")
}
