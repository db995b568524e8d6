package connguard

import "context"

// BodyFollows tells the connection that carries the request with context
// ctx (from ConnContext) that the response's next write, its header, which
// the handler is about to flush, is followed at once by a body sent with
// sendfile (the ResponseWriter's ReadFrom). That write goes out with
// MSG_MORE: the kernel holds the header back and sends it in one segment
// with the body's first bytes, and sendfile's last chunk pushes it all. A
// separate segment for the header would cost the sender (over loopback,
// the receiver's half of TCP too) as much as a 64 KiB one.
//
// The handler must call Push once the body is written: it pushes the
// header when nothing followed it (a body of 0 bytes, a failed copy),
// which costs a system call only then. For a request that did not come
// through Listener and ConnContext, and on systems without MSG_MORE, both
// do nothing.
func BodyFollows(ctx context.Context) {
	if c := connFrom(ctx); c != nil {
		c.more = true
	}
}

// Push ends what BodyFollows started: a header still held back is sent.
func Push(ctx context.Context) {
	c := connFrom(ctx)
	if c == nil {
		return
	}
	c.more = false
	if c.unpushed {
		c.unpushed = false
		c.push()
	}
}
