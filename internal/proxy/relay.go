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
// The handler reads the origin into a ring of up to ResponseBufferSize
// bytes; a goroutine of the response's own writes what the ring holds to
// the client as fast as the client takes it, a piece (writePiece) at a
// time, flushing each, so a stream (a long poll, chunked JSON lines)
// reaches its client as it comes. The ring is made of pieces of
// writePiece bytes, taken as the origin's bytes need them and given back
// as the client takes them, as nginx allocates its proxy_buffers: a
// response's first piece is its copy buffer (what it read with in step,
// outside the budget), the others come from the sidecar-wide budget
// (ResponseBufferBudget). So a stream whose client keeps up holds about
// one piece while it waits for its next event, and idle streams do not
// spend the read-ahead of others; past the budget a response still has
// its own piece ahead of its client. When the ring is full (or no piece
// can be had) the handler waits for the client to take a piece before it
// reads on, as it waited for each write before: a slow but steady client
// that takes a piece within origin.idleTimeout keeps the origin's body
// moving, one that takes nothing still has it cut. A body that comes in
// one read is written in step, with no ring and no goroutine.
//
// The handler owns the goroutine: relayAhead returns only once the
// goroutine has written all the ring holds (a client that stops reading
// is bounded by the send timeout) or the client is gone, and on a panic
// its deferred stop cuts the goroutine's write with an immediate write
// deadline and waits for it, since net/http hands the connection's
// buffered writer to others once the handler has returned. Written by
// hand (a single-producer, single-consumer ring over two token
// channels): clientWriter (fillclient.go) writes a fill's growing body,
// not a bounded queue, and nothing in the standard library relays a
// stream through a bounded buffer between two goroutines without copying
// it twice.

// ResponseBufferSize is the most of one response read ahead of its
// client: the size of its ring when full.
const ResponseBufferSize = 512 << 10

// ResponseBufferBudget bounds the pieces of the rings of every response
// of the sidecar at once, beyond each response's first: 32 full rings, or
// 512 streams each waiting with a piece of it; past it, responses have
// their first piece only. It is apart from
// the request bodies' budget (RequestBufferBudget), so that slow readers
// cannot take buffering away from uploads nor the other way round; both
// are part of what tierconfig.MemoryAllowance allows above L1.
const ResponseBufferBudget = 16 << 20

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
	if err != nil {
		// The whole body came in one read: the origin is done with it
		// whatever the client does. In step.
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
		return total, err
	}
	r := &ring{own: bp, budget: p.respBudget, pieces: &p.bufs, w: w, rc: http.NewResponseController(w),
		filled: make(chan struct{}, 1), freed: make(chan struct{}, 1), done: make(chan struct{})}
	// The first piece is the copy buffer, which holds what was read.
	r.slots[0].Store(bp)
	r.placed = 1
	r.tail.Store(int64(n))
	defer r.free()
	defer r.stop()
	go r.run()
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
			return r.end(), nil
		}
		if err != nil {
			return r.end(), err
		}
	}
	return r.end(), nil
}

// ring is one response's read-ahead: the handler (producer) reads the
// origin into the ring at tail, the goroutine (consumer) writes it to the
// client from head; both count bytes from the start, so tail-head is what
// the ring holds. Byte i lives in piece i/writePiece, held by slot
// (i/writePiece) mod ringSlots while it has bytes the client has not
// taken: the handler puts a piece in a slot when tail enters it, the
// goroutine takes it out and gives it back once it has written its end.
type ring struct {
	slots [ringSlots]atomic.Pointer[[]byte]
	// placed (the handler's): pieces put in slots so far.
	placed int64
	// own is the response's copy buffer, its piece outside the budget;
	// ownFree: it is in no slot.
	own     *[]byte
	ownFree atomic.Bool
	budget  *byteBudget
	pieces  *sync.Pool // of *[]byte of writePiece bytes, as own

	w  http.ResponseWriter
	rc *http.ResponseController

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

// ringSlots is how many pieces a ring holds at most.
const ringSlots = ResponseBufferSize / writePiece

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// room is the free part of the piece at tail, after tail; none when tail
// needs a new piece and its slot still holds the piece of a ring ago (the
// ring is full) or no piece can be had (own is in use and the budget
// spent): the client must take some first.
func (r *ring) room() []byte {
	tail := r.tail.Load()
	k := tail / writePiece
	slot := &r.slots[k%ringSlots]
	if k >= r.placed {
		if slot.Load() != nil {
			return nil
		}
		b := r.grab()
		if b == nil {
			return nil
		}
		slot.Store(b)
		r.placed = k + 1
	}
	return (*slot.Load())[tail%writePiece:]
}

// grab returns a piece for the ring: own if free, else one of the
// budget's; nil when neither can be had.
func (r *ring) grab() *[]byte {
	if r.ownFree.CompareAndSwap(true, false) {
		return r.own
	}
	if r.budget.take(writePiece) {
		return r.pieces.Get().(*[]byte)
	}
	return nil
}

// release gives back a piece the ring no longer holds.
func (r *ring) release(b *[]byte) {
	if b == r.own {
		r.ownFree.Store(true)
		return
	}
	r.pieces.Put(b)
	r.budget.give(writePiece)
}

// wait waits until the goroutine has written some of what the ring
// holds.
func (r *ring) wait() {
	select {
	case <-r.freed:
	case <-r.done:
	}
}

func (r *ring) run() {
	defer close(r.done)
	for {
		head, tail := r.head.Load(), r.tail.Load()
		if head == tail {
			if r.closed.Load() && r.tail.Load() == head {
				return
			}
			<-r.filled
			continue
		}
		// At most a piece at a time (writePiece): the handler reads on as
		// soon as the client took one.
		k := head / writePiece
		slot := &r.slots[k%ringSlots]
		b := slot.Load()
		end := min(tail, (k+1)*writePiece)
		if !r.failed.Load() {
			n, err := r.w.Write((*b)[head%writePiece : end-k*writePiece])
			r.n += int64(n)
			if err != nil {
				r.failed.Store(true)
			} else {
				_ = r.rc.Flush()
			}
		}
		if end == (k+1)*writePiece {
			slot.Store(nil)
			r.release(b)
		}
		r.head.Store(end)
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

// stop is relayAhead's last word but free on every way out (deferred):
// after end it does nothing; on a panic it cuts the goroutine's write in
// progress with an immediate write deadline, lets it drop what the ring
// holds, and waits for it.
func (r *ring) stop() {
	if r.ended {
		return
	}
	r.failed.Store(true)
	_ = r.rc.SetWriteDeadline(time.Now())
	r.end()
}

// free gives back the pieces the ring still holds once the goroutine has
// returned: the one tail was in, part written.
func (r *ring) free() {
	for i := range r.slots {
		if b := r.slots[i].Swap(nil); b != nil {
			r.release(b)
		}
	}
}
