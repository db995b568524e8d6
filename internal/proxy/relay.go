package proxy

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Response buffering, as nginx's proxy_buffering: a response that is not
// stored (passed, uncacheable, too large for the tier) is read from the
// origin ahead of its client, up to ResponseBufferSize of it, so that a
// client on a slow link holds the sidecar's memory, not the origin's
// connection nor the application worker that writes the response.
// Thread-per-request servers (Gunicorn's and Unicorn's sync workers)
// rely on the proxy in front of them for this as for request bodies
// (reqbuffer.go): the kernel's socket buffers hold a little of a
// response, and the worker waits on a slow client for the rest.
//
// The handler reads the origin into a ring of ResponseBufferSize bytes;
// a goroutine of the response's own writes what the ring holds to the
// client as fast as the client takes it, flushing each write, so a
// stream (Server-Sent Events, a long poll) reaches its client as it
// comes, and small writes of the origin cost no more room than their
// bytes. When the ring is full the handler waits for the client to take
// a piece (writePiece) before it reads on, as it waited for each write
// before: a slow but steady client that takes a piece within
// origin.idleTimeout keeps the origin's body moving, one that takes
// nothing still has it cut. A body that comes in one read is written in
// step, with no ring and no goroutine; when the sidecar-wide budget
// (ResponseBufferBudget) cannot give a ring, the response goes at its
// client's pace, as without buffering.
//
// The handler owns the goroutine: relayAhead returns only once the
// goroutine has written all the ring holds (a client that stops reading
// is bounded by the send timeout) or the client is gone, and on a panic
// its deferred stop cuts the goroutine's write and waits for it, since
// net/http hands the connection's buffered writer to others once the
// handler has returned. Written by hand (a single-producer,
// single-consumer ring over two token channels): clientWriter
// (fillclient.go) writes a fill's growing body, not a bounded queue, and
// nothing in the standard library relays a stream through a bounded
// buffer between two goroutines without copying it twice.

// ResponseBufferSize is the most of one response read ahead of its
// client: the size of its ring.
const ResponseBufferSize = 512 << 10

// ResponseBufferBudget bounds the rings of every response of the sidecar
// at once: 32 responses read ahead of slow clients spend it, and further
// ones go at their clients' pace, as without buffering. It is apart from
// the request bodies' budget (RequestBufferBudget), so that slow readers
// cannot take buffering away from uploads nor the other way round; both
// are part of what tierconfig.MemoryAllowance allows above L1.
const ResponseBufferBudget = 16 << 20

// rings keeps the rings of finished responses for the next ones.
var rings = sync.Pool{New: func() any { b := make([]byte, ResponseBufferSize); return &b }}

// relayAhead copies body, the origin's response's resp, to w as streamN
// does, reading ahead of the client up to ResponseBufferSize. It returns
// the bytes w took and the origin's read error (nil at the body's end,
// and when the client is gone: there is nothing more to do). A
// Server-Sent Events stream is not read ahead: its origin is slower than
// any client by nature, and a ring would sit idle for the stream's life.
func (p *Proxy) relayAhead(w http.ResponseWriter, resp *http.Response, body io.Reader) (int64, error) {
	if isEventStream(resp.Header) {
		return p.streamN(w, body)
	}
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	var n int
	var err error
	for n == 0 && err == nil {
		n, err = body.Read(*bp)
	}
	if err != nil || !p.respBudget.take(ResponseBufferSize) {
		// The whole body came in one read (the origin is done with it
		// whatever the client does), or every ring is taken: in step.
		var total int64
		if n > 0 {
			k, werr := w.Write((*bp)[:n])
			total = int64(k)
			if werr != nil {
				return total, nil // the client left
			}
			_ = http.NewResponseController(w).Flush()
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
		k, err := p.streamN(w, body)
		return total + k, err
	}
	defer p.respBudget.give(ResponseBufferSize)
	rp := rings.Get().(*[]byte)
	defer rings.Put(rp)
	r := &ring{buf: *rp, w: w, rc: http.NewResponseController(w),
		filled: make(chan struct{}, 1), freed: make(chan struct{}, 1), done: make(chan struct{})}
	r.tail.Store(int64(copy(r.buf, (*bp)[:n])))
	defer r.stop()
	go r.run()
	var total int64
	for !r.failed.Load() {
		room := r.room()
		if len(room) == 0 {
			r.wait()
			continue
		}
		n, err := body.Read(room)
		if n > 0 {
			r.tail.Add(int64(n))
			poke(r.filled)
		}
		if err == io.EOF {
			return total + r.end(), nil
		}
		if err != nil {
			return total + r.end(), err
		}
	}
	return total + r.end(), nil
}

// ring is one response's read-ahead: the handler (producer) reads the
// origin into buf at tail, the goroutine (consumer) writes it to the
// client from head; both count bytes from the start, so tail-head is
// what the ring holds.
type ring struct {
	buf []byte
	w   http.ResponseWriter
	rc  *http.ResponseController

	head, tail atomic.Int64
	// filled: the handler added bytes, or closed; freed: the goroutine
	// wrote some. Each holds at most one token: a token left from an
	// earlier time only makes its waiter look again.
	filled, freed chan struct{}
	closed        atomic.Bool // the handler adds nothing more
	failed        atomic.Bool // a write to the client failed: it is gone
	done          chan struct{}
	n             int64 // bytes the client took; the goroutine's until done
	ended         bool  // end ran (the handler's)
}

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// room is the free part of the ring after tail, up to the ring's end.
func (r *ring) room() []byte {
	size := int64(len(r.buf))
	tail := r.tail.Load()
	free := size - (tail - r.head.Load())
	at := tail % size
	return r.buf[at : at+min(free, size-at)]
}

// wait waits until the goroutine has written some of what the ring
// holds (or the client is gone).
func (r *ring) wait() {
	select {
	case <-r.freed:
	case <-r.done:
	}
}

func (r *ring) run() {
	defer close(r.done)
	size := int64(len(r.buf))
	for {
		head, tail := r.head.Load(), r.tail.Load()
		if head == tail {
			if r.closed.Load() && r.tail.Load() == head {
				return
			}
			<-r.filled
			continue
		}
		// At most writePiece at a time: the handler reads on as soon as
		// the client took a piece.
		at := head % size
		chunk := r.buf[at : at+min(tail-head, size-at, writePiece)]
		if !r.failed.Load() {
			k, err := r.w.Write(chunk)
			r.n += int64(k)
			if err != nil {
				r.failed.Store(true)
			} else {
				_ = r.rc.Flush()
			}
		}
		r.head.Add(int64(len(chunk)))
		poke(r.freed)
	}
}

// end lets the goroutine write what the ring holds, waits for it, and
// returns the bytes the client took.
func (r *ring) end() int64 {
	if !r.ended {
		r.ended = true
		r.closed.Store(true)
		poke(r.filled)
		<-r.done
	}
	return r.n
}

// stop is relayAhead's last word on every way out (deferred): after end
// it does nothing; on a panic it cuts the goroutine's write in progress
// with an immediate write deadline, lets it drop what the ring holds,
// and waits for it.
func (r *ring) stop() {
	if r.ended {
		return
	}
	r.failed.Store(true)
	_ = r.rc.SetWriteDeadline(time.Now())
	r.end()
}
