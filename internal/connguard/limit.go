package connguard

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// DefaultMaxConns is the default bound of MaxConns.
const DefaultMaxConns = 10000

// ConnMeter is told how the connections MaxConns bounds come and go. The
// sidecar's metrics implement it.
type ConnMeter interface {
	// ConnOpened and ConnClosed: a connection took a slot, and gave it back.
	ConnOpened()
	ConnClosed()
	// ConnReclaimed: an idle keep-alive connection was closed to make room.
	ConnReclaimed()
	// ConnWaited: an accepted connection waited for a slot.
	ConnWaited()
}

// MaxConns bounds the client connections open at once to n (n <= 0: no
// bound), as nginx's worker_connections does: past the bound, a goroutine,
// two buffers and a descriptor per connection would grow until the
// container is killed for its memory, taking every client of the pod with
// it. A connection holds its slot from Accept to Close, hijacked
// (WebSocket) ones included.
//
// When every slot is taken, Accept first closes the connection that has
// been idle longest between two requests (a keep-alive connection: net/http
// tells it through ConnState, which the server must be given), as nginx
// reclaims its reusable connections: a client kept waiting while another
// holds a connection it does not use would be the worse trade. With no
// idle connection to close, Accept waits until a connection closes; the
// clients behind it wait in the listen backlog, and the connections at
// work (a stream, a large download, a request in flight) are never cut
// for a newcomer. Closing an idle connection races with a request that is
// just arriving on it, as it does in nginx: the client sees the connection
// closed before any answer, which HTTP clients retry on a fresh one. Such
// a request is never served, even when net/http has read it whole (or had
// it pipelined behind the last one) by the time of the close: Middleware
// aborts it, so a retry never repeats what was done.
//
// m (may be nil) is told of each of these.
func MaxConns(n int, m ConnMeter) Option {
	return func(l *listener) {
		if n <= 0 {
			l.slots = nil
			return
		}
		l.slots = &slots{max: n, m: m, free: make(chan struct{}, 1), conns: make(map[*conn]struct{}, min(n, 1024))}
	}
}

// ConnState is meant for http.Server.ConnState: it tells MaxConns which
// connections are idle between two requests, the ones it may close to
// make room. For a connection that did not come from a
// Listener with MaxConns it does nothing. It is called twice per request,
// so it takes no lock and allocates nothing: an atomic load and
// compare-and-swap (and a clock read when the connection turns idle).
func ConnState(c net.Conn, st http.ConnState) {
	gc, ok := c.(*conn)
	if !ok || gc.slots == nil {
		return
	}
	var since int64
	if st == http.StateIdle {
		since = time.Now().UnixNano()
	}
	for {
		v := gc.idleSince.Load()
		if v == reclaimed {
			// Claimed by Accept, closed or about to be: a request read
			// meanwhile must not be served (Middleware), nor the
			// connection look idle or active again.
			return
		}
		if gc.idleSince.CompareAndSwap(v, since) {
			break
		}
	}
	if st == http.StateIdle {
		// A connection that turns idle wakes an Accept that waits for a
		// slot: it may close it.
		gc.slots.poke()
	}
}

// reclaimed is the idleSince of a connection Accept claimed to close to
// make room. It is final: whatever net/http read on the connection
// before the close (a request that had just arrived, or one pipelined
// behind the last) is never handed to a handler (Middleware aborts it),
// so its client sees the connection closed before any answer, never a
// request served whose answer it could not get.
const reclaimed = -1

// slots counts the open connections of one listener.
type slots struct {
	max  int
	m    ConnMeter
	free chan struct{} // a token when a slot is given back or a connection turns idle (Accept waits on it)

	mu    sync.Mutex
	conns map[*conn]struct{} // the open ones
}

func (s *slots) poke() {
	select {
	case s.free <- struct{}{}:
	default:
	}
}

// take waits for a slot for a connection just accepted, closing idle
// connections to make one; it fails only when done is closed (the
// listener was).
func (s *slots) take(c *conn, done <-chan struct{}) error {
	waited := false
	s.mu.Lock()
	for len(s.conns) >= s.max {
		if idle := s.longestIdle(); idle != nil {
			s.mu.Unlock()
			if s.m != nil {
				s.m.ConnReclaimed()
			}
			_ = idle.Close() // gives its slot back
			s.mu.Lock()
			continue
		}
		s.mu.Unlock()
		if !waited && s.m != nil {
			s.m.ConnWaited()
		}
		waited = true
		select {
		case <-s.free:
		case <-done:
			return net.ErrClosed
		}
		s.mu.Lock()
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	if s.m != nil {
		s.m.ConnOpened()
	}
	return nil
}

// longestIdle claims the connection idle longest, if any (s.mu held): a
// scan, which only a full listener pays. A connection that turns active
// meanwhile is not claimed; one claimed is marked reclaimed, in the same
// compare-and-swap, so that it cannot turn active after.
func (s *slots) longestIdle() *conn {
	for {
		var oldest *conn
		var since int64
		for c := range s.conns {
			if t := c.idleSince.Load(); t > 0 && (oldest == nil || t < since) {
				oldest, since = c, t
			}
		}
		if oldest == nil || oldest.idleSince.CompareAndSwap(since, reclaimed) {
			return oldest
		}
	}
}

// give is a connection's Close giving its slot back (once).
func (s *slots) give(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	if s.m != nil {
		s.m.ConnClosed()
	}
	s.poke()
}

// Close closes the connection and gives its slot back.
func (c *conn) Close() error {
	err := c.Conn.Close()
	if c.slots != nil && c.closed.CompareAndSwap(false, true) {
		c.slots.give(c)
	}
	return err
}
