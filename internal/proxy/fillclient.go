package proxy

import (
	"net/http"
	"sync"
	"sync/atomic"
)

// clientWriter sends the body of an in-memory fill (tee) to the client
// that started it. While the fill collects the body for the cache, the
// client is written from the collected bytes on a goroutine of its own,
// so a client slower than the origin (one that stops reading, or reads
// through a tiny window) never paces the fill: the origin's body is read
// at the origin's pace, stored and handed to the flight's waiters, and
// the watchdog never cuts the origin for the client's sake. This is what
// fillfeed.go does for file fills and what nginx does with its buffers;
// it costs no memory the fill does not hold anyway (the body, at most
// the entry limit), and a goroutine only when the body comes in more than
// one read. Once the fill stops collecting (too large, too late: its
// waiters have been let go), there is nothing to write from but the read
// buffer: the goroutine catches up and the fill writes to the client in
// step again, as for any response that is not stored.
//
// The fill owns the goroutine: every path out of it calls end, which
// waits for the client to have been written all it is due (a client that
// stops reading is bounded by the send timeout) before the handler
// returns. A nil *clientWriter is no client: a background refresh, or a
// 304 to the client's own validators.
type clientWriter struct {
	w  http.ResponseWriter
	rc *http.ResponseController
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

func newClientWriter(w http.ResponseWriter) *clientWriter {
	if w == nil {
		return nil
	}
	return &clientWriter{w: w, rc: http.NewResponseController(w)}
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
			if !cw.failed.Load() {
				cw.put(src[cw.sent:])
			}
			cw.sent = len(src)
			continue
		}
		if closing {
			return
		}
		<-cw.wake
	}
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
