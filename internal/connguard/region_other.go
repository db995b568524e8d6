//go:build !linux

package connguard

func (c *conn) sendRegion(FileRegion) (int64, bool, error) { return 0, false, nil }
