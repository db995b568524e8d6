//go:build !linux

package connguard

func (c *conn) writeMore([]byte) (int, bool, error) { return 0, false, nil }

func (c *conn) push() {}
