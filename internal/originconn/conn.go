// Package originconn keeps the sidecar from reusing a connection to its
// origin after the origin sent bytes past the end of a response: more
// body than its Content-Length, anything after a chunked body's end, or
// bytes while no request is outstanding.
//
// net/http's Transport reads a response up to the end its framing gives
// and then puts the connection back in its idle pool; bytes that follow
// stay in its read buffer and become the response to whichever request
// uses the connection next. The Transport closes a connection that sends
// bytes while it sits idle, but only once its read loop gets to look:
// under load a request that waits for a connection is handed this one at
// once, and the origin's excess bytes (a whole forged response, say) are
// its answer: response splitting, and a cache stores it for everyone.
//
// Dialer wraps each origin connection in a Conn that follows where each
// response ends as net/http reads it (status line and header block,
// interim 1xx responses, Content-Length, chunked coding and trailers, no
// body for HEAD, 204 and 304; framer.go). A read that brings bytes past
// the end of a response hands the Transport only the response and ends
// with io.EOF, so the Transport reads the response to its end and then
// finds the connection closed: it never reuses it. So does a read that
// ends exactly at a response's end when more bytes are already waiting on
// the socket, and a read of bytes nobody asked for. Where the Conn cannot
// follow the framing (anything net/http refuses, a body delimited by the
// close, a protocol switch) it passes the bytes through unchanged; when
// net/http might reuse such a connection, its next request is refused
// before a byte is written (net/http retries an idempotent request on a
// new connection).
//
// What this cannot catch: excess bytes that arrive after the connection
// carried its next request are, on HTTP/1.1, indistinguishable from that
// request's response.
package originconn

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
)

// ErrNotReusable is what a write on a connection that carried bad framing
// returns: the request is not sent on it.
var ErrNotReusable = errors.New("originconn: the origin sent bytes past a response on this connection; it is not reused")

// Dialer dials origin connections wrapped in Conns.
type Dialer struct {
	// Dialer dials the TCP connections.
	Dialer *net.Dialer
	// TLS configures connections to an https origin; nil: defaults, with
	// the server name taken from the address.
	TLS *tls.Config
}

// DialContext is for http.Transport.DialContext.
func (d *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return newConn(c), nil
}

// DialTLSContext is for http.Transport.DialTLSContext: the Conn follows
// the framing above TLS. The connection speaks HTTP/1.1 only (no ALPN),
// as the proxy's transport does anyway.
func (d *Dialer) DialTLSContext(ctx context.Context, network, addr string) (net.Conn, error) {
	raw, err := d.Dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{}
	if d.TLS != nil {
		cfg = d.TLS.Clone()
	}
	if cfg.ServerName == "" {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			host = addr
		}
		cfg.ServerName = host
	}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		_ = raw.Close()
		return nil, err
	}
	return newConn(tc), nil
}

// Conn is an origin connection whose response framing is followed.
type Conn struct {
	net.Conn

	mu sync.Mutex
	f  framer
	// requested: a request began since the last exchange ended.
	requested bool
	// spent: the origin sent bytes past a response; reads return
	// io.EOF and writes ErrNotReusable.
	spent bool
	// waiting reports bytes already on the socket, without blocking; nil
	// when the connection does not tell (pending_unix.go).
	waiting func() bool
}

func newConn(c net.Conn) *Conn {
	return &Conn{Conn: c, waiting: waitingOn(c)}
}

// Read reads from the origin, handing out no byte past the end of a
// response (see the package comment).
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	spent, through := c.spent, c.f.passthrough()
	c.mu.Unlock()
	if spent {
		return 0, io.EOF
	}
	if through {
		return c.Conn.Read(p)
	}
	n, err := c.Conn.Read(p)
	if n == 0 {
		return n, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f.st == fsIdle && !c.requested {
		// Nobody asked: bytes past the last response.
		c.spent = true
		return 0, io.EOF
	}
	k, done := c.f.feed(p[:n])
	if !done {
		return n, err
	}
	c.requested = false
	if k < n || c.waiting != nil && c.waiting() {
		c.spent = true
		return k, io.EOF
	}
	return n, err
}

// Write writes a request (or its body) to the origin. The first write
// after an exchange ended begins the next request; on a connection that
// carried bad framing, or whose framing the Conn lost, it is refused
// before anything is written.
func (c *Conn) Write(p []byte) (int, error) {
	c.mu.Lock()
	switch {
	case c.f.st == fsTunnel || c.f.st == fsUntilClose:
		// A tunnel's bytes, or a request body still going out while a
		// response without length comes back (net/http does not reuse
		// the connection).
	case c.spent || c.f.st == fsLost:
		c.mu.Unlock()
		return 0, ErrNotReusable
	case c.f.st == fsIdle && !c.requested:
		c.requested = true
		c.f.begin(len(p) >= 5 && string(p[:5]) == "HEAD ")
	}
	c.mu.Unlock()
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection when it can (net/http uses it
// when a request body fails).
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
