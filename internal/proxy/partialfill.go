package proxy

import (
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// Filling part of a representation (partial.go says what is stored and
// when): the origin's answer to a range or to the gap of a stored part,
// relayed or combined with the stored bytes for the client, and kept
// (keepPart) as a part, a piece file (partialfile.go) or, once the parts
// cover the representation, a complete response.

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
			assembled(e, pd.Length)
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
	fl := flags(pd.Decision)
	if c.norm {
		// Asked with the tier's Accept-Encoding: once complete, a coded
		// entry (assembled).
		header = header.Clone()
		codedHeader(header)
		fl |= entry.FlagCoded
	}
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
		Flags:                fl,
	}
}

// assembled sets what a coded response made whole from parts records of
// its coding: the parts were never checked as one stream, so one in a
// coding is served only as stored (coded.go); identity is its own length.
func assembled(e *entry.Entry, length int64) {
	if e.Flags&entry.FlagCoded == 0 {
		return
	}
	if c, _ := storedCoding(e); c == httpcache.CodingIdentity {
		e.DecodedSize = length
		return
	}
	e.Flags |= entry.FlagUndecodable
	e.DecodedSize = -1
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
