// Package connguard refuses HTTP/1.1 requests whose message framing is
// ambiguous, the raw material of request smuggling (RFC 9112 §6.3, §11.2),
// and closes clients that stop reading their responses (SendTimeout).
//
// net/http cannot do this on its own terms: when a request carries both
// Content-Length and Transfer-Encoding: chunked it silently drops
// Content-Length, and it removes Transfer-Encoding from the Header map, so
// a handler never sees the conflict. connguard therefore watches the bytes
// before net/http parses them. Listener wraps each accepted connection
// with a small framing tracker that follows request boundaries exactly as
// net/http does and records, per request header block, whether the block
// was suspicious. ConnContext hands the tracker to the request context and
// Middleware answers a suspicious request with 400 and Connection: close
// instead of calling the next handler.
//
// Wiring:
//
//	srv := &http.Server{
//		Handler:     connguard.Middleware(h), // outermost, so RequestURI is untouched
//		ConnContext: connguard.ConnContext,
//		ConnState:   connguard.ConnState, // for MaxConns
//	}
//	// ln is the plaintext TCP listener
//	srv.Serve(connguard.Listener(ln, connguard.SendTimeout(60*time.Second),
//		connguard.MaxConns(connguard.DefaultMaxConns, meter)))
//
// MaxConns bounds the connections open at once; at the bound it closes
// the one that has waited longest for a request (see MaxConns), and
// Middleware then aborts a request net/http read on it just before.
//
// The tracker inspects the caller's buffer in place and never copies it.
// Whatever it cannot follow (malformed framing, an HTTP/2 preface) makes
// it give up on the connection: every later request on that connection is
// refused, so a misunderstanding fails closed. Pipelining is not limited:
// the tracker can only run a few KiB ahead of net/http, so the verdicts it
// queues stay bounded however many requests a client sends in one write
// (see maxPending).
//
// Writes go straight through (but for the send timeout, below), with one
// exception a handler asks for:
// BodyFollows sends the response header it is about to flush with
// MSG_MORE, so that the header leaves in one segment with the body that
// sendfile sends next (ReadFrom stays the TCP connection's, or sends a
// FileRegion itself), and Push sends a header that nothing followed.
//
// The connection also owns the one bound net/http lacks for a cache, the
// send timeout (SendTimeout, nginx's send_timeout): a client that takes
// no byte of a response for that long is closed, one that reads slowly
// but steadily never is. net/http's WriteTimeout bounds a whole response
// instead, which would cut a large download. Only the connection sees
// each piece of progress (a partial write, a chunk of sendfile), so it
// re-arms the write deadline there: Write, writeSteady for large writes,
// sendRegion and sendFile for files handed to ReadFrom (which, under a
// send timeout, sends files itself rather than through the TCP
// connection's ReadFrom). net/http lifts the write deadline after every
// response (and at Hijack) through SetWriteDeadline and SetDeadline,
// which the connection notes, so that the next response's first write
// arms it afresh. Detach, for a hijacked connection, ends it.
//
// Listener must wrap a plaintext listener: wrapping a TLS listener would
// hide the *tls.Conn from net/http (no r.TLS, no ALPN).
package connguard

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Listener returns a listener whose connections pass every byte read
// through a request-framing tracker. Use it with ConnContext and
// Middleware; on its own it changes nothing a handler can see. With
// SendTimeout its connections also close a client that stops reading.
func Listener(l net.Listener, opts ...Option) net.Listener {
	gl := &listener{Listener: l, done: make(chan struct{})}
	for _, o := range opts {
		o(gl)
	}
	return gl
}

type listener struct {
	net.Listener
	sendTimeout time.Duration
	slots       *slots        // nil: no MaxConns
	done        chan struct{} // closed by Close: a wait for a slot ends
	closeOnce   sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	gc := &conn{Conn: c, t: tracker{limit: noLimit}, sendTimeout: l.sendTimeout, slots: l.slots}
	if l.slots != nil {
		if err := l.slots.take(gc, l.done); err != nil {
			_ = c.Close()
			return nil, err
		}
	}
	if gc.sendTimeout > 0 {
		gc.born = time.Now()
	}
	if sc, ok := c.(syscall.Conn); ok {
		// Once per connection rather than per use: SyscallConn allocates.
		gc.raw, _ = sc.SyscallConn()
	}
	return gc, nil
}

// conn is a net.Conn whose reads feed its tracker. Writes go straight
// through, but for the one a handler announces with BodyFollows.
type conn struct {
	net.Conn
	t tracker
	// raw is the socket's, for writes net does not offer (MSG_MORE,
	// sendfile from an offset, progress seen per partial write); nil when
	// the connection has no socket.
	raw syscall.RawConn
	// more and unpushed: see BodyFollows. Only the goroutine that serves
	// the connection's requests touches them (net/http writes a response
	// from the handler's goroutine).
	more, unpushed bool
	// sendTimeout, born and rearm: see SendTimeout and arm. rearm is
	// when (on the monotonic clock, since born) arm next sets the write
	// deadline; arm moves it forward, and any other setting of the
	// deadline (SetWriteDeadline, SetDeadline: net/http lifts it after
	// every response) sets it back to 0, so that the next write arms.
	// Atomic: a handler may set a deadline (http.ResponseController)
	// from another goroutine than the one that writes.
	sendTimeout time.Duration
	born        time.Time
	rearm       atomic.Int64
	detached    atomic.Bool
	// slots, closed and reclaimableAt: see MaxConns. reclaimableAt is
	// when (on the slots' clock) MaxConns may close the connection to
	// make room: when it turned idle between two requests, or newGrace
	// after it was accepted; 0 while it is at work, reclaimed once
	// claimed.
	slots         *slots
	closed        atomic.Bool
	reclaimableAt atomic.Int64
}

func (c *conn) Write(p []byte) (int, error) {
	c.arm()
	if c.more {
		c.more = false
		if n, ok, err := c.writeMore(p); ok {
			c.unpushed = n > 0
			return n, err
		}
	}
	c.unpushed = false // a write without MSG_MORE pushes what was held
	if len(p) > steadyWrite && c.sending() {
		if n, ok, err := c.writeSteady(p); ok {
			return n, err
		}
	}
	return c.Conn.Write(p)
}

func (c *conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.t.feed(p[:n])
	}
	return n, err
}

// CloseWrite keeps net/http's graceful close (closeWriteAndWait) working
// as it does on a bare *net.TCPConn: half-close, linger, then close, so
// that unread request bytes are less likely to make the kernel reset the
// connection before the client has read the answer.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// ReadFrom keeps the sendfile/splice path of the underlying connection
// available to response writers (net/http's (*response).ReadFrom uses it
// only when the connection it holds is an io.ReaderFrom): a file body
// copied into a ResponseWriter goes out with sendfile
// (TestFileBodyReachesTheConnectionsReadFrom), and so does a FileRegion,
// which it sends itself from the region's offset
// (TestAFileRegionIsSentWithSendfileFromItsOffset). It only writes, so
// the tracker is not involved.
//
// Under a send timeout the connection sends files itself too (an
// *os.File, or an *io.LimitedReader of one: what bodystore's
// Follower.WriteTo hands over for each grown piece of a fill), with
// sendfile from the file's own offset as net does, so that every chunk
// of progress re-arms the deadline: a long sendfile to a steady reader is
// never cut, a stalled one ends within the timeout. Any other reader is
// copied through Write, which arms per write. Splice from a socket (a
// source no response of the sidecar has) is then not used.
func (c *conn) ReadFrom(r io.Reader) (n int64, err error) {
	sending := c.sending()
	if sending {
		c.arm()
	}
	handled := false
	if fr, ok := r.(FileRegion); ok {
		n, handled, err = c.sendRegion(fr, sending)
	} else if sending {
		n, handled, err = c.sendFile(r)
	}
	switch rf, ok := c.Conn.(io.ReaderFrom); {
	case handled:
	case sending:
		n, err = io.Copy(writerOnly{c}, r)
	case ok:
		n, err = rf.ReadFrom(r)
	default:
		n, err = io.Copy(writerOnly{c.Conn}, r)
	}
	if n > 0 {
		// The last sendfile chunk goes without MSG_MORE: pushed.
		c.unpushed = false
	}
	return n, err
}

// net/http looks for these on the connection it is given.
var (
	_ interface{ CloseWrite() error } = (*conn)(nil)
	_ io.ReaderFrom                   = (*conn)(nil)
)

// writerOnly hides every method but Write, so io.Copy cannot recurse into
// conn.ReadFrom.
// Close closes the listener; an Accept that waits for a slot (MaxConns)
// returns.
func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type writerOnly struct{ io.Writer }

type trackerKey struct{}

// ConnContext is meant for http.Server.ConnContext. It makes the
// connection's tracker available to Middleware; for a connection that did
// not come from Listener it returns ctx unchanged.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	gc, ok := c.(*conn)
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, trackerKey{}, gc)
}

func connFrom(ctx context.Context) *conn {
	c, _ := ctx.Value(trackerKey{}).(*conn)
	return c
}

// OpenedWithPreface reports whether the connection that carries the
// request with context ctx (from ConnContext) opened with the HTTP/2
// connection preface's first line and empty line ("PRI * HTTP/2.0", no
// header fields), which net/http hands to the handler as a request: the
// client speaks HTTP/2 with prior knowledge (h2c, gRPC), and what follows
// "SM" on the connection is HTTP/2 frames. A preface after other requests
// on the connection does not count.
func OpenedWithPreface(ctx context.Context) bool {
	c := connFrom(ctx)
	if c == nil {
		return false
	}
	c.t.mu.Lock()
	defer c.t.mu.Unlock()
	return c.t.opened
}

// Detach stops following the request framing of the connection that
// carries the request with context ctx (from ConnContext). Call it once a
// handler has hijacked the connection for another protocol (a WebSocket
// after 101 Switching Protocols): its bytes are no longer HTTP requests,
// and following them would only cost time. The connection is never handed
// back to net/http, so nothing is refused that could have been served.
//
// Detach also ends the send timeout (SendTimeout): the new protocol keeps
// its own time (the proxy's upgrade path closes a tunnel idle either
// way), and a peer of a WebSocket may rightly take nothing for longer.
// The write deadline is lifted (net/http's Hijack lifted it already), and
// no write arms it again.
func Detach(ctx context.Context) {
	c := connFrom(ctx)
	if c == nil {
		return
	}
	c.t.mu.Lock()
	c.t.die()
	c.t.mu.Unlock()
	if c.sendTimeout > 0 && !c.detached.Swap(true) {
		_ = c.Conn.SetWriteDeadline(time.Time{})
	}
}
