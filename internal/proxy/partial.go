package proxy

import (
	"bytes"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// Partial content (RFC 9111 §3.3, §3.4; docs/caching.md "Partial
// content"). A 206 answering a single-range GET is kept, when
// httpcache.DecidePartial allows, as an entry.KindPartial under the key
// its complete response would have, in this replica's L1 only. Its spans
// answer the ranges they cover. For bytes they lack, one contiguous gap is
// asked of the origin with If-Range and combined with them for the client;
// parts that belong together (httpcache.CanCombine) are combined into one
// entry, which becomes a complete response once they cover the
// representation. Every other path takes a partial entry for a miss: its
// kind is not KindResponse.

// xMissPartial is what a response combined from stored bytes and bytes the
// origin just sent reports.
var xMissPartial = []string{"MISS; partial"}

// rangeFill is how a fill asks the origin for part of a representation
// (call.rng). The fill sends ask as its Range and ifRange (when set) as
// its If-Range; a 200 answer is then filled and stored as any other, and
// every other answer is partAnswered's.
type rangeFill struct {
	ask, ifRange string
	// part, when set, is the stored partial response whose gap ask is:
	// the client's answer is combined from it and the origin's part.
	// Without it the client's own range was forwarded and the origin's
	// answer is the client's.
	part *entry.Entry
	// partV is part's strong validator ("" for none); partFresh says
	// whether part was fresh as the origin sees it (without the request's
	// directives), which a part without a validator needs to be combined.
	partV     string
	partFresh bool
	// want is what the client gets: the bytes of its range (ranged, a
	// 206) or the whole representation (a 200).
	want   httpcache.ByteRange
	ranged bool
	// segs, when part is held in piece files, are those files open for
	// the stored bytes of want (partialfile.go).
	segs segments
}

// close closes the piece files rg holds open; rg may be nil.
func (rg *rangeFill) close() {
	if rg != nil {
		rg.segs.close()
	}
}

// forwardRange is the fill of a client's Range request as it is: a single
// byte range (with its If-Range, if one) whose 206 may be stored. nil
// when the request's Range is not one the cache stores an answer to.
func forwardRange(r *http.Request) *rangeFill {
	v, ok := httpcache.SingleRange(r.Header)
	if !ok || len(r.Header["If-Range"]) > 1 {
		return nil
	}
	rg := &rangeFill{ask: v}
	if ir := r.Header["If-Range"]; len(ir) == 1 {
		rg.ifRange = ir[0]
	}
	return rg
}

// alone reports whether the fill of rg fetches alone, not collapsed with
// the key's other misses: fills of ranges each ask for their own, and so
// does a full GET whose missing run becomes a piece, since its complete
// response is built after it (partialfile.go): waiters would have nothing
// to share and would each fetch the whole; alone, each asks for the
// missing run only. A nil rg (no range) is not.
func (rg *rangeFill) alone() bool {
	return rg != nil && (rg.part == nil || rg.ranged || rg.part.Partial.Pieces != nil)
}

// servePart serves a request for which the lookup found a stored part of
// the representation (q.f.part): from the part when it can (partialHit),
// else as a miss that asks for what the part lacks, or, when L2 holds the
// complete response, as a request for that.
func (p *Proxy) servePart(w http.ResponseWriter, r *http.Request, q *cacheReq) outcome {
	out, done, rg := p.partialHit(w, r, q)
	if done {
		return out
	}
	defer rg.close() // the stored part's piece files, if it opened them
	return p.serveStored(w, r, q, rg)
}

// partView is how the stored part e answers one request.
type partView struct {
	e   *entry.Entry
	now time.Time // the rules' clock when the part was evaluated
	use httpcache.Use
	age time.Duration
	// want is what the client gets: the bytes of its range (ranged, a
	// 206) or the whole representation (a 200); unsatisfiable: its range
	// lies past the representation's length.
	want                  httpcache.ByteRange
	ranged, unsatisfiable bool
	held                  []httpcache.ByteRange // what e holds
	notModified           bool                  // e answers the client's conditional
	scattered             bool                  // want spans more than maxServedPieces pieces
}

// viewPart evaluates the stored part e for r.
func (p *Proxy) viewPart(r *http.Request, q *cacheReq, e *entry.Entry) partView {
	v := partView{e: e, now: p.now()}
	v.use, v.age = httpcache.Evaluate(stored(e), q.rcc, v.now)
	length := e.Partial.Length
	v.want = httpcache.ByteRange{Start: 0, End: length - 1}
	if r.Method == http.MethodGet && len(r.Header["Range"]) > 0 {
		switch br, res := httpcache.EvalRange(r.Header, e, length); res {
		case httpcache.RangeSatisfiable:
			v.want, v.ranged = br, true
		case httpcache.RangeUnsatisfiable:
			v.unsatisfiable = true
		}
	}
	v.held = spansOf(e.Partial)
	v.notModified = httpcache.NotModified(r.Header, http.StatusOK, e)
	// A GET across too many pieces is not sent from them (maxServedPieces).
	v.scattered = pieced(e) && r.Method == http.MethodGet && piecesFor(e, v.want) > maxServedPieces
	return v
}

// usable reports whether the part may answer without the origin.
func (v *partView) usable() bool {
	return v.use == httpcache.UseFresh || v.use == httpcache.UseStale
}

// partialHit answers r from the stored partial response q.f.part when
// that can (done). Otherwise it returns how the miss goes to the origin:
// the gap of the stored part (a rangeFill with part), the client's range
// as it is (a rangeFill without part), or nil for the usual paths (a full
// fill; HEAD and other ranges pass). When the part lacks what r needs and
// L2 holds the complete response, q.f becomes that hit instead: a partial
// response in this replica's L1 never shadows a complete one in L2.
func (p *Proxy) partialHit(w http.ResponseWriter, r *http.Request, q *cacheReq) (outcome, bool, *rangeFill) {
	f := &q.f
	v := p.viewPart(r, q, f.part)
	if v.usable() && (r.Method == http.MethodHead || v.unsatisfiable || v.notModified || !v.scattered && httpcache.Covers(v.held, v.want)) {
		if out, served := p.servePartHit(w, r, q, &v); served {
			return out, true, nil
		}
	}
	if p.cluster != nil {
		full := new(entry.Entry)
		if layer, err := p.cluster.GetNewer(r.Context(), q.kb.Key(), full, time.Time{}); err == nil {
			f.e, f.ok, f.layer, f.part = full, true, layer, nil
			return outcome{}, false, nil
		}
	}
	if f.part == nil || r.Method != http.MethodGet {
		// A part that lost a piece is a miss as if nothing were stored.
		return outcome{}, false, nil
	}
	return outcome{}, false, p.partMiss(r, q, &v)
}

// servePartHit serves r from the stored part (v.e). Every piece file is
// opened before the header is written: one that is gone makes this a
// miss as if nothing were stored (served false, q.f.part nil).
func (p *Proxy) servePartHit(w http.ResponseWriter, r *http.Request, q *cacheReq, v *partView) (outcome, bool) {
	f, e := &q.f, v.e
	var segs segments
	if pieced(e) && r.Method == http.MethodGet && !v.unsatisfiable && !v.notModified {
		var id [16]byte
		var err error
		if segs, id, err = p.openPieces(q.kb.Key(), e, v.want); err != nil {
			p.dropPart(q.kb.Key(), id)
			f.part = nil
			return outcome{}, false
		}
	}
	defer segs.close()
	res, x := metrics.ResultHit, pick(f.layer, xHitL1, xHitL2)
	if v.use == httpcache.UseStale {
		res, x = metrics.ResultStale, pick(f.layer, xStaleL1, xStaleL2)
	}
	sn := p.writePart(w, r, e, v.age, v.want, v.ranged, v.unsatisfiable, hitVerdict(x, q.rule, q.dbg), segs)
	return outcome{result: res, layer: f.layer, abort: false, sent: sn}, true
}

// partMiss is how a GET the stored part (v.e) cannot answer goes to the
// origin: the part's one gap within what the client wants, asked with
// If-Range and combined with the part (a rangeFill with part); the
// client's range as it is; or nil, a full fill.
func (p *Proxy) partMiss(r *http.Request, q *cacheReq, v *partView) *rangeFill {
	e, length := v.e, v.e.Partial.Length
	if v.unsatisfiable {
		return forwardRange(r)
	}
	if !pieced(e) && !v.ranged && p.bodies != nil && length > int64(q.cfg.Config.L1.MaxEntrySize)-entryOverhead {
		// Parts are inline: combined, this representation could not be
		// stored. Fetched whole, it goes to the body store.
		return nil
	}
	validator, _ := httpcache.StrongValidator(e)
	partFresh := v.use == httpcache.UseFresh
	if !partFresh {
		fresh, _ := httpcache.Evaluate(stored(e), httpcache.RequestCC{}, v.now)
		partFresh = fresh == httpcache.UseFresh
	}
	// With a validator, If-Range makes the gap's answer a validation of
	// the stored bytes too; without one, the stored bytes are only
	// combined with new ones while the origin's freshness vouches for them
	// and the client accepts them.
	if !v.scattered && (validator != "" || (v.usable() && partFresh)) {
		if gap, res := httpcache.Gap(v.held, v.want); res == httpcache.GapOne {
			rg := &rangeFill{
				ask: httpcache.GapRange(gap, length), ifRange: validator,
				part: detach(e), partV: validator, partFresh: partFresh, want: v.want, ranged: v.ranged,
			}
			if pieced(e) {
				// The stored bytes the client gets around the gap:
				// opened before anything is asked or sent.
				segs, id, err := p.openPieces(q.kb.Key(), e, v.want)
				if err != nil {
					p.dropPart(q.kb.Key(), id)
					q.f.part = nil
					return nil
				}
				rg.segs = segs
			}
			return rg
		}
	}
	if v.ranged {
		return forwardRange(r)
	}
	return nil
}

// writePart answers r from the stored partial response e: a HEAD or a
// conditional's 304 with its header, a 416 for a range past its length,
// or the bytes want, which e holds (206 when ranged, else 200): inline,
// or from segs, its piece files opened for want.
func (p *Proxy) writePart(w http.ResponseWriter, r *http.Request, e *entry.Entry, age time.Duration, want httpcache.ByteRange,
	ranged, unsatisfiable bool, v verdict, segs segments) sent {
	h := w.Header()
	writeEntryHeader(h, e, httpcache.AgeHeader(age))
	cfg := p.cfg.Load()
	stripTargeted(h, cfg.StripTargeted)
	h["X-Cache"] = v.x
	if cs, ok := cacheStatus(cfg, v, 0, e.Lifetime-age, true); ok {
		h["Cache-Status"] = append(h["Cache-Status"], cs)
	}
	if v.dbg != nil {
		h[debugHeader] = []string{v.dbg.value(v, e.Lifetime, true)}
	}
	if httpcache.NotModified(r.Header, http.StatusOK, e) {
		notModified(w)
		return sent{status: http.StatusNotModified}
	}
	length := e.Partial.Length
	switch {
	case r.Method == http.MethodHead:
		h["Content-Length"] = []string{strconv.FormatInt(length, 10)}
		w.WriteHeader(http.StatusOK)
		return sent{status: http.StatusOK}
	case unsatisfiable:
		h["Content-Range"] = []string{"bytes */" + strconv.FormatInt(length, 10)}
		h["Content-Length"] = []string{"0"}
		w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		return sent{status: http.StatusRequestedRangeNotSatisfiable}
	case pieced(e):
		status := http.StatusOK
		if ranged {
			status = http.StatusPartialContent
			h["Content-Range"] = []string{httpcache.ContentRangeValue(want, length)}
		}
		h["Content-Length"] = []string{strconv.FormatInt(spanLen(want), 10)}
		return p.servePieces(w, r, segs, want, status)
	default:
		body := partBytes(e, want)
		status := http.StatusOK
		if ranged {
			status = http.StatusPartialContent
			h["Content-Range"] = []string{httpcache.ContentRangeValue(want, length)}
		}
		h["Content-Length"] = []string{strconv.Itoa(len(body))}
		w.WriteHeader(status)
		n, _ := w.Write(body)
		return sent{status: status, bytes: int64(n)}
	}
}

// rangeOfBody answers a single-range GET r from the inline body of the
// complete stored response e: the status and the bytes it gets, with
// Content-Range set in h (a 200 with the whole body when the range is
// not one the cache answers).
func rangeOfBody(h http.Header, r *http.Request, e *entry.Entry) (int, []byte) {
	body := e.Body
	size := int64(len(body))
	br, res := httpcache.EvalRange(r.Header, e, size)
	switch res {
	case httpcache.RangeSatisfiable:
		h["Content-Range"] = []string{"bytes " + strconv.FormatInt(br.Start, 10) + "-" +
			strconv.FormatInt(br.End, 10) + "/" + strconv.FormatInt(size, 10)}
		return http.StatusPartialContent, body[br.Start : br.End+1]
	case httpcache.RangeUnsatisfiable:
		h["Content-Range"] = []string{"bytes */" + strconv.FormatInt(size, 10)}
		return http.StatusRequestedRangeNotSatisfiable, nil
	}
	return e.Status, body
}

// partAnswered handles every answer but a 200 to a fill that asked for
// part of a representation (f.c.rng): a 206 is checked, combined and
// stored as DecidePartial and CanCombine allow; anything else (416, 304,
// an error) is relayed and stores nothing, since it answers this range
// only.
func (p *Proxy) partAnswered(f *fetch) outcome {
	c, rg, resp := f.c, f.c.rng, f.resp
	if resp.StatusCode != http.StatusPartialContent {
		if rg.part != nil && resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			// The representation no longer has the bytes the stored part
			// says it has: it changed.
			return p.askAgain(f)
		}
		f.l.Publish(shared{})
		return p.relay(f)
	}
	f.x = f.exchange()
	pd := httpcache.DecidePartial(f.x, rg.ask, resp.ContentLength, c.rule.Policy)
	limit := int64(c.cfg.Config.L1.MaxEntrySize) - headerBytes(resp.Header) - entryOverhead
	collect := pd.Store && spanLen(pd.Span) <= limit
	if pd.Store && p.piecesMode(c.cfg, pd.Length, pd.Span) {
		// A part of a large representation goes to a piece file
		// (partialfile.go), whatever its own size.
		collect = true
	}
	if collect {
		f.wd.storeUntil(f.start.Add(c.cfg.Config.Origin.Timeout.Std()), func() { f.l.Publish(shared{}) })
	}
	if rg.part == nil {
		f.l.Publish(shared{})
		return p.forwardedPart(f, pd, collect)
	}
	part, why := httpcache.ReceivedPart(resp.Header, resp.ContentLength)
	if why != "" || !httpcache.CanCombine(rg.partV, rg.part.Partial.Length, rg.partFresh, part.Validator, part.Length) ||
		!httpcache.Covers(httpcache.AddSpan(spansOf(rg.part.Partial), part.Span), rg.want) {
		// Not the gap of the stored representation (it changed, or the
		// origin answered another range).
		return p.askAgain(f)
	}
	return p.combinePart(f, pd, part, collect)
}

// askAgain asks for what the client wants as if nothing were stored,
// when the answer to a gap is not that gap of the stored representation.
func (p *Proxy) askAgain(f *fetch) outcome {
	c, rg := f.c, f.c.rng
	f.wd.stopStoring()
	f.resp.Body.Close()
	if c.rng = nil; rg.ranged {
		f.l.Publish(shared{})
		if c.rng = forwardRange(f.r); c.rng == nil {
			return p.pass(f.w, f.r, c.cfg, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, metrics.ResultMiss)
		}
		return p.fill(f.w, f.r, c, nil)
	}
	return p.fill(f.w, f.r, c, f.l)
}

// combinePart answers the client with the bytes it wants, from the stored
// part before and after the origin's part (the gap) and from the origin's
// part as it arrives, keeps the new part when collect says so, and hands
// the combined response to the flight's waiters once it is complete.
func (p *Proxy) combinePart(f *fetch, pd httpcache.PartialDecision, part httpcache.Part, collect bool) outcome {
	c, rg := f.c, f.c.rng
	var pl placement
	var sink *partSink
	if collect {
		pl = p.place(f.ctx, c, f.resp.Header, f.r)
		sink = p.newSink(c, f.r, pl, pd, f.wd.storeBy)
	}
	status, bodyW := p.combinedHeader(f, part.Length, sink != nil)
	want := rg.want
	var n int64 // body bytes sent
	span := part.Span
	pieces := pieced(rg.part)
	readOK := true // the stored bytes were read whole
	if want.Start < span.Start {
		prefix := httpcache.ByteRange{Start: want.Start, End: span.Start - 1}
		if pieces {
			bodyW, readOK = sendSegments(bodyW, rg.segs, prefix, &n)
		} else {
			writeSome(bodyW, partBytes(rg.part, prefix), &n)
		}
	}
	var suffix []byte
	var after httpcache.ByteRange // the stored bytes after the new part's
	hasAfter := want.End > span.End
	if hasAfter {
		after = httpcache.ByteRange{Start: max(want.Start, span.End+1), End: want.End}
		if !pieces {
			suffix = partBytes(rg.part, after)
		}
	}
	clip := httpcache.ByteRange{Start: max(want.Start, span.Start), End: min(want.End, span.End)}
	held, exact, err := p.copyPart(bodyW, f.body, span, clip, sink, !hasAfter, false, &f.wd.late, &n)
	if err != nil || !exact || !readOK {
		// The origin broke off, or sent other than the bytes it named, or
		// a stored piece could not be read: the client, promised
		// Content-Length, gets a broken response.
		sink.discard()
		if err != nil {
			p.bodyFailed(f.r, f.wd, err)
		}
		f.l.Publish(shared{})
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: bodyW != nil || !readOK, sent: sent{status, n}}
	}
	f.wd.stop()
	if sink.kept() {
		if complete := p.keepPart(f, pd, sink, pl); complete != nil {
			f.l.Publish(shared{e: complete, v: verdict{x: xMissCoalesced, rule: c.rule, fwd: fwdPartial, stored: true, collapsed: true}, out: outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false},
				vary: pl.names, varyKey: pl.vk})
		}
	} else {
		sink.discard()
	}
	f.l.Publish(shared{})
	// Stored first, and the shared fetch over: what the client asks once
	// it has its last byte finds the entry (caching.md "Determinism").
	c.releaseLease()
	bodyW = writeSome(bodyW, held, &n)
	if hasAfter && pieces {
		if bodyW, readOK = sendSegments(bodyW, rg.segs, after, &n); !readOK {
			return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: true, sent: sent{status, n}}
		}
	}
	writeSome(bodyW, suffix, &n)
	return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false, sent: sent{status, n}}
}

// combinedHeader sends the client the header of the response combined
// from the stored part and the origin's (a representation of length
// bytes): the stored header updated with the new part's fields (RFC 9110
// §15.3.7.3), for the bytes it wants, or a 304 when that answers its
// conditional. It returns the status sent and where the body goes (nil:
// nowhere).
func (p *Proxy) combinedHeader(f *fetch, length int64, stored bool) (int, http.ResponseWriter) {
	c, rg, w := f.c, f.c.rng, f.w
	merged := httpcache.MergeNotModified(rg.part.HTTPHeader(), f.resp.Header)
	h := w.Header()
	for k, vs := range merged {
		h[k] = vs
	}
	p.setMissAge(h, f.x)
	appendVia(h)
	stripTargeted(h, c.cfg.StripTargeted)
	status := http.StatusOK
	if rg.ranged {
		status = http.StatusPartialContent
		h["Content-Range"] = []string{httpcache.ContentRangeValue(rg.want, length)}
	}
	h["Content-Length"] = []string{strconv.FormatInt(spanLen(rg.want), 10)}
	v := verdict{x: xMissPartial, rule: c.rule, dbg: c.dbg, fwd: fwdPartial, fwdStatus: f.resp.StatusCode, stored: stored}
	if httpcache.NotModified(f.r.Header, http.StatusOK, merged) {
		p.setStatus(h, v, http.StatusNotModified)
		notModified(w)
		return http.StatusNotModified, nil
	}
	p.setStatus(h, v, status)
	w.WriteHeader(status)
	return status, w
}

// forwardedPart relays the origin's answer to a client's own range (a
// 206), storing its part when pd allows (collect).
func (p *Proxy) forwardedPart(f *fetch, pd httpcache.PartialDecision, collect bool) outcome {
	c, w, resp := f.c, f.w, f.resp
	h := w.Header()
	copyHeader(h, resp.Header)
	p.setMissAge(h, f.x)
	stripTargeted(h, c.cfg.StripTargeted)
	var pl placement
	var sink *partSink
	if collect {
		pl = p.place(f.ctx, c, resp.Header, f.r)
		sink = p.newSink(c, f.r, pl, pd, f.wd.storeBy)
	}
	bodyW, status := w, resp.StatusCode
	v := verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: resp.StatusCode, stored: sink != nil}
	if httpcache.NotModified(f.r.Header, resp.StatusCode, resp.Header) {
		p.setStatus(h, v, http.StatusNotModified)
		notModified(w)
		bodyW, status = nil, http.StatusNotModified
	} else {
		p.setStatus(h, v, resp.StatusCode)
		w.WriteHeader(resp.StatusCode)
	}
	var n int64 // body bytes sent
	if sink == nil {
		if bodyW == nil {
			return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false, sent: sent{status: status}}
		}
		n, err := p.streamN(bodyW, f.body)
		if err != nil {
			p.bodyFailed(f.r, f.wd, err)
		}
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: err != nil, sent: sent{status, n}}
	}
	// The client gets every byte the origin sends, framed as it framed
	// them; only exactly the bytes Content-Range names are stored.
	held, exact, err := p.copyPart(bodyW, f.body, pd.Span, httpcache.ByteRange{Start: pd.Span.Start, End: math.MaxInt64},
		sink, true, true, &f.wd.late, &n)
	if err != nil {
		sink.discard()
		p.bodyFailed(f.r, f.wd, err)
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: bodyW != nil, sent: sent{status, n}}
	}
	f.wd.stop()
	if exact && sink.kept() {
		p.keepPart(f, pd, sink, pl)
	} else {
		sink.discard()
	}
	writeSome(bodyW, held, &n)
	return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false, sent: sent{status, n}}
}

// relay sends the origin's answer to a fill of part of a representation
// that is not a part (416, 304, an error): it answers this range only and
// stores nothing.
func (p *Proxy) relay(f *fetch) outcome {
	c, w, resp := f.c, f.w, f.resp
	h := w.Header()
	copyHeader(h, resp.Header)
	stripTargeted(h, c.cfg.StripTargeted)
	p.setStatus(h, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, resp.StatusCode)
	w.WriteHeader(resp.StatusCode)
	n, err := p.streamN(w, f.body)
	if err != nil {
		p.bodyFailed(f.r, f.wd, err)
	}
	return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: err != nil, sent: sent{resp.StatusCode, n}}
}

// partSink keeps the bytes of a part as they arrive: in memory (an
// inline part) or in a piece file (partialfile.go), never both, so a
// piece costs no memory beyond the copy buffer. A nil *partSink keeps
// nothing.
type partSink struct {
	mem  []byte
	file *bodystore.Writer
	// abort aborts file, from its own goroutine, once the fill's store
	// bound passes: the part is written at its client's pace, and a
	// client that stops reading must not hold the piece's reservation in
	// the body store (which evicts other bodies) for as long as it
	// stalls.
	abort *time.Timer
	on    bool // still keeping: no write failed, no bound was passed
}

// newSink returns where the part pd of c's fill is kept: a piece file
// (created under pl.key, sized by pd.Span, aborted at storeBy if still
// being written) for a part of a large representation, else memory. nil
// when the body store refuses the piece: the part is then forwarded and
// not stored.
func (p *Proxy) newSink(c *call, r *http.Request, pl placement, pd httpcache.PartialDecision, storeBy time.Time) *partSink {
	if !p.piecesMode(c.cfg, pd.Length, pd.Span) {
		return &partSink{mem: make([]byte, 0, spanLen(pd.Span)), on: true}
	}
	fw, err := p.bodies.Create(pl.key, spanLen(pd.Span))
	if err != nil {
		p.log.Debug("part not stored: the body store refused its piece", "path", r.URL.Path, "err", err)
		return nil
	}
	return &partSink{file: fw, abort: time.AfterFunc(time.Until(storeBy), fw.Abort), on: true}
}

func (s *partSink) keeping() bool { return s != nil && s.on }

// kept reports whether every byte given to keep was kept.
func (s *partSink) kept() bool { return s.keeping() }

func (s *partSink) keep(b []byte) {
	if s.file != nil {
		if _, err := s.file.Write(b); err != nil {
			s.stop()
		}
		return
	}
	s.mem = append(s.mem, b...)
}

// stop stops keeping; what was kept is dropped.
func (s *partSink) stop() {
	if s != nil {
		s.on, s.mem = false, nil
	}
}

// discard drops what s kept: a piece file being written is removed.
func (s *partSink) discard() {
	if s == nil {
		return
	}
	s.stop()
	if s.file != nil {
		s.abort.Stop()
		s.file.Abort()
	}
}

// copyPart reads the body of a 206 that names span, to its end. The bytes
// within clip go to w (nil: nobody) as they arrive; sink, while it keeps,
// gets the bytes as long as they stay within span. exact reports that the
// body was exactly span's bytes. With hold (and a sink keeping), the
// piece that brings w the last byte of clip within span is returned as
// held (a copy) instead of written, for the caller to send once the part
// is stored. A body longer than span stops the sink: with overflow the
// excess goes to w as well (the client gets what the origin sent),
// without it copyPart stops at once (exact false). It keeps reading after
// w has gone for as long as the sink keeps.
func (p *Proxy) copyPart(w http.ResponseWriter, body io.Reader, span, clip httpcache.ByteRange, sink *partSink, hold, overflow bool,
	late *atomic.Bool, written *int64) (held []byte, exact bool, err error) {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	last := min(clip.End, span.End) // the last byte w gets of span
	pos := span.Start               // the position of the next byte read
	for {
		n, rerr := body.Read(buf)
		if sink.keeping() && late.Load() {
			sink.stop()
		}
		if n > 0 {
			chunk := buf[:n]
			end := pos + int64(n) - 1
			if end > span.End {
				sink.stop()
				if !overflow {
					return nil, false, nil
				}
				w = writeSome(w, held, written)
				held = nil
			}
			if sink.keeping() {
				sink.keep(chunk)
			}
			if a, b := max(pos, clip.Start), min(end, clip.End); a <= b {
				out := chunk[a-pos : b-pos+1]
				if hold && sink.keeping() && b == last {
					held = bytes.Clone(out)
				} else {
					w = writeSome(w, out, written)
				}
			}
			pos = end + 1
		}
		if rerr == io.EOF {
			return held, pos == span.End+1, nil
		}
		if rerr != nil {
			return nil, false, rerr
		}
		if w == nil && !sink.keeping() {
			return nil, false, nil
		}
	}
}

// writeSome writes b to w and flushes, adds what w took to *written, and
// returns w, or nil once a write failed (the client left). A nil w writes
// nothing.
func writeSome(w http.ResponseWriter, b []byte, written *int64) http.ResponseWriter {
	if w == nil || len(b) == 0 {
		return w
	}
	k, err := w.Write(b)
	*written += int64(k)
	if err != nil {
		return nil
	}
	_ = http.NewResponseController(w).Flush()
	return w
}

// keepPart stores the part (pd.Span) that f's fill received and sink
// kept, under pl.key: a piece file's part as keepPiece stores it; an
// inline one combined with the inline partial response stored under its
// key at that moment when they belong together (httpcache.CanCombine: the
// newer fields replace the stored ones, RFC 9111 §3.4), else in its place
// (a pieced one stored there goes, its files with it). A complete
// response stored there is never replaced by a part of one. Once the
// parts cover the representation the entry is a complete response, which
// is returned and stored like any other (L2 too); a partial one stays in
// this replica's L1. A purge of the resource since the fill began stores
// nothing, as for every fill.
func (p *Proxy) keepPart(f *fetch, pd httpcache.PartialDecision, sink *partSink, pl placement) *entry.Entry {
	ctx, c, respH, watch, reqTime, respTime := f.ctx, f.c, f.resp.Header, f.watch, f.reqTime, f.respTime
	if sink.file != nil {
		// Past the store bound, sink.abort has aborted the file and
		// Commit fails.
		ref, err := sink.file.Commit(func(ref entry.BodyFile) []byte {
			return entry.Encode(nil, pieceEntry(c, respH, pd, ref, reqTime, respTime))
		})
		sink.abort.Stop()
		if err != nil {
			p.log.Debug("part not stored: committing its piece failed", "key", pl.key, "err", err)
			return nil
		}
		p.keepPiece(ctx, c, respH, pd, ref, pl, watch, reqTime, respTime)
		return nil
	}
	data := sink.mem
	limit := int64(c.cfg.Config.L1.MaxEntrySize) - headerBytes(respH) - entryOverhead
	h := storedHeader(respH, pd.Strip)
	delete(h, "Content-Range")
	var complete *entry.Entry
	var unused []entry.Piece
	p.parts.Lock()
	defer p.parts.Unlock()
	watch.Commit(httpcache.Tags(respH), func() {
		spans, body, header := []httpcache.ByteRange{pd.Span}, data, h
		var cur entry.Entry
		if _, err := p.store.Get(ctx, pl.key, &cur); err == nil {
			switch {
			case cur.Kind == entry.KindResponse:
				return
			case pieced(&cur):
				// Stored otherwise: replaced, its files go.
				unused = slices.Clone(cur.Partial.Pieces)
			case cur.Kind == entry.KindPartial:
				v, _ := httpcache.StrongValidator(&cur)
				fresh, _ := httpcache.Evaluate(stored(&cur), httpcache.RequestCC{}, p.now())
				if httpcache.CanCombine(v, cur.Partial.Length, fresh == httpcache.UseFresh, pd.Validator, pd.Length) {
					// Combined parts that outgrow an entry give way to
					// the newest part alone.
					if s, b := mergePart(&cur, pd.Span, data); int64(len(b)) <= limit {
						spans, body = s, b
						header = httpcache.MergeNotModified(cur.HTTPHeader(), h)
					}
				}
			}
		}
		e := partEntry(c, header, pd, reqTime, respTime)
		e.Body = body
		if pl.marker != nil {
			p.set(ctx, c, c.prim, pl.marker)
		}
		if len(spans) == 1 && spans[0].Start == 0 && spans[0].End == pd.Length-1 {
			e.Kind = entry.KindResponse
			p.set(ctx, c, pl.key, e)
			complete = e
			return
		}
		e.Partial = &entry.Partial{Length: pd.Length, Spans: make([]entry.Span, len(spans))}
		for i, s := range spans {
			e.Partial.Spans[i] = entry.Span{Start: s.Start, End: s.End}
		}
		// Never p.set: a lease holder's SetShared must not carry a part.
		if err := p.store.Set(ctx, pl.key, e); err != nil {
			p.log.Debug("partial response not stored", "key", pl.key, "err", err)
			unused = nil
		}
	})
	for _, id := range unusedFiles(unused, nil) {
		if p.bodies != nil {
			p.bodies.Remove(id)
		}
	}
	return complete
}

// partEntry is the partial response c's fill stores for a part decided
// as pd, with header (the stored fields of the complete response); the
// caller sets what it holds (Body and Partial).
func partEntry(c *call, header http.Header, pd httpcache.PartialDecision, reqTime, respTime time.Time) *entry.Entry {
	return &entry.Entry{
		Kind:                 entry.KindPartial,
		Host:                 c.host,
		Target:               c.tgt,
		Tags:                 httpcache.Tags(header),
		Status:               http.StatusOK,
		Header:               entry.FieldsFrom(header),
		RequestTime:          reqTime,
		ResponseTime:         respTime,
		InitialAge:           pd.InitialAge,
		Lifetime:             pd.Lifetime,
		StaleWhileRevalidate: pd.StaleWhileRevalidate,
		StaleIfError:         pd.StaleIfError,
		StaleIfUnreachable:   pd.StaleIfUnreachable,
		Flags:                flags(pd.Decision),
	}
}

// pieceEntry is what a piece file's trailer records (bodystore): the
// partial response of this part alone, its one piece the whole file ref.
// No reader takes it for a complete response, and a restart removes it.
func pieceEntry(c *call, respH http.Header, pd httpcache.PartialDecision, ref entry.BodyFile, reqTime, respTime time.Time) *entry.Entry {
	h := storedHeader(respH, pd.Strip)
	delete(h, "Content-Range")
	e := partEntry(c, h, pd, reqTime, respTime)
	e.Partial = &entry.Partial{Length: pd.Length, Pieces: []entry.Piece{{
		Span: entry.Span{Start: pd.Span.Start, End: pd.Span.End}, File: ref,
	}}}
	return e
}

// mergePart returns the spans and bytes of the stored partial response e
// with data, the bytes span, added (its bytes win where they overlap).
func mergePart(e *entry.Entry, span httpcache.ByteRange, data []byte) ([]httpcache.ByteRange, []byte) {
	held := spansOf(e.Partial)
	merged := httpcache.AddSpan(held, span)
	offs := make([]int64, len(merged))
	var total int64
	for i, s := range merged {
		offs[i] = total
		total += spanLen(s)
	}
	at := func(pos int64) int64 {
		for i, s := range merged {
			if s.Start <= pos && pos <= s.End {
				return offs[i] + pos - s.Start
			}
		}
		return -1 // unreachable: merged covers every held and new byte
	}
	out := make([]byte, total)
	var src int64
	for _, s := range held {
		n := spanLen(s)
		copy(out[at(s.Start):], e.Body[src:src+n])
		src += n
	}
	copy(out[at(span.Start):], data)
	return merged, out
}

// partBytes returns the bytes r of the representation that the partial
// response e holds, or nil when no one span of e holds them all.
func partBytes(e *entry.Entry, r httpcache.ByteRange) []byte {
	var off int64
	for _, s := range e.Partial.Spans {
		if s.Start <= r.Start && r.End <= s.End {
			a := off + r.Start - s.Start
			return e.Body[a : a+spanLen(r)]
		}
		off += s.Len()
	}
	return nil
}

// spansOf returns what pa holds as the rules read it: its spans, or its
// pieces with adjacent ones joined.
func spansOf(pa *entry.Partial) []httpcache.ByteRange {
	if len(pa.Pieces) > 0 {
		var out []httpcache.ByteRange
		for _, pc := range pa.Pieces {
			out = httpcache.AddSpan(out, httpcache.ByteRange{Start: pc.Start, End: pc.End})
		}
		return out
	}
	out := make([]httpcache.ByteRange, len(pa.Spans))
	for i, s := range pa.Spans {
		out[i] = httpcache.ByteRange{Start: s.Start, End: s.End}
	}
	return out
}

func spanLen(r httpcache.ByteRange) int64 { return r.End - r.Start + 1 }
