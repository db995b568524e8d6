package connguard

import "time"

// DefaultSendTimeout is nginx's send_timeout default: a client that takes
// no byte of a response for this long is closed.
const DefaultSendTimeout = 60 * time.Second

// An Option configures Listener.
type Option func(*listener)

// SendTimeout closes a connection whose client takes no byte of what the
// server writes to it for d: nginx's send_timeout, Varnish's
// idle_send_timeout. It bounds the time between two successive pieces of
// progress, never the whole response, so a 1 GiB body to a slow but
// steady reader is served however long it takes, while one that stops
// reading holds its connection, its goroutine and (for a file body) its
// descriptor for d at most. http.Server.WriteTimeout, which bounds the
// whole response, is the wrong tool for a cache; do not combine the two
// (the send timeout replaces the write deadline at its next arming).
//
// d <= 0 means none, the default. The bound is a write deadline, armed
// before each write operation (Write, the header sent with MSG_MORE,
// ReadFrom) and re-armed after every partial write or sendfile that made
// progress: see arm for its precision. A connection handed to Detach
// (hijacked for another protocol) is not armed any more.
func SendTimeout(d time.Duration) Option {
	return func(l *listener) { l.sendTimeout = max(d, 0) }
}

// armSlack is the fraction of the send timeout by which arm may be
// late: it re-arms at most once per timeout/armSlack.
const armSlack = 8

// sending reports whether c's writes are bounded by the send timeout.
func (c *conn) sending() bool {
	return c.sendTimeout > 0 && !c.detached.Load()
}

// arm sets the write deadline for the write operation that is about to
// happen, or has just made progress. Setting a deadline is a runtime
// timer update per call; so that a keep-alive connection answering many
// small hits does not pay it per write, arm sets the deadline to now +
// timeout + slack (slack = timeout/8) and skips re-arming while its last
// arming is younger than slack. Whenever it skips, the deadline it set
// is still more than timeout away, unless someone else set the deadline
// since: net/http lifts it after every response (and at Hijack), which
// SetWriteDeadline and SetDeadline record, so that the next response's
// first write arms again. So a client that stops reading is closed
// after between timeout and timeout + slack (60 s to 67.5 s by
// default). One time.Now per call, none when the send timeout does not
// apply.
func (c *conn) arm() {
	if !c.sending() {
		return
	}
	now := time.Now()
	at := int64(now.Sub(c.born)) // monotonic: a step of the wall clock does not matter
	if at < c.rearm.Load() {
		return
	}
	slack := c.sendTimeout / armSlack
	c.rearm.Store(at + int64(slack))
	_ = c.Conn.SetWriteDeadline(now.Add(c.sendTimeout + slack))
}

// SetWriteDeadline sets the connection's write deadline, which replaces
// the send timeout's until the next write arms it again (see arm).
func (c *conn) SetWriteDeadline(t time.Time) error {
	err := c.Conn.SetWriteDeadline(t)
	c.rearm.Store(0)
	return err
}

// SetDeadline sets both deadlines; as for SetWriteDeadline, the next
// write arms the send timeout again.
func (c *conn) SetDeadline(t time.Time) error {
	err := c.Conn.SetDeadline(t)
	c.rearm.Store(0)
	return err
}
