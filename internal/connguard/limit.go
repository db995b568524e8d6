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
// waited longest for a request: a keep-alive connection idle between two
// requests, or a new one that has sent no request within newGrace (1 s)
// of being accepted (both told by net/http through ConnState, which the
// server must be given). nginx reclaims its reusable connections the same
// way, a new one waiting for its first request included
// (ngx_http_init_connection): a client kept waiting while another holds a
// connection it does not use would be the worse trade, and silent
// connections, renewed as the header timeout closes them, would otherwise
// keep every new client out. With none to close, Accept waits until a
// connection closes or turns idle, or a new one has been silent for
// newGrace; the clients behind it wait in the listen backlog, and the
// connections at work (a request in flight, a stream, a large download)
// are never cut for a newcomer.
//
// Closing a waiting connection races with a request that is just
// arriving on it, as it does in nginx: the client sees the connection
// closed before any answer, which HTTP clients retry on a fresh one (one
// whose new connection closes gets an error instead, hence the grace).
// Such a request is never served, even when net/http has read it whole
// (or had it pipelined behind the last one) by the time of the close:
// Middleware aborts it, so a retry never repeats what was done. A
// connection turns active only once its request header is read whole, so
// one that sends its header slowly can be closed too.
//
// m (may be nil) is told of each of these.
func MaxConns(n int, m ConnMeter) Option {
	return func(l *listener) {
		if n <= 0 {
			l.slots = nil
			return
		}
		l.slots = &slots{max: n, m: m, epoch: time.Now(), free: make(chan struct{}, 1), conns: make(map[*conn]struct{}, min(n, 1024))}
	}
}

// ConnState is meant for http.Server.ConnState: it tells MaxConns which
// connections it may close to make room, the ones waiting for a request:
// a keep-alive one between two requests, and a new one that has not sent
// its first request within newGrace of being accepted. For a connection
// that did not come from a Listener with MaxConns it does nothing. It is
// called twice per request, so it takes no lock and allocates nothing: an
// atomic load and compare-and-swap, and a monotonic clock read when the
// connection turns idle.
func ConnState(c net.Conn, st http.ConnState) {
	gc, ok := c.(*conn)
	if !ok || gc.slots == nil {
		return
	}
	var at int64 // 0: not reclaimable (at work, hijacked, closed)
	switch st {
	case http.StateIdle:
		at = gc.slots.now()
	case http.StateNew:
		at = gc.slots.now() + int64(newGrace)
	}
	for {
		v := gc.reclaimableAt.Load()
		if v == reclaimed {
			// Claimed by Accept, closed or about to be: a request read
			// meanwhile must not be served (Middleware), nor the
			// connection look idle or active again.
			return
		}
		if gc.reclaimableAt.CompareAndSwap(v, at) {
			break
		}
	}
	if st == http.StateIdle {
		// A connection that turns idle wakes an Accept that waits for a
		// slot: it may close it. (A new one is marked by the goroutine
		// that accepted it, which is not waiting meanwhile.)
		gc.slots.poke()
	}
}

// newGrace is how long a new connection may take to send its first
// request before MaxConns may close it to make room: far more than a
// client that connects to send a request needs, far less than the header
// timeout (10 s in the sidecar) that silent connections would otherwise
// hold their slots for. Without it, under load (every other slot at
// work), each connection accepted would close the one accepted just
// before it, whose request was on its way.
const newGrace = time.Second

// reclaimed is the reclaimableAt of a connection Accept claimed to close
// to make room. It is final: whatever net/http read on the connection
// before the close (a request that had just arrived, or one pipelined
// behind the last) is never handed to a handler (Middleware aborts it),
// so its client sees the connection closed before any answer, never a
// request served whose answer it could not get.
const reclaimed = -1

// slots counts the open connections of one listener.
type slots struct {
	max   int
	m     ConnMeter
	epoch time.Time     // reclaimableAt counts from it, on the monotonic clock
	free  chan struct{} // a token when a slot is given back or a connection turns idle (Accept waits on it)

	mu    sync.Mutex
	conns map[*conn]struct{} // the open ones
}

// now is the time on the slots' clock: nanoseconds since epoch, plus 1
// so that it is never 0 (not reclaimable).
func (s *slots) now() int64 { return int64(time.Since(s.epoch)) + 1 }

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
		idle, next := s.longestIdle()
		if idle != nil {
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
		// Wait for a connection to close or turn idle, or for a new one
		// to have been silent for newGrace (nothing pokes then).
		var grace *time.Timer
		var graceC <-chan time.Time
		if next > 0 {
			grace = time.NewTimer(next)
			graceC = grace.C
		}
		select {
		case <-s.free:
		case <-graceC:
		case <-done:
			if grace != nil {
				grace.Stop()
			}
			return net.ErrClosed
		}
		if grace != nil {
			grace.Stop()
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

// longestIdle claims the connection that has been reclaimable longest, if
// any (s.mu held): a scan, which only a full listener pays. A connection
// that turns active meanwhile is not claimed; one claimed is marked
// reclaimed, in the same compare-and-swap, so that it cannot turn active
// after. With none to claim, next is how soon a new connection will be
// (0: none will be by itself).
func (s *slots) longestIdle() (claimed *conn, next time.Duration) {
	for {
		now := s.now()
		var oldest *conn
		var at, soonest int64
		for c := range s.conns {
			t := c.reclaimableAt.Load()
			switch {
			case t <= 0: // at work, or claimed already
			case t > now: // a new connection within its grace
				if soonest == 0 || t < soonest {
					soonest = t
				}
			case oldest == nil || t < at:
				oldest, at = c, t
			}
		}
		if oldest == nil {
			if soonest > 0 {
				return nil, time.Duration(soonest - now)
			}
			return nil, 0
		}
		if oldest.reclaimableAt.CompareAndSwap(at, reclaimed) {
			return oldest, 0
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
