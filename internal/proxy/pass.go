package proxy

import (
	"context"
	"net/http"
	"net/url"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// pass forwards r to the origin and streams the answer back, storing
// nothing. It is tied to the client's context: when the client leaves, the
// origin request is cancelled. Only the response-header and idle timeouts
// apply: a stream or an upload may last as long as bytes keep moving.
func (p *Proxy) pass(w http.ResponseWriter, r *http.Request, cfg *tierconfig.Compiled, v verdict, result string) outcome {
	ctx, wd := p.watch(r.Context(), &cfg.Config.Origin, w)
	defer wd.close()
	// Nothing pass fetches is stored, so the client's forwarding headers
	// cannot poison anything and go to the origin as they are.
	out := p.outbound(ctx, r, nil)
	out.Body = wd.sending(out.Body)
	err := p.bufferRequest(out, cfg)
	var resp *http.Response
	if err == nil {
		resp, err = p.roundTrip(out, w)
	}
	if err != nil {
		sn := p.originFailed(w, r, v, wd, err)
		return outcome{result: metrics.ResultError, layer: failedLayer(err), abort: false, sent: sn}
	}
	defer resp.Body.Close()
	body := wd.receiving(resp.Body)
	h := w.Header()
	copyHeader(h, resp.Header)
	stripTargeted(h, cfg.StripTargeted)
	p.setStatus(h, v, resp.StatusCode)
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		// Invalidate before the client sees the answer, so that a client
		// that reads its write back never gets the old entry.
		p.invalidateAfter(r, resp)
	}
	wd.answering(h)
	w.WriteHeader(resp.StatusCode)
	n, err := p.relayAhead(w, resp, body)
	if err != nil {
		p.bodyFailed(r, wd, err)
	}
	return outcome{result: result, layer: metrics.LayerOrigin, abort: err != nil, fwd: v.fwd, sent: sent{resp.StatusCode, n}}
}

// serveAmbiguous forwards, untouched and uncached, a request whose path
// readings select different rules (Compiled.MatchRequest): the cache
// cannot know which resource the origin serves for it. Unsafe methods
// still invalidate their target as pass does for any write.
func (p *Proxy) serveAmbiguous(w http.ResponseWriter, r *http.Request, cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule, dbg *debugInfo) outcome {
	p.m.AmbiguousRequest(metrics.AmbiguousPath)
	fwd := fwdBypass
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		fwd = fwdMethod
	}
	if dbg != nil {
		dbg.why = whyAmbiguousPath
	}
	return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwd, detail: detailAmbiguousPath, dbg: dbg}, metrics.ResultBypass)
}

// serveUnsafe forwards methods other than GET and HEAD (a POST whose
// answer the tier may store: post.go).
func (p *Proxy) serveUnsafe(w http.ResponseWriter, r *http.Request, cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule, dbg *debugInfo) outcome {
	if r.Method == http.MethodPost && cfg.Config.Defaults.StorePostResponses {
		return p.servePost(w, r, cfg, rule)
	}
	if dbg != nil {
		dbg.why = httpcache.WhyMethod
	}
	return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwdMethod, dbg: dbg}, metrics.ResultBypass)
}

// invalidateAfter applies RFC 9111 §4.4: a non-error response to an unsafe
// method invalidates the target URI and same-origin Location and
// Content-Location, under both schemes (a write through https must not
// leave the http entry behind).
func (p *Proxy) invalidateAfter(r *http.Request, resp *http.Response) {
	scheme := cachekey.RequestScheme(r)
	target := &url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	urls := httpcache.InvalidationTargets(r.Method, resp.StatusCode, target, resp.Header)
	if len(urls) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
	defer cancel()
	p.inval.Invalidate(ctx, urls)
}
