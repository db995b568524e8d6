package proxy

import (
	"context"
	"io"
	"net/http"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
)

// fillFile streams a stored fill's body to the client w (nil: nobody) and
// into a body file, for a body longer than fileAbove bytes or of unknown
// length (kept in memory until it passes fileAbove, then spilled into the
// file; a shorter one is stored inline after all). e is the entry to
// store, without its body.
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
// or written (budget, ENOSPC, EIO) the fill stops storing, aborts the file
// (its followers' responses are broken off) and keeps serving the client
// from the origin. A body the origin breaks off stores nothing and breaks
// off the client's response. The client leaving does not stop the fill.
func (p *Proxy) fillFile(ctx context.Context, w http.ResponseWriter, r *http.Request, c *call, f *flight, e *entry.Entry,
	resp *http.Response, body io.Reader, wd *watchdog, watch *invalidate.Watch, fileAbove, maxObject int64) outcome {
	finish := func(res shared) {
		if f != nil {
			p.flights.finish(c.key, f, res)
		}
	}
	client := w != nil
	miss := outcome{metrics.ResultMiss, metrics.LayerOrigin, false}
	pl := p.place(ctx, c, resp.Header, r)
	hint := resp.ContentLength

	var (
		mem     []byte            // the body so far, while its length is unknown and short
		bw      *bodystore.Writer // the body file, once begun
		storing = true
	)
	giveUp := func() {
		storing, mem = false, nil
		if bw != nil {
			bw.Abort()
			bw = nil
		}
		wd.stopStoring()
		c.releaseLease()
		finish(shared{})
	}
	begin := func() bool {
		if wd.late.Load() {
			return false
		}
		nw, err := p.bodies.Create(pl.key, hint)
		if err != nil {
			p.log.Debug("body not stored: the body store refused it", "path", r.URL.Path, "err", err)
			return false
		}
		bw = nw
		wd.stopStoring()
		if hint >= 0 && !p.sharesBody(c, hint) || p.shb == nil {
			// Local to this replica: the others fetch for themselves
			// at once. (Of unknown length, it may still be shared:
			// the lease goes when it grows past the cap, below.)
			c.releaseLease()
		}
		if f != nil {
			le := *e
			f.start(&live{e: &le, size: hint, follow: func() io.ReadCloser { return nw.Follow() }, vary: pl.names, varyKey: pl.vk})
		}
		return true
	}
	if hint >= 0 && !begin() {
		giveUp()
	}

	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	var rc *http.ResponseController
	if w != nil {
		rc = http.NewResponseController(w)
	}
	var total int64
	for {
		n, rerr := body.Read(buf)
		if storing && bw == nil && wd.late.Load() {
			giveUp() // still in memory past origin.timeout
		}
		if n > 0 {
			chunk := buf[:n]
			total += int64(n)
			if c.shared && hint < 0 && bw != nil && !p.sharesBody(c, total) {
				c.releaseLease() // past l2.maxBodySize: it stays local
			}
			switch {
			case !storing:
			case total > maxObject:
				// Of unknown length and too large to store: later
				// requests skip coalescing.
				giveUp()
				p.uncacheable(ctx, c, r, resp.StatusCode)
			case bw != nil:
				// The file first, so that followers are never behind the
				// client; a write to the page cache is quick.
				if _, err := bw.Write(chunk); err != nil {
					p.log.Warn("body not stored: writing its file failed", "path", r.URL.Path, "err", err)
					giveUp()
				}
			default:
				mem = append(mem, chunk...)
				if int64(len(mem)) > fileAbove {
					if !begin() {
						giveUp()
					} else if _, err := bw.Write(mem); err != nil {
						p.log.Warn("body not stored: writing its file failed", "path", r.URL.Path, "err", err)
						giveUp()
					}
					mem = nil
				}
			}
			if w != nil {
				if _, err := w.Write(chunk); err != nil {
					w = nil // the client left; the fill goes on for the cache
				} else {
					_ = rc.Flush()
				}
			}
		}
		if w == nil && !storing {
			return miss
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// Truncated or stalled: nothing is stored and the client's
			// response is broken off, never complete-looking.
			if storing {
				giveUp()
			}
			p.bodyFailed(r, wd, rerr)
			return outcome{metrics.ResultMiss, metrics.LayerOrigin, client}
		}
	}
	if !storing {
		return miss
	}
	wd.stop()
	if bw == nil {
		// Of unknown length but short after all: inline, as without a
		// body store.
		if mem == nil {
			mem = []byte{}
		}
		e.Body = mem
		p.keep(ctx, c, f, e, pl, watch)
		return miss
	}
	ref, err := bw.Commit(func(ref entry.BodyFile) []byte {
		m := *e
		m.File, m.Body = &ref, nil
		return entry.Encode(nil, &m)
	})
	if err != nil {
		// The origin's body did not match its Content-Length, or the
		// file could not be finished: the file is gone.
		p.log.Warn("body not stored: finishing its file failed", "path", r.URL.Path, "err", err)
		finish(shared{})
		return miss
	}
	e.File = &ref
	p.keep(ctx, c, f, e, pl, watch)
	return miss
}
