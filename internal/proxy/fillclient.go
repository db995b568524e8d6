package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// clientWriter sends the body of an in-memory fill (tee) to the client
// that started it. While the fill collects the body for the cache, the
// client is written from the collected bytes on a goroutine of its own,
// so a client slower than the origin (one that stops reading, or reads
// through a tiny window) never paces the fill: the origin's body is read
// at the origin's pace, stored and handed to the flight's waiters, and
// the watchdog never cuts the origin for the client's sake. This is what
// fillfeed.go does for file fills and what nginx does with its buffers;
// it costs no memory the fill does not collect anyway (the body, at most
// the entry limit), and a goroutine only when the body comes in more than
// one read. A slow client keeps that body until it has read it or the
// send timeout closes it, as a slow client of a hit keeps its copy of the
// entry: about 1x the body per slow client (1.25x for a body of unknown
// length, grown by append), measured with 40 stalled clients of 1000 KiB
// bodies; before, a stalled fill held as much for a body of known length
// (allocated from its Content-Length) and little for one of unknown
// length. Once the fill stops collecting (too large, too late: its
// waiters have been let go), there is nothing to write from but the read
// buffer: the goroutine catches up and the fill writes to the client in
// step again, as for any response that is not stored.
//
// While the fill waits for the client to catch up it reads nothing from
// the origin: each piece the client takes meanwhile counts as the
// exchange moving (took, the watchdog's clientTook), as each read did when
// the two went in step, so that a slow but steady client is not cut by
// origin.idleTimeout for the time it takes to catch up (up to the entry
// limit), while one that takes nothing still is.
//
// The fill owns the goroutine: every path out of it calls end, which
// waits for the client to have been written all it is due (a client that
// stops reading is bounded by the send timeout) before the handler
// returns, and defers stop, which on a way out that skipped end (a panic)
// cuts the goroutine's write and waits for it: once the handler has
// returned, net/http hands the connection's buffered writer to other
// connections. A nil *clientWriter is no client: a background refresh, or a
// 304 to the client's own validators.
type clientWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
	// took is called after each piece the goroutine wrote while the fill
	// waits for it (closing).
	took func()
	// n counts the bytes w took, and sent those of src written or skipped;
	// both belong to the goroutine while it runs, else to the fill.
	n, sent int
	// failed: a write to w failed; the client is gone.
	failed atomic.Bool

	mu      sync.Mutex
	src     []byte // the collected body, all of it due to the client
	closing bool   // the goroutine is to return once src is written

	wake chan struct{} // a token: src or closing changed
	done chan struct{} // closed when the goroutine returns; nil while none runs
}

// writePiece is the most the goroutine hands w at once: the size of the
// fill's read buffer, what it wrote at a time in step.
const writePiece = 32 << 10

func newClientWriter(w http.ResponseWriter, took func()) *clientWriter {
	if w == nil {
		return nil
	}
	return &clientWriter{w: w, rc: http.NewResponseController(w), took: took}
}

// left reports that there is nobody to write to: no client, or it is gone.
func (cw *clientWriter) left() bool {
	return cw == nil || cw.failed.Load()
}

// stream makes all of data due to the client and returns at once. data
// grows by appends only (its bytes, once written, never change), and its
// first bytes are those stream was last given.
func (cw *clientWriter) stream(data []byte) {
	if cw.left() {
		return
	}
	cw.mu.Lock()
	cw.src = data
	cw.mu.Unlock()
	if cw.done == nil {
		cw.wake = make(chan struct{}, 1)
		cw.done = make(chan struct{})
		go cw.run()
		return
	}
	cw.poke()
}

func (cw *clientWriter) poke() {
	select {
	case cw.wake <- struct{}{}:
	default:
	}
}

func (cw *clientWriter) run() {
	defer close(cw.done)
	for {
		cw.mu.Lock()
		src, closing := cw.src, cw.closing
		cw.mu.Unlock()
		if cw.sent < len(src) {
			end := min(len(src), cw.sent+writePiece)
			if !cw.failed.Load() {
				cw.put(src[cw.sent:end])
				if cw.took != nil && cw.waited() {
					cw.took()
				}
			}
			cw.sent = end
			continue
		}
		if closing {
			return
		}
		<-cw.wake
	}
}

// waited reports that the fill waits for the goroutine (catchUp).
func (cw *clientWriter) waited() bool {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.closing
}

func (cw *clientWriter) put(b []byte) {
	k, err := cw.w.Write(b)
	cw.n += k
	if err != nil {
		cw.failed.Store(true)
		return
	}
	_ = cw.rc.Flush()
}

// catchUp waits until the client has been written all that stream made
// due (or is gone), and the goroutine has returned.
func (cw *clientWriter) catchUp() {
	if cw == nil || cw.done == nil {
		return
	}
	cw.mu.Lock()
	cw.closing = true
	cw.mu.Unlock()
	cw.poke()
	<-cw.done
	cw.done, cw.closing = nil, false
}

// write sends b to the client after all that is due, in step: it returns
// once w took b. b is the caller's again then.
func (cw *clientWriter) write(b []byte) {
	cw.catchUp()
	if cw.left() {
		return
	}
	cw.put(b)
}

// stop is the fill's last word on every way out (deferred): after end it
// does nothing; on a way that skipped end (a panic, after which the
// connection is given up) the goroutine writes nothing more, its write
// in progress is cut by an immediate write deadline, and stop waits for
// it, so that nothing touches the ResponseWriter once the handler has
// returned. (Should the goroutine begin a write after the deadline was
// set, the send timeout re-arms it: that write is bounded by the send
// timeout.)
func (cw *clientWriter) stop() {
	if cw == nil || cw.done == nil {
		return
	}
	cw.failed.Store(true)
	_ = cw.rc.SetWriteDeadline(time.Now())
	cw.catchUp()
}

// end sends the client its final bytes, held back until the fill's entry
// was stored (none: nil), after all that is due, and reports how many
// bytes of the body the client took in all.
func (cw *clientWriter) end(held []byte) int64 {
	if cw == nil {
		return 0
	}
	if len(held) > 0 {
		cw.write(held)
	} else {
		cw.catchUp()
	}
	return int64(cw.n)
}
