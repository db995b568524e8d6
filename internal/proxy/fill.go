package proxy

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// markerLifetime is how long a Vary marker lives. Markers are tiny; their
// variants carry their own freshness, and a marker outliving them only
// costs a lookup.
const markerLifetime = 24 * time.Hour

// entryOverhead is what an encoded entry needs besides headers and body
// (fixed fields, key identity, tags), with room to spare.
const entryOverhead = 2048

// fill fetches r from the origin, answers the client with it, and stores
// it when the rules allow. l is the lead of the flight the fill runs for
// (it publishes the waiters' result through it as soon as it knows), or
// nil when the request fetches for itself. The origin fetch is detached from the
// client's cancellation (waiters and the cache still need it). It is bound
// by the response-header and idle timeouts, and while its body is being
// stored by origin.timeout from its start: past that the response is
// served but not stored (timeouts.go).
func (p *Proxy) fill(w http.ResponseWriter, r *http.Request, c *call, l *lead) outcome {
	staleRes := func() shared {
		return shared{e: c.stale, v: verdict{x: xStaleCoal, rule: c.rule, fwd: c.why, collapsed: true}, out: outcome{result: metrics.ResultStale, layer: c.layer, abort: false}}
	}
	// detached: a fill going to a body file went on on a goroutine of its
	// own (fillfile.go), which ends the watch, the watchdog and the
	// response.
	var detached bool
	// Watch before asking the origin: a purge of this resource from here
	// on means the answer may be served but not stored.
	watch := p.inval.Watch(c.host, c.tgt)
	defer func() {
		if !detached {
			watch.End()
		}
	}()
	base := context.WithoutCancel(r.Context())
	if c.background {
		base = p.ctx
	}
	start := time.Now()
	// A fill may be stored, and waiters depend on it: its headers must
	// come within origin.timeout too (then stale-if-error can answer).
	o := c.cfg.Config.Origin
	o.ResponseHeaderTimeout = min(o.ResponseHeaderTimeout, o.Timeout)
	ctx, wd := p.watch(base, &o, w)
	defer func() {
		if !detached {
			wd.close()
		}
	}()

	out := p.fillRequest(ctx, r, c)
	out.Body = wd.sending(out.Body)
	// The client's validators reach the origin only on a fill of its own
	// (l == nil) with nothing stored, when the tier says so (validators.go).
	forwarded := l == nil && forwardsValidators(c, r)
	for _, k := range clientConditionals {
		delete(out.Header, k)
	}
	if forwarded {
		forwardValidators(out.Header, r.Header)
	}
	validating := false
	if c.stale != nil {
		for k, v := range httpcache.ValidatorsFrom(c.stale) {
			out.Header[k] = v
			validating = true
		}
	}
	if c.rng != nil {
		// Part of the representation (partial.go).
		out.Header["Range"] = []string{c.rng.ask}
		if c.rng.ifRange != "" {
			out.Header["If-Range"] = []string{c.rng.ifRange}
		}
	}
	reqTime := p.now()
	resp, err := p.roundTrip(out, w)
	respTime := p.now()
	originTime := time.Since(start)
	if err != nil {
		if p.staleOnError(c) || p.staleIfUnreachable(c, wd.reason(err)) {
			l.Publish(staleRes())
			return p.serveStale(w, r, c, 0)
		}
		l.Publish(shared{})
		sn := p.originFailed(w, r, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, wd, err)
		return outcome{result: metrics.ResultError, layer: failedLayer(err), abort: false, sent: sn}
	}
	defer func() {
		if !detached {
			resp.Body.Close()
		}
	}()
	// What is stored and served carries the Date the response arrived
	// with, or the time it arrived (RFC 9110 §6.6.1): ages, heuristics and
	// If-Modified-Since are measured from it.
	httpcache.AddDate(resp.Header, respTime)
	body := wd.receiving(resp.Body)
	if resp.StatusCode >= 500 && p.staleOnError(c) {
		res := staleRes()
		res.v.fwdStatus = resp.StatusCode
		l.Publish(res)
		return p.serveStale(w, r, c, resp.StatusCode)
	}
	if c.rng != nil && resp.StatusCode != http.StatusOK {
		// A 200 is the whole representation, filled as usual; the rest
		// answers the range (partial.go).
		return p.partAnswered(ctx, w, r, c, l, resp, body, wd, watch, start, reqTime, respTime)
	}
	if resp.StatusCode == http.StatusNotModified && validating {
		wd.stop()
		e, kept := p.revalidated(ctx, c, resp.Header, reqTime, respTime, watch)
		if kept {
			l.Publish(shared{e: e, v: verdict{x: xRevalCoal, rule: c.rule, fwd: c.why, fwdStatus: http.StatusNotModified, stored: true, collapsed: true}, out: outcome{result: metrics.ResultRevalidated, layer: c.layer, abort: false}})
		} else {
			// Overtaken by a purge (or not storable): a request that joined
			// meanwhile, perhaps after its own write, fetches afresh.
			l.Publish(shared{overtaken: true})
		}
		body := c.body
		if body == nil {
			var st bodyState
			switch body, st = p.openBody(r, c.key, e); st {
			case bodyMissing:
				// The stored body file went meanwhile: fetch it whole.
				resp.Body.Close()
				c.stale, c.mark = nil, nil
				return p.fill(w, r, c, nil)
			case bodyBusy:
				// It is there, but cannot be opened for now.
				resp.Body.Close()
				return p.passBusy(w, r, c.cfg, c.rule, c.dbg)
			}
			if body != nil {
				defer body.Close()
			}
		}
		v := verdict{x: xRevalidated, rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: http.StatusNotModified, stored: kept}
		sn := p.serveEntry(w, r, e, httpcache.CurrentAge(stored(e), p.now()), v, body)
		return outcome{result: metrics.ResultRevalidated, layer: c.layer, abort: false, sent: sn}
	}

	exchange := httpcache.Exchange{
		Method: http.MethodGet, ReqHeader: c.reqH,
		Status: resp.StatusCode, RespHeader: resp.Header,
		RequestTime: reqTime, ResponseTime: respTime,
	}
	d := httpcache.Decide(exchange, c.rule.Policy)
	limit := int64(c.cfg.Config.L1.MaxEntrySize) - headerBytes(resp.Header) - entryOverhead
	storeMax, fileAbove := limit, limit
	if p.bodies != nil {
		// Bodies above the threshold (or above what an L1 entry holds, if
		// that is less) go to a body file, up to bodyStore.maxObjectSize.
		threshold, maxObject := bodyLimits(c.cfg)
		storeMax, fileAbove = max(limit, maxObject), min(limit, threshold)
	}
	if c.dbg != nil {
		c.dbg.decided, c.dbg.d = true, d
	}
	why := d.Why
	if d.Store && (resp.ContentLength > storeMax || isEventStream(resp.Header)) {
		d.Store, why = false, whyTooLarge
		if isEventStream(resp.Header) {
			why = whyEventStream
		}
		if c.dbg != nil {
			c.dbg.why = why
		}
	}
	miss := outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, fwd: c.why, stored: d.Store, notStored: why, originTime: originTime}

	h := w.Header()
	copyHeader(h, resp.Header)
	stripTargeted(h, c.cfg.StripTargeted)
	p.setMissAge(h, exchange)
	// The client's own conditional is answered from the fresh response.
	// A background refresh has no client to stream to.
	bodyW := w
	if c.background {
		bodyW = nil
	}
	v := verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: resp.StatusCode, stored: d.Store}
	if httpcache.NotModified(r.Header, resp.StatusCode, resp.Header) {
		httpcache.OmitForNotModified(h)
		p.setStatus(h, v, http.StatusNotModified)
		w.WriteHeader(http.StatusNotModified)
		bodyW = nil
	} else {
		p.setStatus(h, v, resp.StatusCode)
		w.WriteHeader(resp.StatusCode)
	}
	status := resp.StatusCode
	if bodyW == nil && !c.background {
		status = http.StatusNotModified
	}

	if !d.Store {
		l.Publish(shared{})
		if !forwarded || resp.StatusCode != http.StatusNotModified {
			// A 304 to the client's own validators says nothing about
			// what may be stored for everyone.
			p.uncacheable(ctx, c, r, resp.StatusCode)
		}
		if bodyW == nil {
			return miss.with(false, sent{status: status})
		}
		n, err := p.relayAhead(bodyW, resp, body)
		if err != nil {
			p.bodyFailed(r, wd, err)
			return miss.with(true, sent{status, n})
		}
		return miss.with(false, sent{status, n})
	}

	// Stored fills are bound as a whole; past the bound the fill gives up
	// storing and its waiters fetch for themselves (no hit-for-miss
	// marker: the response was cacheable, only slow).
	wd.storeUntil(start.Add(c.cfg.Config.Origin.Timeout.Std()), func() { l.Publish(shared{}) })
	e := responseEntry(c, resp, d, reqTime, respTime)
	if p.bodies != nil && (resp.ContentLength < 0 || resp.ContentLength > fileAbove) {
		var out outcome
		out, detached = p.fillFile(ctx, bodyW, r, c, l, e, resp, body, wd, watch, fileAbove, storeMax)
		out.sent.status = status // fillFile counts the bytes
		return miss.as(out)
	}
	cw := newClientWriter(bodyW, wd.clientTook)
	defer cw.stop()
	data, held, complete, err := p.tee(cw, body, resp.ContentLength, limit, &wd.late, func() {
		// Too large to store: waiters fetch for themselves and later
		// requests skip coalescing.
		wd.stopStoring()
		l.Publish(shared{})
		p.uncacheable(ctx, c, r, resp.StatusCode)
	})
	if err != nil {
		p.bodyFailed(r, wd, err)
		l.Publish(shared{})
		return miss.with(bodyW != nil, sent{status, cw.end(nil)})
	}
	if !complete {
		return miss.with(false, sent{status, cw.end(nil)})
	}
	wd.stop()
	e.Body = data
	p.keep(ctx, c, l, e, p.place(ctx, c, resp.Header, r), watch)
	// The shared fetch is over too: a replica asked next finds the entry
	// in L2 (SetShared) and no lease.
	c.releaseLease()
	// Stored and handed to the waiters: now the client may have its
	// final bytes, and whatever it asks next finds the entry.
	return miss.with(false, sent{status, cw.end(held)})
}

// setMissAge sets in h, the header of a response the origin just sent in
// exchange x, the Age its stored entry has (RFC 9111 §4.2.3), not the
// origin's Age alone: the response delay and the origin's Date count too,
// as they will for every hit after this miss (partial answers too).
func (p *Proxy) setMissAge(h http.Header, x httpcache.Exchange) {
	age := httpcache.CorrectedInitialAge(x) + max(0, p.now().Sub(x.ResponseTime))
	if v, ok := httpcache.ForwardedAge(x.RespHeader, age); ok {
		h["Age"] = []string{v}
	}
}

// fillRequest is the request a fill (or a HEAD that may update a stored
// response) sends to the origin for r: what the fill's answer may be
// stored for, so the headers a fill withholds are not sent (c.fwd: the
// unkeyed forwarding headers; in strict mode everything off the
// allowlist), and the query is the keyed one: query parameters the key
// drops (utm_*) are not sent, or an origin that reflects its URL would
// store a client's choice for everyone.
func (p *Proxy) fillRequest(ctx context.Context, r *http.Request, c *call) *http.Request {
	c.fwd = fillHeadersOf(c.cfg, c.rule)
	if c.mark != nil {
		c.fwd.vary = c.mark.Vary
	}
	out := p.outbound(ctx, r, c.fwd)
	if c.rule.Key.ShapesQuery() {
		out.URL.RawQuery = string(c.rule.Key.AppendQuery(nil, r.URL.RawQuery))
	}
	return out
}

// fillHeadersOf is which request headers a fill under rule sends.
func fillHeadersOf(cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule) *fillHeaders {
	return &fillHeaders{keyed: rule.Key.Headers(), cookies: rule.Key.Cookies(), strict: cfg.StrictHeaders, allow: cfg.StrictAllow}
}

// keep stores the complete response e of c's fill where pl says and
// hands it to the flight's waiters. A fill overtaken by an invalidation of
// its resource is not stored (its body file goes), and its waiters join a
// new flight: they may be reading their own write back.
func (p *Proxy) keep(ctx context.Context, c *call, l *lead, e *entry.Entry, pl placement, watch *invalidate.Watch) {
	var res shared
	if p.put(ctx, c, e, pl, watch) {
		p.superseded(c, e)
		res = shared{e: e, v: verdict{x: xMissCoalesced, rule: c.rule, fwd: c.why, stored: true, collapsed: true}, out: outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false}, vary: pl.names, varyKey: pl.vk}
	} else {
		if e.File != nil {
			p.bodies.Remove(e.File.ID)
		}
		res = shared{overtaken: true}
	}
	l.Publish(res)
}

func flags(d httpcache.Decision) entry.Flag {
	var fl entry.Flag
	if d.MustRevalidate {
		fl |= entry.FlagMustRevalidate
	}
	if d.NoCache {
		fl |= entry.FlagNoCache
	}
	return fl
}

// responseEntry is the entry a fill stores for resp, decided as d: the
// fill's key parts, the stored header fields and the freshness d gives.
// The caller sets the body (inline or a file reference).
func responseEntry(c *call, resp *http.Response, d httpcache.Decision, reqTime, respTime time.Time) *entry.Entry {
	return &entry.Entry{
		Kind:                 entry.KindResponse,
		Host:                 c.host,
		Target:               c.tgt,
		Tags:                 httpcache.Tags(resp.Header),
		Status:               resp.StatusCode,
		Header:               entry.FieldsFrom(storedHeader(resp.Header, d.Strip)),
		RequestTime:          reqTime,
		ResponseTime:         respTime,
		InitialAge:           d.InitialAge,
		Lifetime:             d.Lifetime,
		StaleWhileRevalidate: d.StaleWhileRevalidate,
		StaleIfError:         d.StaleIfError,
		StaleIfUnreachable:   d.StaleIfUnreachable,
		Flags:                flags(d),
	}
}

// updatedEntry merges the header fields of an answer that carries no body
// (a 304, or a HEAD's 200) into c's stored response (RFC 9111 §3.2,
// §4.3.4, §4.3.5), decides the merged response again with this request's
// header and returns it with that decision; it stores nothing.
func updatedEntry(c *call, h http.Header, reqTime, respTime time.Time) (entry.Entry, httpcache.Decision) {
	merged := httpcache.MergeNotModified(c.stale.HTTPHeader(), h)
	d := httpcache.Decide(httpcache.Exchange{
		Method: http.MethodGet, ReqHeader: c.reqH,
		Status: c.stale.Status, RespHeader: merged,
		RequestTime: reqTime, ResponseTime: respTime,
	}, c.rule.Policy)
	e := *c.stale
	e.Header = entry.FieldsFrom(storedHeader(merged, d.Strip))
	e.Tags = httpcache.Tags(merged)
	e.RequestTime, e.ResponseTime = reqTime, respTime
	e.InitialAge, e.Lifetime = d.InitialAge, d.Lifetime
	e.StaleWhileRevalidate, e.StaleIfError = d.StaleWhileRevalidate, d.StaleIfError
	e.StaleIfUnreachable = d.StaleIfUnreachable
	e.Flags = flags(d)
	return e, d
}

// revalidated applies a 304 to the stored response (RFC 9111 §4.3.4) and
// stores the result unless a purge overtook the revalidation; it returns
// the entry to serve and whether it was stored.
func (p *Proxy) revalidated(ctx context.Context, c *call, h304 http.Header, reqTime, respTime time.Time, watch *invalidate.Watch) (*entry.Entry, bool) {
	e, d := updatedEntry(c, h304, reqTime, respTime)
	if !d.Store {
		// Decided with this request's header: when it is the request that
		// made the answer unstorable (no-store, credentials), the stored
		// response stays for everyone else; only the origin's own word
		// (its 304 now says no-store, say) removes it.
		if !c.rcc.NoStore && !httpcache.Credentialed(c.reqH) {
			_ = p.store.Delete(ctx, c.key)
		}
		return &e, false
	}
	stored := false
	watch.Commit(e.Tags, func() {
		// The stored response was looked up before the watch began: if a
		// purge took it in between, the 304 must not bring it back.
		var cur entry.Entry
		if _, err := p.store.Get(ctx, c.key, &cur); err != nil || cur.Kind != entry.KindResponse {
			return
		}
		p.set(ctx, c, c.key, &e)
		stored = true
	})
	return &e, stored
}

// placement is where a fill's response goes: under key, behind marker
// (written first, when not nil: a new or replaced Vary marker) when the
// response varies or the rule keys on request headers or cookies.
type placement struct {
	key    string
	marker *entry.Entry
	// The response's Vary names and the request's values for them.
	names []string
	vk    []byte
}

// place decides where the response with header respH to c's request r is
// stored. A body file is bound to that key, so a fill that writes one
// places its response before the body (the marker is only written when
// the response is stored).
func (p *Proxy) place(ctx context.Context, c *call, respH http.Header, r *http.Request) placement {
	names, _ := httpcache.VaryNames(respH)
	// The variant is keyed by what the origin received: a Vary field this
	// fill withheld counts as absent (the next fill, knowing the marker,
	// forwards it).
	asSent := sentHeader{r.Header, c.fwd}
	var pl placement
	pl.names = names
	if len(names) > 0 {
		// The leader's values, for its waiters to compare theirs with.
		pl.vk = httpcache.AppendVaryKey(nil, names, asSent, c.rule.Policy.Vary)
	}
	if len(names) == 0 && c.extras == "" {
		pl.key = c.prim
		return pl
	}
	m := c.mark
	if m == nil {
		// Another fill may have created the marker since our lookup
		// (a waiter whose variant differed from its leader's); reuse it
		// rather than retire the variant that fill just stored.
		var cur entry.Entry
		if _, err := p.store.Get(ctx, c.prim, &cur); err == nil && cur.Kind == entry.KindVary {
			m = detach(&cur)
		}
	}
	if m == nil || !slices.Equal(m.Vary, names) {
		// A new marker (new nonce) retires every variant of the old one.
		m = &entry.Entry{
			Kind: entry.KindVary, Host: c.host, Target: c.tgt,
			Vary: names, Nonce: rand.Uint64(),
			ResponseTime: p.now(), Lifetime: markerLifetime,
		}
		pl.marker = m
	}
	pl.key = string(cachekey.AppendVariantKey([]byte(c.prim), m.Nonce, c.extras, names, asSent, c.rule.Policy.Vary))
	return pl
}

// put stores e where pl says. A purge of the resource or of one of its
// tags since the fetch began means the response is served but not
// stored. It reports whether e was stored.
func (p *Proxy) put(ctx context.Context, c *call, e *entry.Entry, pl placement, watch *invalidate.Watch) bool {
	return watch.Commit(e.Tags, func() {
		if pl.marker != nil {
			p.set(ctx, c, c.prim, pl.marker)
		}
		p.set(ctx, c, pl.key, e)
	})
}

func (p *Proxy) set(ctx context.Context, c *call, key string, e *entry.Entry) {
	var err error
	if c.shared {
		err = p.cluster.SetShared(ctx, key, e)
	} else {
		err = p.store.Set(ctx, key, e)
	}
	if err != nil {
		p.log.Debug("not stored", "key", key, "err", err)
		if e.File != nil && p.bodies != nil {
			p.bodies.Remove(e.File.ID)
		}
		return
	}
	// Set and SetShared keep a body file's entry in L1; a body within
	// l2.maxBodySize follows it into L2 with its chunks.
	p.shareBody(c, key, e)
}

// uncacheable applies to c's key what an answer of this status that cannot
// be stored does to it (httpcache.OnUncacheable): nothing, the stored
// variant removed, or a hit-for-miss marker in place of what the key held.
func (p *Proxy) uncacheable(ctx context.Context, c *call, r *http.Request, status int) {
	switch httpcache.OnUncacheable(status, r.Header, c.rcc, c.stale != nil, c.mark != nil) {
	case httpcache.UncacheableRemoves:
		_ = p.store.Delete(ctx, c.key)
		p.superseded(c, nil)
	case httpcache.UncacheableMarks:
		p.set(ctx, c, c.prim, &entry.Entry{
			Kind: entry.KindUncacheable, Host: c.host, Target: c.tgt,
			ResponseTime: p.now(), Lifetime: c.cfg.Config.Defaults.HitForMissTTL.Std(),
		})
		p.superseded(c, nil)
	}
}

// superseded removes the body file of c's stored response once e (nil:
// nothing) has taken its place, unless e still uses it (a revalidated
// response keeps its body). Files of entries that leave L1 otherwise
// (evicted, or replaced behind this fill's back) stay until the body
// store's own eviction reclaims them.
func (p *Proxy) superseded(c *call, e *entry.Entry) {
	if c.stale == nil || c.stale.File == nil || p.bodies == nil {
		return
	}
	if e != nil && e.File != nil && e.File.ID == c.stale.File.ID {
		return
	}
	p.bodies.Remove(c.stale.File.ID)
}

// staleOnError reports whether c's stored response may stand in for a
// failed origin (RFC 5861 stale-if-error).
func (p *Proxy) staleOnError(c *call) bool {
	return c.stale != nil && httpcache.StaleOnErrorOK(stored(c.stale), c.rcc, p.now())
}

// staleIfUnreachable reports whether c's stored response may stand in
// for an origin that could not be reached (err, RFC 9111 §4.2.4), within
// the window the tier gave it when it was stored.
func (p *Proxy) staleIfUnreachable(c *call, err error) bool {
	return c.stale != nil && unreachable(err) && httpcache.StaleIfUnreachableOK(stored(c.stale), c.rcc, p.now())
}

// serveStale serves c's stored response in place of the origin's answer:
// fwdStatus is the origin's status (a 5xx), 0 when it could not be asked.
func (p *Proxy) serveStale(w http.ResponseWriter, r *http.Request, c *call, fwdStatus int) outcome {
	body := c.body
	if body == nil {
		var st bodyState
		if body, st = p.openBody(r, c.key, c.stale); st != bodyOpened {
			sn := p.originError(w, r, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, errStaleBodyGone)
			return outcome{result: metrics.ResultError, layer: metrics.LayerOrigin, abort: false, sent: sn}
		}
		if body != nil {
			defer body.Close()
		}
	}
	v := verdict{x: pick(c.layer, xStaleL1, xStaleL2), rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: fwdStatus}
	sn := p.serveEntry(w, r, c.stale, httpcache.CurrentAge(stored(c.stale), p.now()), v, body)
	return outcome{result: metrics.ResultStale, layer: c.layer, abort: false, sent: sn}
}

// errStaleBodyGone: the origin failed and the stored response that could
// have stood in for it lost its body file.
var errStaleBodyGone = errors.New("origin failed and the stored response's body file is gone")

// tee streams body to the client cw (nil: nobody) while collecting it,
// up to limit bytes, for the cache. Past the limit it calls overflow once
// and stops collecting; once late is set it stops collecting too. It keeps
// reading after the client has gone for as long as it is collecting, since
// the fill serves everyone; with nobody left to serve it stops. complete
// is true when the whole body was collected. While it collects, the
// client is written on cw's own goroutine and never paces it
// (fillclient.go); the caller's cw.end waits for the client.
//
// A client that knows the body's length (hint, its Content-Length) has
// the whole response with its final byte, and may ask again at once: so
// the read that completes a collected body is not written to the client
// but returned as held, for the caller to send (cw.end) once the response
// is stored and handed to the flight's waiters (read your own fill). A
// body of unknown length ends for the client only when the handler
// returns, which is after that anyway.
func (p *Proxy) tee(cw *clientWriter, body io.Reader, hint, limit int64, late *atomic.Bool, overflow func()) (data, held []byte, complete bool, err error) {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	collect := true
	if hint >= 0 && hint <= limit {
		data = make([]byte, 0, hint)
	}
	for {
		n, rerr := body.Read(buf)
		if collect && late.Load() {
			collect, data = false, nil
		}
		if held != nil && (n > 0 || !collect) {
			// More than announced, or no longer stored: nothing to wait
			// for before the client has them.
			if collect {
				cw.stream(data)
			} else {
				cw.write(held)
			}
			held = nil
		}
		if n > 0 {
			if collect {
				if int64(len(data)+n) > limit {
					collect, data = false, nil
					overflow()
				} else {
					data = append(data, buf[:n]...)
				}
			}
			switch {
			case collect && !cw.left() && hint >= 0 && int64(len(data)) == hint:
				held = data[len(data)-n:]
			case collect:
				cw.stream(data)
			default:
				cw.write(buf[:n])
			}
		}
		if cw.left() && !collect {
			return nil, nil, false, nil
		}
		if rerr == io.EOF {
			if data == nil && collect {
				data = []byte{}
			}
			return data, held, collect, nil
		}
		if rerr != nil {
			return nil, nil, false, rerr
		}
	}
}

// ownFields are the response fields the proxy writes itself, never stored
// from an origin's response (httpcache.StoredHeader).
var ownFields = []string{"X-Cache", debugHeader}

// storedHeader is the header kept with an entry (httpcache.StoredHeader).
func storedHeader(src http.Header, strip []string) http.Header {
	return httpcache.StoredHeader(src, strip, ownFields)
}

func headerBytes(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}
