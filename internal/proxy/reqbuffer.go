package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Request buffering (origin.requestBuffer), as nginx's
// proxy_request_buffering: a request body is read from the client before
// the origin is contacted, so that the origin receives it whole and at
// once. A client that uploads slowly, or stops halfway, then holds the
// sidecar's memory and its own connection, never an origin connection
// nor an application worker: thread-per-request servers (Gunicorn's and
// Unicorn's sync workers, a small Puma pool) rely on the proxy in front
// of them for exactly this, since a handful of slow uploads would
// otherwise occupy every worker. A body read whole goes to the origin
// with Content-Length, chunked or not as it came.
//
// What is not buffered, and is forwarded as it arrives (as before):
//   - a body announced larger than the tier's buffer (Content-Length):
//     buffering its first part would hold the rest up no less;
//   - the rest of a body of unknown length (chunked) that outgrows the
//     buffer: what was read goes first, then the rest as it comes;
//   - every body while the sidecar-wide budget (RequestBufferBudget) is
//     spent, and the rest of one that finds it spent as it grows;
//   - every body of a tier with origin.streamRequestBodies.
//
// Stalls while a body is read are the client's: origin.idleTimeout
// answers 408, a body cut short 400, as when it was forwarded.
// Written by hand (a chunk list and an atomic budget): nothing in the
// standard library reads a body ahead under a shared bound.

// RequestBufferBudget bounds the request-body bytes every request of the
// sidecar holds in buffers at once: 16 slow uploads of 1 MiB each spend
// it, and further bodies are forwarded unbuffered (counted) rather than
// refused or made to wait. It is part of what tierconfig.MemoryAllowance
// allows above L1.
const RequestBufferBudget = 16 << 20

// reqChunk is the most a buffered body grows by, and takes from the
// budget, at a time: a body reserves about what it has received, not
// what it announces, so a client that announces much and sends little
// holds little.
const reqChunk = 64 << 10

// reqFirstChunk is a body's first chunk when its length is unknown (or
// larger): chunks double from it up to reqChunk, so that a body holds at
// most about twice what it received. Were every body to take reqChunk
// at once, a 10-byte JSON POST sent chunked would cost 64 KiB, and 256
// connections sending a byte each and standing still would spend the
// whole budget.
const reqFirstChunk = 1 << 10

// byteBudget is a count of bytes that may be taken without waiting.
type byteBudget struct{ left atomic.Int64 }

func newByteBudget(n int64) *byteBudget {
	b := new(byteBudget)
	b.left.Store(n)
	return b
}

// take takes n bytes, or nothing and false when fewer are left.
func (b *byteBudget) take(n int64) bool {
	for {
		l := b.left.Load()
		if l < n {
			return false
		}
		if b.left.CompareAndSwap(l, l-n) {
			return true
		}
	}
}

func (b *byteBudget) give(n int64) { b.left.Add(n) }

// bufferRequest reads out's body (its client's, wrapped for the
// watchdog) ahead, when the tier buffers request bodies, and makes out
// send what it read, then the rest of the client's body if it did not
// read it all. An error is the client's (a body cut short, or one that
// stood still for origin.idleTimeout): out must not be sent, and the
// client is answered as originFailed answers it.
func (p *Proxy) bufferRequest(out *http.Request, cfg *tierconfig.Compiled) error {
	limit := int64(cfg.Config.RequestBufferSize())
	if limit <= 0 || out.Body == nil || out.Body == http.NoBody {
		return nil
	}
	if out.ContentLength > limit {
		p.m.RequestBodyBuffered(metrics.BufferedTooLarge)
		return nil
	}
	b := &bufferedBody{rest: out.Body, budget: p.reqBudget}
	if pb, ok := out.Body.(progressBody); ok {
		b.progress = pb.progress
	}
	whole, spent, err := b.read(limit, out.ContentLength)
	if err != nil {
		b.release()
		return err
	}
	out.Body = b
	switch {
	case whole:
		out.ContentLength = b.size
		out.TransferEncoding = nil
		p.m.RequestBodyBuffered(metrics.BufferedWhole)
	case spent:
		p.m.RequestBodyBuffered(metrics.BufferedOverBudget)
	default:
		p.m.RequestBodyBuffered(metrics.BufferedTooLarge)
	}
	return nil
}

// bufferedBody is a request body read ahead into chunks, followed by
// what is left of the client's body (rest) when it was not read to its
// end. The transport reads it on its own goroutine and closes it, maybe
// from another one, and keeps the request (so this body) until the
// response is done: each chunk is dropped, and its bytes given back to
// the budget, once read, and all of them on Close, so that what the
// budget says is free is free.
type bufferedBody struct {
	rest   io.ReadCloser
	budget *byteBudget
	size   int64 // bytes read ahead
	eof    bool  // rest is at its end: the chunks are the whole body
	// progress, when rest has it (uploadBody), is called as reads of the
	// chunks bring bytes, and at their end when they are the whole body:
	// the origin taking them re-arms origin.idleTimeout as the client
	// sending them did (rest's own reads still do, after the chunks).
	progress func()

	mu     sync.Mutex
	chunks [][]byte // not yet read; full but the last
	off    int      // read of chunks[0]
	held   int64    // bytes taken from the budget, not yet given back
	closed bool
}

// read reads the body ahead until its end (whole), past limit bytes, or
// the budget is spent (spent). length is the announced length, -1
// unknown.
func (b *bufferedBody) read(limit, length int64) (whole, spent bool, err error) {
	// One byte past limit tells a body of exactly limit bytes, whole,
	// from a longer one.
	upTo := limit + 1
	for b.size < upTo {
		var c []byte
		if n := len(b.chunks); n > 0 && len(b.chunks[n-1]) < cap(b.chunks[n-1]) {
			c = b.chunks[n-1]
		} else {
			want := min(int64(reqChunk), max(reqFirstChunk, b.size))
			if length >= 0 {
				// One more byte than announced, to see the end without a
				// second chunk.
				want = min(want, length-b.size+1)
			}
			want = min(want, upTo-b.size)
			if !b.budget.take(want) {
				return false, true, nil
			}
			b.held += want
			c = make([]byte, 0, want)
			b.chunks = append(b.chunks, c)
		}
		n, err := b.rest.Read(c[len(c):cap(c)])
		b.chunks[len(b.chunks)-1] = c[:len(c)+n]
		b.size += int64(n)
		if err == io.EOF {
			b.eof = true
			return true, false, nil
		}
		if err != nil {
			return false, false, err
		}
	}
	return false, false, nil
}

func (b *bufferedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, errReadAfterClose
	}
	for len(b.chunks) > 0 {
		c := b.chunks[0]
		if b.off < len(c) {
			n := copy(p, c[b.off:])
			b.off += n
			b.mu.Unlock()
			if n > 0 && b.progress != nil {
				b.progress()
			}
			return n, nil
		}
		// Read: the chunk is the GC's, its bytes the budget's.
		b.budget.give(int64(cap(c)))
		b.held -= int64(cap(c))
		b.chunks[0] = nil
		b.chunks, b.off = b.chunks[1:], 0
	}
	b.mu.Unlock()
	if b.eof {
		if b.progress != nil {
			b.progress()
		}
		return 0, io.EOF
	}
	return b.rest.Read(p)
}

// progressBody is a body whose idle timeout re-arms for bytes that reach
// the origin from elsewhere than its reads (uploadBody).
type progressBody interface{ progress() }

// errReadAfterClose: the chunks are gone, so the client's body must not
// be read on as though they had been sent.
var errReadAfterClose = errors.New("proxy: read of a request body after Close")

// Close drops what was not read, gives the budget back and closes the
// client's body.
func (b *bufferedBody) Close() error {
	b.release()
	return b.rest.Close()
}

func (b *bufferedBody) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	b.budget.give(b.held)
	b.held, b.chunks = 0, nil
}

// failed passes on the client body's failure (clientBodyFailure).
func (b *bufferedBody) failed() *clientBodyError {
	if f, ok := b.rest.(failedBody); ok {
		return f.failed()
	}
	return nil
}
