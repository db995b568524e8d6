//go:build !linux

package connguard

import "io"

func (c *conn) sendRegion(FileRegion, bool) (int64, bool, error) { return 0, false, nil }

func (c *conn) sendFile(io.Reader) (int64, bool, error) { return 0, false, nil }
