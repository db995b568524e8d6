package connguard

import "io"

// A FileRegion is a reader of a span of an open regular file that the
// connection can send with sendfile(2) without reading it: n bytes of the
// file fd from offset off. conn.ReadFrom sends one at its offset, which
// leaves the descriptor's own offset alone, so that many responses can
// send from one shared descriptor at once (bodystore's kept descriptors);
// a *net.TCPConn's ReadFrom only uses sendfile for an *os.File, read from
// its own offset. Advance records what was sent, so that Read continues
// after it. A region whose fd is negative is sent with Read.
type FileRegion interface {
	io.Reader
	FileRegion() (fd int, off, n int64)
	Advance(n int64)
}
