package proxy

import (
	"net/http"
	"net/url"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// servePost forwards a POST as any unsafe request is forwarded (all the
// client's headers, the body streamed, the target invalidated on
// success) and, when the tier stores POST responses
// (defaults.storePostResponses) and httpcache.Decide lets this answer
// stand for its target URI (RFC 9110 §9.3.3: a 200 with explicit
// freshness and a Content-Location naming that URI), stores it where a
// GET of that URI finds it.
//
// A POST is not a fill: the origin receives what the client sent. Its
// answer is stored only when that is what a fill would have sent, so that
// it is the answer a GET's fill would have got for the same headers: no
// header a fill withholds (the unkeyed forwarding headers; in strict mode
// everything off the allowlist) apart from those that describe the
// request's body, and a query the rule does not reshape.
func (p *Proxy) servePost(w http.ResponseWriter, r *http.Request, cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule) outcome {
	if rule.Bypass || oddPath(r.URL.Path) {
		return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwdMethod}, metrics.ResultBypass)
	}
	kb := p.keys.Get().(*keyBuf)
	defer p.keys.Put(kb)
	kb.build(r, rule)
	if kb.Ambiguous() {
		return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwdMethod}, metrics.ResultBypass)
	}
	q := newCacheReq(r, cfg, rule, nil)
	q.kb = kb
	c := p.newCall(&q)
	c.fwd = fillHeadersOf(cfg, rule)
	if !sentAsFill(c.fwd, r.Header) || (rule.Key.ShapesQuery() && string(rule.Key.AppendQuery(nil, r.URL.RawQuery)) != r.URL.RawQuery) {
		return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwdMethod}, metrics.ResultBypass)
	}
	target := &url.URL{Scheme: kb.Scheme(), Host: kb.Host(), Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}

	start := time.Now()
	ctx, wd := p.watch(r.Context(), &cfg.Config.Origin, w)
	defer wd.close()
	out := p.outbound(ctx, r, nil)
	out.Body = wd.sending(out.Body)
	if err := p.bufferRequest(out, cfg); err != nil {
		sn := p.originFailed(w, r, verdict{x: xBypass, rule: rule, fwd: fwdMethod}, wd, err)
		return outcome{result: metrics.ResultError, layer: failedLayer(err), abort: false, sent: sn}
	}
	reqTime := p.now()
	resp, err := p.roundTrip(out, w)
	respTime := p.now()
	if err != nil {
		sn := p.originFailed(w, r, verdict{x: xBypass, rule: rule, fwd: fwdMethod}, wd, err)
		return outcome{result: metrics.ResultError, layer: failedLayer(err), abort: false, sent: sn}
	}
	defer resp.Body.Close()
	httpcache.AddDate(resp.Header, respTime) // as for a fill (RFC 9110 §6.6.1)
	body := wd.receiving(resp.Body)
	h := w.Header()
	copyHeader(h, resp.Header)
	stripTargeted(h, cfg.StripTargeted)
	// Invalidate before the client sees the answer, as pass does; the
	// answer is stored after that, so the invalidation does not remove it.
	p.invalidateAfter(r, resp)

	d := httpcache.Decide(httpcache.Exchange{
		Method: http.MethodPost, Target: target, ReqHeader: q.reqH,
		Status: resp.StatusCode, RespHeader: resp.Header,
		RequestTime: reqTime, ResponseTime: respTime,
	}, rule.Policy)
	limit := int64(cfg.Config.L1.MaxEntrySize) - headerBytes(resp.Header) - entryOverhead
	storing := d.Store && resp.ContentLength <= limit && !isEventStream(resp.Header)
	p.setStatus(h, verdict{x: xBypass, rule: rule, fwd: fwdMethod, stored: storing}, resp.StatusCode)
	wd.answering(h)
	w.WriteHeader(resp.StatusCode)
	status := resp.StatusCode
	if !storing {
		n, err := p.relayAhead(w, resp, body)
		if err != nil {
			p.bodyFailed(r, wd, err)
		}
		return outcome{result: metrics.ResultBypass, layer: metrics.LayerOrigin, abort: err != nil, sent: sent{status, n}}
	}
	// Watched from here on, after this request's own invalidation: a purge
	// of the URI or of one of the answer's tags while its body arrives
	// means it is served but not stored.
	watch := p.inval.Watch(c.host, c.tgt)
	defer watch.End()
	wd.storeUntil(start.Add(cfg.Config.Origin.Timeout.Std()), func() {})
	cw := newClientWriter(w, wd.clientTook)
	defer cw.stop()
	data, held, complete, err := p.tee(cw, body, resp.ContentLength, limit, &wd.late, wd.stopStoring)
	if err != nil {
		p.bodyFailed(r, wd, err)
		return outcome{result: metrics.ResultBypass, layer: metrics.LayerOrigin, abort: true, sent: sent{status, cw.end(nil)}}
	}
	if !complete {
		return outcome{result: metrics.ResultBypass, layer: metrics.LayerOrigin, abort: false, sent: sent{status, cw.end(nil)}}
	}
	wd.stop()
	e := responseEntry(c, resp, d, reqTime, respTime)
	e.Body = data
	p.keep(ctx, c, nil, e, p.place(ctx, c, resp.Header, r), watch)
	// Stored: now the client may have its final bytes, and a GET it sends
	// next finds the answer (read your own write).
	return outcome{result: metrics.ResultBypass, layer: metrics.LayerOrigin, abort: false, sent: sent{status, cw.end(held)}}
}

// sentAsFill reports whether a request with header h sent the origin only
// what a fill forwarding fh would have sent, apart from the fields that
// describe the request's own content.
func sentAsFill(fh *fillHeaders, h http.Header) bool {
	for name := range h {
		switch name {
		case "Content-Type", "Content-Length", "Content-Encoding", "Content-Language":
			continue
		case "Cookie":
			// A strict fill sends only the keyed cookies.
			if fh.strict && !containsFold(fh.allow, "Cookie") {
				return false
			}
		}
		if !fh.forwards(name) {
			return false
		}
	}
	return true
}
