package proxy

import (
	"errors"
	"io"
	"net/http"
	"sync"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/metrics"
)

// feed is what a file fill running on its own goroutine (fillfile.go)
// gives the client that started it: the body so far in memory, then the
// growing body file, and how the body ends. The fill never waits for the
// client; the client reads each at its own pace.
type feed struct {
	mu   sync.Mutex
	cond sync.Cond
	// mem is the body's first bytes, while its length is unknown and it is
	// kept in memory; it stays (it is at most the threshold) after it is
	// spilled into the file. Only appended to, beyond what was published.
	mem []byte
	// fo follows the body file, from its first byte, once it is begun:
	// the client's own descriptor.
	fo *bodystore.Follower
	// tail, set once, is how the body ends after what memory and the file
	// hold.
	tail *rest
	// gone: the client's handler returned; nothing more is handed to it.
	gone bool
}

// rest is how a body ends after its first from bytes, which the client
// has from memory or the file: buf (read from the origin, not stored),
// then src (the rest of the origin's body, handed over because the fill
// stopped storing), then err (the origin broke the body off: the
// response is broken off). Neither buf, src nor err: the body is complete.
type rest struct {
	from  int64
	buf   []byte
	src   io.Reader
	err   error
	wd    *watchdog // src's
	close func()    // releases src; the client's handler calls it
}

func newFeed() *feed {
	fd := &feed{}
	fd.cond.L = &fd.mu
	return fd
}

// publish makes the first len(mem) bytes of the body available from
// memory. A nil feed (no client) does nothing, as do its other methods.
func (fd *feed) publish(mem []byte) {
	if fd == nil {
		return
	}
	fd.mu.Lock()
	fd.mem = mem
	fd.cond.Broadcast()
	fd.mu.Unlock()
}

// attach gives the client a follower of the body file w has just begun,
// before anything is written to it; false when it cannot be opened.
func (fd *feed) attach(w *bodystore.Writer) bool {
	if fd == nil {
		return true
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.gone {
		return true
	}
	fo := w.Follow()
	if _, err := fo.Read(nil); err != nil { // the error of opening the file, if any
		_ = fo.Close()
		return false
	}
	fd.fo = fo
	fd.cond.Broadcast()
	return true
}

// end sets how the body ends; only the first call counts. It reports
// whether the client's handler has t (and so closes t's src).
func (fd *feed) end(t *rest) bool {
	if fd == nil {
		return false
	}
	fd.mu.Lock()
	defer fd.mu.Unlock()
	if fd.gone || fd.tail != nil {
		return false
	}
	fd.tail = t
	fd.cond.Broadcast()
	return true
}

// leave is called when the client's handler returns: it closes the
// client's follower and the origin response handed over to it, if any.
func (fd *feed) leave() {
	fd.mu.Lock()
	fd.gone = true
	fo, t := fd.fo, fd.tail
	fd.fo = nil
	fd.mu.Unlock()
	if fo != nil {
		_ = fo.Close()
	}
	if t != nil && t.close != nil {
		t.close()
	}
}

// next waits until there is something for a client that has been sent
// pos bytes: more bytes in memory, the file to follow (unless foDone: it
// broke), or the end. The wait is bounded by the fill's origin timeouts.
// (It does not end with the client's context: net/http cancels that when
// a client half-closes its side, while it may still be reading. A client
// that left is found by a write that fails, as for every follower.)
func (fd *feed) next(pos int64, foDone bool) (mem []byte, fo *bodystore.Follower, t *rest) {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	for {
		switch {
		case pos < int64(len(fd.mem)):
			return fd.mem[pos:], nil, nil
		case fd.fo != nil && !foDone:
			return nil, fd.fo, nil
		case fd.tail != nil:
			return nil, nil, fd.tail
		}
		fd.cond.Wait()
	}
}

// serveFeed serves the client that started a detached file fill, whose
// status and header are written, from fd: what the fill holds in memory,
// then its file as it grows (handed to the connection's ReadFrom,
// sendfile, when the length is known; chunked, piece by piece, when it is
// not), then, should the fill have stopped storing, the rest straight
// from the origin. A response that cannot be completed is broken off.
// The outcome counts the body bytes sent (its status is the caller's).
func (p *Proxy) serveFeed(w http.ResponseWriter, r *http.Request, fd *feed, chunked bool) outcome {
	defer fd.leave()
	out := outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false}
	broken := func(sentBytes int64) outcome {
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: true, sent: sent{bytes: sentBytes}}
	}
	rc := http.NewResponseController(w)
	var pos, foPos int64 // bytes sent, and read from fo
	foDone := false
	for {
		mem, fo, t := fd.next(pos, foDone)
		switch {
		case mem != nil:
			k, err := w.Write(mem)
			pos += int64(k)
			if err != nil {
				return broken(pos)
			}
			_ = rc.Flush()
		case fo != nil:
			if foPos < pos {
				// Sent from memory already.
				n, err := io.CopyN(io.Discard, fo, pos-foPos)
				foPos += n
				if err != nil {
					foDone = true
					continue
				}
			}
			n, err := p.sendFollower(w, fo, chunked)
			pos += n
			foPos += n
			switch {
			case err == nil:
				out.sent.bytes = pos
				return out // the file is committed and all sent
			case errors.Is(err, bodystore.ErrAborted):
				foDone = true // the fill stopped storing: see how it ends
			default:
				return broken(pos) // the client left, or the file was cut under us
			}
		default:
			return p.serveRest(w, r, t, pos)
		}
	}
}

// errClientGone: a write to the client failed.
var errClientGone = errors.New("the client left")

// sendFollower copies fo to w until the file is committed (nil) or fails
// (its error), or the client leaves (errClientGone, or the connection's
// error); n is what w took.
func (p *Proxy) sendFollower(w http.ResponseWriter, fo *bodystore.Follower, chunked bool) (n int64, err error) {
	if !chunked {
		// The follower hands each grown piece of the file to w's
		// ReadFrom: sendfile.
		return io.Copy(w, fo)
	}
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		k, rerr := fo.Read(buf)
		if k > 0 {
			if _, werr := w.Write(buf[:k]); werr != nil {
				return n, errClientGone
			}
			n += int64(k)
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// serveRest sends the end of a body t describes to a client that has
// been sent pos bytes.
func (p *Proxy) serveRest(w http.ResponseWriter, r *http.Request, t *rest, pos int64) outcome {
	end := func(abort bool) outcome {
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: abort, sent: sent{bytes: pos}}
	}
	skip := pos - t.from
	if skip < 0 || skip > int64(len(t.buf)) {
		// The client is short of bytes that nothing holds any more: a
		// bug, and a short response must not look complete.
		p.log.Error("a fill's client cannot be sent the rest of its body", "path", r.URL.Path, "sent", pos, "from", t.from)
		return end(true)
	}
	if b := t.buf[skip:]; len(b) > 0 {
		k, err := w.Write(b)
		pos += int64(k)
		if err != nil {
			return end(true)
		}
	}
	if t.src != nil {
		n, err := p.streamN(w, t.src)
		pos += n
		if err != nil {
			p.bodyFailed(r, t.wd, err)
			return end(true)
		}
	}
	return end(t.err != nil)
}
