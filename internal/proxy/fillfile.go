package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// fillFile stores a fill's body in a body file, for a body longer than
// f.fileAbove bytes or of unknown length (kept in memory until it passes
// fileAbove, then spilled into the file; a shorter one is stored inline
// after all), up to f.storeMax. e is the entry to store, without its
// body. The client is f.bodyW (nil: nobody reads the body).
//
// The copy from the origin into memory and the file runs at the origin's
// pace, whatever any client does, as nginx writes an upstream body to its
// temp file: with a client (w not nil) it runs on a goroutine of its own,
// owned by the Proxy (Close cuts its origin and waits for it), and the
// client is served like any waiter, from what the fill has read so far
// (fillfeed.go: the memory, then the growing file, with sendfile when the
// length is known). So a client that reads slowly, or not at all, holds
// its own connection and nothing else: not the file, not the waiters
// that follow it, not the budget reservation. f.detached reports that the
// goroutine took over what the fill holds (the origin response, its
// watchdog and watch, the flight and the lease); the caller must then
// leave the response and its watchdog and watch alone. Without a client
// the copy runs on the caller's goroutine.
//
// As soon as the file is begun the fill publishes it on its flight, so
// that waiters stream it as it grows. A body larger than l2.maxBodySize
// stays local to this replica (it is not written to L2): the fill gives
// back the tier-wide lease as soon as it knows, so that the other
// replicas fetch for themselves at once. A smaller one keeps the lease
// until its chunks and entry are in L2 (l2bodies.go). The store bound
// (origin.timeout) is dropped when the file is begun, since no local
// waiter waits for the end; the idle timeout still cuts an origin that
// stands still.
//
// The client is never failed by the store: when the file cannot be begun
// or written (budget, ENOSPC, EIO) the fill stops storing and aborts the
// file (its followers' responses are broken off); the client gets what
// the file holds, then the rest straight from the origin at its own pace,
// as a response that is not stored. A body the origin breaks off stores
// nothing and breaks off every response, the client's too. The client
// leaving does not stop the fill.
func (p *Proxy) fillFile(f *fetch, e *entry.Entry) outcome {
	w, resp := f.bodyW, f.resp
	ff := &fileFill{fetch: *f, e: e, hint: resp.ContentLength}
	ff.pl = p.place(f.ctx, f.c, resp.Header, f.r)
	if w != nil {
		ff.fd = newFeed()
	}
	if ff.hint >= 0 && !ff.begin() {
		// Not stored after all: a plain pass-through.
		ff.giveUp()
		if w == nil {
			return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false}
		}
		n, err := p.streamN(w, f.body)
		if err != nil {
			p.bodyFailed(f.r, f.wd, err)
		}
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: err != nil, sent: sent{bytes: n}}
	}
	if w == nil {
		return ff.run()
	}
	// The request and its header are read after the handler returns:
	// the goroutine keeps its own copy.
	ff.r = f.r.Clone(f.ctx)
	ff.closeResp = func() {
		_ = resp.Body.Close()
		f.wd.close()
	}
	// The goroutine takes the call (and with it the tier-wide lease, if
	// held), the flight, the response, its watchdog and the watch: the
	// handler's fill leaves them alone.
	own := *f.c
	ff.c = &own
	f.c.release, f.c.shared = nil, false
	f.l.Detach()
	f.detached = true
	p.bg.Add(1)
	go ff.runDetached()
	return p.serveFeed(w, f.r, ff.fd, ff.hint < 0)
}

// fileFill is one fill going to a body file: a copy of its fetch (what
// the fill holds, handed to the goroutine when it detaches) and the
// body's progress into memory and the file; its fields are its
// goroutine's own.
type fileFill struct {
	fetch
	e  *entry.Entry // the entry to store, without its body
	pl placement
	fd *feed // the client's view of the fill; nil: no client

	hint int64 // the body's Content-Length, or -1

	mem   []byte            // the body so far, while its length is unknown and short
	inMem int64             // bytes of the body the client can have from memory (fd.mem)
	bw    *bodystore.Writer // the body file, once begun
	filed int64             // bytes of the body in the file

	// Of a detached fill: closeResp closes the origin response and its
	// watchdog, unless handedOff gave them to the client's handler;
	// unhook stops Close of the Proxy from cutting the origin.
	closeResp func()
	handedOff bool
	unhook    func() bool

	// check decodes a coded body as it arrives (coding.go), for a body
	// in a coding the cache knows under a normalizing tier; nil otherwise.
	check *codingCheck
}

// errProxyClosed cuts the origin of a detached fill when the Proxy
// closes.
var errProxyClosed = errors.New("proxy: closed")

// runDetached runs the fill on its own goroutine (p.bg) and then ends
// what the fill holds, as fill and coalesce do for a fill on theirs.
func (ff *fileFill) runDetached() {
	p, c := ff.p, ff.c
	defer p.bg.Done()
	ff.unhook = context.AfterFunc(p.ctx, func() { ff.wd.cancel(errProxyClosed) })
	ff.run()
	ff.unhook()
	if !ff.handedOff {
		ff.closeResp()
	}
	ff.watch.End()
	c.releaseLease()
	ff.l.Publish(shared{})
	// Only the first end counts: after a stored body (the client reads
	// it to its end from the file) or a hand-over, this is a no-op.
	ff.fd.end(&rest{err: errFillLost})
}

// errFillLost: the fill ended without telling its client how its
// response ends (a bug); the response is broken off, never complete-looking.
var errFillLost = errors.New("the fill ended without finishing its client's response")

// run copies the origin's body into memory or the body file until its
// end, stores it, and hands it to the flight's waiters.
func (ff *fileFill) run() outcome {
	bp := ff.p.bufs.Get().(*[]byte)
	defer ff.p.bufs.Put(bp)
	buf := *bp
	if e := ff.e; e.Flags&entry.FlagCoded != 0 {
		if cd, _ := storedCoding(e); decodable(cd) && !noTransform(e.Values("Cache-Control")) {
			ff.check = ff.p.startCheck(cd, ff.storeMax)
			defer ff.check.abort()
		}
	}
	var total int64
	for {
		n, rerr := ff.body.Read(buf)
		chunk := buf[:n]
		ff.check.write(chunk)
		if ff.bw == nil && ff.wd.late.Load() {
			return ff.stop(chunk, rerr) // still in memory past origin.timeout
		}
		if n > 0 {
			total += int64(n)
			if out, stopped := ff.take(chunk, rerr, total); stopped {
				return out
			}
		}
		if rerr == io.EOF {
			return ff.finish()
		}
		if rerr != nil {
			// Truncated or stalled: nothing is stored and every response
			// is broken off, never complete-looking.
			ff.giveUp()
			ff.p.bodyFailed(ff.r, ff.wd, rerr)
			ff.fd.end(&rest{from: ff.covered(), err: rerr})
			return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: ff.fd != nil}
		}
	}
}

// take keeps chunk, the body's bytes up to total, which the read that
// brought them ended with rerr: in memory, or in the body file once the
// body outgrows fileAbove. stopped says that the fill gave up storing
// (out is its outcome).
func (ff *fileFill) take(chunk []byte, rerr error, total int64) (out outcome, stopped bool) {
	p := ff.p
	if ff.c.shared && ff.hint < 0 && ff.bw != nil && !p.sharesBody(ff.c, total) {
		ff.c.releaseLease() // past l2.maxBodySize: it stays local
	}
	switch {
	case total > ff.storeMax:
		// Of unknown length and too large to store: later requests skip
		// coalescing.
		out := ff.stop(chunk, rerr)
		p.uncacheable(ff.ctx, ff.c, ff.r, ff.resp.StatusCode)
		return out, true
	case ff.bw != nil:
		if _, err := ff.bw.Write(chunk); err != nil {
			p.log.Warn("body not stored: writing its file failed", "path", ff.r.URL.Path, "err", err)
			return ff.stop(chunk, rerr), true
		}
		ff.filed += int64(len(chunk))
	default:
		ff.mem = append(ff.mem, chunk...)
		ff.inMem = int64(len(ff.mem))
		ff.fd.publish(ff.mem)
		if ff.inMem > ff.fileAbove {
			if !ff.begin() {
				return ff.stop(nil, rerr), true
			}
			if _, err := ff.bw.Write(ff.mem); err != nil {
				p.log.Warn("body not stored: writing its file failed", "path", ff.r.URL.Path, "err", err)
				return ff.stop(nil, rerr), true
			}
			ff.filed, ff.mem = ff.inMem, nil
		}
	}
	return outcome{}, false
}

// finish stores the body read whole, inline or in its file, hands it to
// the flight's waiters and then lets the client's response end.
func (ff *fileFill) finish() outcome {
	p := ff.p
	miss := outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false}
	ff.wd.stop()
	if ff.bw == nil {
		// Of unknown length but short after all: inline, as without a
		// body store. The client has it all from memory.
		if ff.mem == nil {
			ff.mem = []byte{}
		}
		ff.e.Body = ff.mem
		if ff.e.Flags&entry.FlagCoded != 0 {
			// The client has had the body from memory already: what is
			// stored may be compressed now.
			p.codeBody(compressPolicyOf(ff.c), ff.e, ff.decodeLimit(int64(len(ff.mem))))
		}
		p.keep(ff.ctx, ff.c, ff.l, ff.e, ff.pl, ff.watch)
		// Stored and handed to the waiters: now the client's response
		// may end.
		ff.fd.end(&rest{from: ff.inMem})
		return miss
	}
	if ff.e.Flags&entry.FlagCoded != 0 {
		ff.codeFiled()
	}
	ref, err := ff.bw.Commit(func(ref entry.BodyFile) []byte {
		m := *ff.e
		m.File, m.Body = &ref, nil
		return entry.Encode(nil, &m)
	})
	if err != nil {
		// The file could not be finished: it is gone. The client still
		// reads what it held, which is the whole body (a body longer than
		// its Content-Length breaks a write, a shorter one fails the read).
		p.log.Warn("body not stored: finishing its file failed", "path", ff.r.URL.Path, "err", err)
		ff.l.Publish(shared{})
		t := &rest{from: ff.filed}
		if ff.hint >= 0 && ff.filed != ff.hint {
			t.err = err
		}
		ff.fd.end(t)
		return miss
	}
	ff.e.File = &ref
	p.keep(ff.ctx, ff.c, ff.l, ff.e, ff.pl, ff.watch)
	// Stored and handed to the waiters: now the followers of the file,
	// the client among them, may read its end (HoldEnd in begin), so
	// that whatever they ask next finds it.
	ff.bw.Release()
	ff.fd.end(&rest{from: ff.filed})
	return miss
}

// begin creates the body file and publishes it to the client and the
// flight's waiters; false when the store refuses it.
func (ff *fileFill) begin() bool {
	p, c := ff.p, ff.c
	if ff.wd.late.Load() {
		return false
	}
	nw, err := p.bodies.Create(ff.pl.key, ff.hint)
	if err != nil {
		p.log.Debug("body not stored: the body store refused it", "path", ff.r.URL.Path, "err", err)
		return false
	}
	// No follower reads the body's end before the response is stored
	// (run releases it).
	nw.HoldEnd()
	if !ff.fd.attach(nw) {
		// The client could not follow the file (no descriptor left):
		// it could not be served from it.
		p.log.Warn("body not stored: following its file failed", "path", ff.r.URL.Path)
		nw.Abort()
		return false
	}
	ff.bw = nw
	ff.wd.stopStoring()
	if ff.hint >= 0 && !p.sharesBody(c, ff.hint) || p.shb == nil {
		// Local to this replica: the others fetch for themselves at
		// once. (Of unknown length, it may still be shared: the lease
		// goes when it grows past the cap, in run.)
		c.releaseLease()
	}
	if ff.l != nil {
		le := *ff.e
		ff.l.Stream(&live{e: &le, size: ff.hint, follow: func() io.ReadCloser { return nw.Follow() }, vary: ff.pl.names, varyKey: ff.pl.vk})
	}
	return true
}

// giveUp stops storing: the file (if any) is aborted, its followers'
// responses broken off, and the flight's waiters fetch for themselves.
func (ff *fileFill) giveUp() {
	ff.mem = nil
	if ff.bw != nil {
		ff.bw.Abort()
		ff.bw = nil
	}
	ff.wd.stopStoring()
	ff.c.releaseLease()
	ff.l.Publish(shared{})
}

// covered is how much of the body the client can have from the fill's
// memory or file.
func (ff *fileFill) covered() int64 { return max(ff.filed, ff.inMem) }

// stop gives up storing after the read that brought pending (not stored)
// and ended with rerr. The client, if there is one, gets the rest of the
// body straight from the origin: the fill hands the origin's response
// over to the client's handler, which streams it at the client's pace as
// a response that is not stored. Without a client there is nothing more
// to read.
func (ff *fileFill) stop(pending []byte, rerr error) outcome {
	ff.giveUp()
	miss := outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false}
	if ff.fd == nil {
		return miss
	}
	t := &rest{from: ff.covered(), buf: bytes.Clone(pending), wd: ff.wd}
	switch {
	case rerr == io.EOF:
	case rerr != nil:
		ff.p.bodyFailed(ff.r, ff.wd, rerr)
		t.err = rerr
	default:
		// The Proxy's Close no longer cuts it: it is a client's response
		// now, not the cache's fill.
		t.src, t.close = ff.body, ff.closeResp
		if ff.unhook != nil {
			ff.unhook()
		}
	}
	if ff.fd.end(t) && t.src != nil {
		ff.handedOff = true
	}
	return miss
}

// codeFiled sets the decoded size of a coded body kept in a file: its
// length for identity (a body file is never compressed by the cache), the
// check's verdict for a coding the cache knows; a body that did not
// decode, or in another coding, is served only as stored.
func (ff *fileFill) codeFiled() {
	e := ff.e
	if cd, _ := storedCoding(e); cd == httpcache.CodingIdentity {
		e.DecodedSize = ff.filed
		return
	}
	if ff.check != nil {
		if n, ok := ff.check.finish(); ok {
			e.DecodedSize = n
			return
		}
	}
	e.Flags |= entry.FlagUndecodable
	e.DecodedSize = -1
}
