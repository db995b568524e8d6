package proxy

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
)

// headUpdate forwards the HEAD r for c's stored response (c.stale) and
// applies its answer: a 200 whose validators and length agree with the
// stored response updates its header fields as a 304 would (the client
// is then served the updated response, X-Cache REVALIDATED); one that
// disagrees removes it; anything else leaves it. The HEAD is sent as a
// fill is (the unkeyed forwarding headers withheld, the keyed query), since
// its fields may be stored; it is bound to the client like a pass-through.
func (p *Proxy) headUpdate(w http.ResponseWriter, r *http.Request, c *call) outcome {
	watch := p.inval.Watch(c.host, c.tgt)
	defer watch.End()
	ctx, wd := p.watch(r.Context(), &c.cfg.Config.Origin, w)
	defer wd.close()

	out := p.fillRequest(ctx, r, c)
	out.Body = wd.sending(out.Body)
	for _, k := range clientConditionals {
		// Its answer must describe the representation, not the client's
		// copy; the client's conditional is answered from the result.
		delete(out.Header, k)
	}
	reqTime := p.now()
	resp, err := p.roundTrip(out, w)
	respTime := p.now()
	if err != nil {
		if p.staleOnError(c) || p.staleIfUnreachable(c, wd.reason(err)) {
			return p.serveStale(w, r, c, 0)
		}
		sn := p.originFailed(w, r, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, wd, err)
		return outcome{result: metrics.ResultError, layer: failedLayer(err), abort: false, sent: sn}
	}
	defer resp.Body.Close()
	wd.stop()
	httpcache.AddDate(resp.Header, respTime) // as for a fill (RFC 9110 §6.6.1)
	if resp.StatusCode >= 500 && p.staleOnError(c) {
		return p.serveStale(w, r, c, resp.StatusCode)
	}

	headH, storedLen := http.Header(resp.Header), storedLength(c.stale)
	if c.stale.Flags&entry.FlagCoded != 0 {
		// A coded entry says Vary: Accept-Encoding whatever the origin
		// does, and one the cache compressed is, to the origin, its
		// identity length.
		headH = resp.Header.Clone()
		codedHeader(headH)
		if c.stale.Flags&entry.FlagCompressed != 0 {
			storedLen = c.stale.DecodedSize
		}
	}
	switch httpcache.EffectOfHead(c.stale.Status, c.stale, storedLen, resp.StatusCode, headH) {
	case httpcache.HeadUpdates:
		e := p.headUpdated(ctx, c, resp.Header, reqTime, respTime, watch)
		v := verdict{x: xRevalidated, rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: resp.StatusCode, stored: true}
		sn := p.serveEntry(w, r, e, httpcache.CurrentAge(stored(e), p.now()), v, nil)
		return outcome{result: metrics.ResultRevalidated, layer: c.layer, abort: false, sent: sn}
	case httpcache.HeadInvalidates:
		// Removed only while it is still the response this HEAD was
		// compared with: a fill may have stored a newer one meanwhile.
		watch.Commit(nil, func() {
			if p.stillStored(ctx, c) {
				_ = p.store.Delete(ctx, c.key)
				p.superseded(c, nil)
			}
		})
	}
	h := w.Header()
	copyHeader(h, resp.Header)
	stripTargeted(h, c.cfg.StripTargeted)
	if c.norm {
		// Asked with the tier's Accept-Encoding: a coding this client does
		// not take is not announced to it (a HEAD has no body to decode).
		codedHeader(h)
		ce := h["Content-Encoding"]
		if cd := httpcache.CodingOf(ce); cd != httpcache.CodingIdentity && !httpcache.Acceptable(r.Header, cd, strings.Join(ce, ", ")) {
			delete(h, "Content-Encoding")
			delete(h, "Content-Length")
			retag(h, nil, "identity")
		}
	}
	p.setStatus(h, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, resp.StatusCode)
	w.WriteHeader(resp.StatusCode)
	return outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false, sent: sent{status: resp.StatusCode}}
}

// headUpdated merges the HEAD's header fields into c's stored response
// (RFC 9111 §3.2, as for a 304), decides it again and stores it, unless a
// purge overtook the HEAD or the stored response changed meanwhile. When
// the merged response may not be stored (the HEAD now says no-store or
// private, say), the stored one is removed. It returns the response to
// serve either way.
func (p *Proxy) headUpdated(ctx context.Context, c *call, head http.Header, reqTime, respTime time.Time, watch *invalidate.Watch) *entry.Entry {
	e, d := updatedEntry(c, head, reqTime, respTime)
	watch.Commit(e.Tags, func() {
		if !p.stillStored(ctx, c) {
			return
		}
		if d.Store {
			p.set(ctx, c, c.key, &e)
			return
		}
		_ = p.store.Delete(ctx, c.key)
		p.superseded(c, nil)
	})
	return &e
}

// stillStored reports whether c's key still holds the response c.stale
// was looked up as (same response time and body).
func (p *Proxy) stillStored(ctx context.Context, c *call) bool {
	var cur entry.Entry
	if _, err := p.store.Get(ctx, c.key, &cur); err != nil || cur.Kind != entry.KindResponse {
		return false
	}
	if !cur.ResponseTime.Equal(c.stale.ResponseTime) || storedLength(&cur) != storedLength(c.stale) {
		return false
	}
	return (cur.File == nil) == (c.stale.File == nil) && (cur.File == nil || cur.File.ID == c.stale.File.ID)
}

// storedLength is the length of e's body, inline or in a file.
func storedLength(e *entry.Entry) int64 {
	if e.File != nil {
		return e.File.Size
	}
	return int64(len(e.Body))
}
