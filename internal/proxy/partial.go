package proxy

import (
	"net/http"
	"strconv"
	"time"

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
// missing run only.
func (rg *rangeFill) alone() bool {
	return rg.part == nil || rg.ranged || rg.part.Partial.Pieces != nil
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
