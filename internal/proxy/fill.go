package proxy

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// entryOverhead is what an encoded entry needs besides headers and body
// (fixed fields, key identity, tags), with room to spare.
const entryOverhead = 2048

// fetch is one fill's state: the request it answers, the flight it
// publishes to, its exchange with the origin and what its phases decided.
// fill runs the phases in order over it; partAnswered (partial.go) and
// fillFile (fillfile.go) take it over for a part of a representation and
// for a body file.
type fetch struct {
	p *Proxy
	w http.ResponseWriter
	r *http.Request
	c *call
	l *lead // nil: the fill is its own, nobody waits

	// ctx is the origin exchange's: detached from the client's
	// cancellation (waiters and the cache still need it), under wd.
	ctx context.Context
	wd  *watchdog
	// watch began before the origin was asked: a purge of the resource
	// from then on means the answer is served but not stored.
	watch *invalidate.Watch
	start time.Time // the fill's start on the real clock: origin.timeout counts from it

	// The exchange: its times on the rules' clock, how long the origin
	// took to answer, its response and that response's body under wd.
	reqTime, respTime time.Time
	originTime        time.Duration
	resp              *http.Response
	body              io.Reader

	forwarded  bool // the client's validators went to the origin (validators.go)
	validating bool // the stored response's validators went

	// What decide decided: d, the exchange it was decided on, the
	// outcome a miss reports, and the bounds of what is stored: inline up
	// to limit, in a body file up to storeMax for a body above fileAbove.
	d                          httpcache.Decision
	x                          httpcache.Exchange
	out                        outcome
	limit, storeMax, fileAbove int64

	// What answerHeader sent: the status the client got and where the
	// body goes (nil: nobody reads it, a background refresh or a 304).
	status int
	bodyW  http.ResponseWriter

	// detached: a fill going to a body file went on on a goroutine of
	// its own (fillfile.go), which ends the watch, the watchdog and the
	// response.
	detached bool

	// Under a tier that normalizes Accept-Encoding (coded.go), when the
	// client does not take the response's coding: deferred, the fill
	// stores it without a client and then serves the client from the
	// stored entry; relayDecoded, a response that is not stored is relayed
	// decoded with this coding.
	deferred     bool
	relayDecoded httpcache.Coding
}

// fill fetches r from the origin, answers the client with it, and stores
// it when the rules allow. l is the lead of the flight the fill runs for
// (it publishes the waiters' result through it as soon as it knows), or
// nil when the request fetches for itself. The origin fetch is detached
// from the client's cancellation (waiters and the cache still need it).
// It is bound by the response-header and idle timeouts, and while its
// body is being stored by origin.timeout from its start: past that the
// response is served but not stored (timeouts.go).
func (p *Proxy) fill(w http.ResponseWriter, r *http.Request, c *call, l *lead) outcome {
	f := p.newFetch(w, r, c, l)
	defer f.end()
	if err := f.ask(); err != nil {
		return f.failed(err)
	}
	if out, answered := f.answeredAside(); answered {
		return out
	}
	f.decide()
	if c.norm && !c.background {
		if out, answered := f.negotiate(); answered {
			return out
		}
	}
	f.answerHeader()
	if !f.d.Store {
		return f.passOn()
	}
	out := f.collect() // answers while collecting, keeps, publishes
	if f.deferred {
		return f.serveKept(out)
	}
	return out
}

// negotiate decides how a normalized fill's response reaches a client
// that does not take its coding: a response to store is stored without
// the client, who is then served from the entry (serveKept: decoded, or
// passed when it cannot be); one that is not stored is relayed decoded
// when it can be, else the request passes to the origin with the
// client's own Accept-Encoding.
func (f *fetch) negotiate() (outcome, bool) {
	p, c, r, resp := f.p, f.c, f.r, f.resp
	ce := resp.Header["Content-Encoding"]
	cd := httpcache.CodingOf(ce)
	name := ""
	if len(ce) > 0 {
		name = ce[0]
	}
	switch {
	case httpcache.Acceptable(r.Header, cd, name):
		return outcome{}, false
	case f.d.Store:
		f.deferred = true
		return outcome{}, false
	case decodable(cd) && !noTransform(resp.Header["Cache-Control"]) && httpcache.Acceptable(r.Header, httpcache.CodingIdentity, ""):
		f.relayDecoded = cd
		return outcome{}, false
	}
	f.l.Publish(shared{})
	f.resp.Body.Close()
	out := p.pass(f.w, r, c.cfg, verdict{x: xMiss, rule: c.rule, fwd: c.why, dbg: c.dbg}, metrics.ResultMiss)
	out.fwd = c.why
	return out, true
}

// serveKept serves a deferred fill's client from the entry the fill
// stored, as its Accept-Encoding says; when nothing was stored after all
// (too large, overtaken, cut), the request passes to the origin.
func (f *fetch) serveKept(out outcome) outcome {
	p, c, w, r := f.p, f.c, f.w, f.r
	e := c.kept
	if e == nil {
		pout := p.pass(w, r, c.cfg, verdict{x: xMiss, rule: c.rule, fwd: c.why, dbg: c.dbg}, metrics.ResultMiss)
		out.sent = pout.sent
		return out
	}
	body, st := p.openBody(r, c.key, e)
	switch st {
	case bodyMissing, bodyBusy:
		out.sent = p.passBusy(w, r, c.cfg, c.rule, c.dbg).sent
		return out
	}
	if body != nil {
		defer body.Close()
	}
	v := verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: f.resp.StatusCode, stored: true}
	out.sent = p.serveEntry(w, r, e, httpcache.CurrentAge(stored(e), p.now()), v, body)
	return out
}

// newFetch begins c's fill: it watches the resource and starts the
// exchange's watchdog.
func (p *Proxy) newFetch(w http.ResponseWriter, r *http.Request, c *call, l *lead) *fetch {
	f := &fetch{p: p, w: w, r: r, c: c, l: l}
	f.watch = p.inval.Watch(c.host, c.tgt)
	base := context.WithoutCancel(r.Context())
	if c.background {
		base = p.ctx
	}
	f.start = time.Now()
	// A fill may be stored, and waiters depend on it: its headers must
	// come within origin.timeout too (then stale-if-error can answer).
	o := c.cfg.Config.Origin
	o.ResponseHeaderTimeout = min(o.ResponseHeaderTimeout, o.Timeout)
	f.ctx, f.wd = p.watch(base, &o, w)
	return f
}

// end lets go of what the fill holds, unless it detached (fillfile.go).
func (f *fetch) end() {
	if f.detached {
		return
	}
	if f.resp != nil {
		f.resp.Body.Close()
	}
	f.wd.close()
	f.watch.End()
}

// ask sends the fill's request (fillRequest) to the origin: with the
// client's validators when the fill forwards them, the stored response's
// when it validates that, and a range when it asks for part of the
// representation (partial.go).
func (f *fetch) ask() error {
	p, c, r := f.p, f.c, f.r
	out := p.fillRequest(f.ctx, r, c)
	out.Body = f.wd.sending(out.Body)
	// The client's validators reach the origin only on a fill of its own
	// (l == nil) with nothing stored, when the tier says so (validators.go).
	f.forwarded = f.l == nil && forwardsValidators(c, r)
	for _, k := range clientConditionals {
		delete(out.Header, k)
	}
	if f.forwarded {
		forwardValidators(out.Header, r.Header)
	}
	if c.stale != nil {
		for k, v := range httpcache.ValidatorsFrom(c.stale) {
			out.Header[k] = v
			f.validating = true
		}
	}
	if c.rng != nil {
		out.Header["Range"] = []string{c.rng.ask}
		if c.rng.ifRange != "" {
			out.Header["If-Range"] = []string{c.rng.ifRange}
		}
	}
	f.reqTime = p.now()
	resp, err := p.roundTrip(out, f.w)
	f.respTime = p.now()
	f.originTime = time.Since(f.start)
	if err != nil {
		return err
	}
	f.resp = resp
	// What is stored and served carries the Date the response arrived
	// with, or the time it arrived (RFC 9110 §6.6.1): ages, heuristics and
	// If-Modified-Since are measured from it.
	httpcache.AddDate(resp.Header, f.respTime)
	f.body = f.wd.receiving(resp.Body)
	return nil
}

// failed answers when the origin could not be asked (err): with the
// stored response where stale-if-error or stale-if-unreachable allows,
// else with an error.
func (f *fetch) failed(err error) outcome {
	p, c := f.p, f.c
	if p.staleOnError(c) || p.staleIfUnreachable(c, f.wd.reason(err)) {
		f.l.Publish(f.staleShared(0))
		return p.serveStale(f.w, f.r, c, 0)
	}
	f.l.Publish(shared{})
	sn := p.originFailed(f.w, f.r, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, f.wd, err)
	return outcome{result: metrics.ResultError, layer: failedLayer(err), abort: false, sent: sn}
}

// staleShared is what waiters get when the stored response stands in for
// the origin (fwdStatus: its 5xx, 0 when it could not be asked).
func (f *fetch) staleShared(fwdStatus int) shared {
	c := f.c
	return shared{e: c.stale, v: verdict{x: xStaleCoal, rule: c.rule, fwd: c.why, fwdStatus: fwdStatus, collapsed: true},
		out: outcome{result: metrics.ResultStale, layer: c.layer, abort: false}}
}

// answeredAside answers what is not a response to decide on: a 5xx the
// stored response stands in for, every answer but a 200 to a request for
// part of the representation (a 200 is the whole one, filled as usual),
// and a 304 to the stored response's validators.
func (f *fetch) answeredAside() (outcome, bool) {
	p, c, status := f.p, f.c, f.resp.StatusCode
	switch {
	case status >= 500 && p.staleOnError(c):
		f.l.Publish(f.staleShared(status))
		return p.serveStale(f.w, f.r, c, status), true
	case c.rng != nil && status != http.StatusOK:
		return p.partAnswered(f), true
	case status == http.StatusNotModified && f.validating:
		return f.revalidate(), true
	}
	return outcome{}, false
}

// revalidate applies the origin's 304 to the stored response
// (revalidated), hands the result to the flight's waiters and serves it.
func (f *fetch) revalidate() outcome {
	p, c, w, r := f.p, f.c, f.w, f.r
	f.wd.stop()
	e, kept := p.revalidated(f.ctx, c, f.resp.Header, f.reqTime, f.respTime, f.watch)
	if kept {
		f.l.Publish(shared{e: e, v: verdict{x: xRevalCoal, rule: c.rule, fwd: c.why, fwdStatus: http.StatusNotModified, stored: true, collapsed: true},
			out: outcome{result: metrics.ResultRevalidated, layer: c.layer, abort: false}})
	} else {
		// Overtaken by a purge (or not storable): a request that joined
		// meanwhile, perhaps after its own write, fetches afresh.
		f.l.Publish(shared{overtaken: true})
	}
	body := c.body
	if body == nil {
		var st bodyState
		switch body, st = p.openBody(r, c.key, e); st {
		case bodyMissing:
			// The stored body file went meanwhile: fetch it whole.
			f.resp.Body.Close()
			c.stale, c.mark = nil, nil
			return p.fill(w, r, c, nil)
		case bodyBusy:
			// It is there, but cannot be opened for now.
			f.resp.Body.Close()
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

// exchange is the fill's exchange as the caching rules read it.
func (f *fetch) exchange() httpcache.Exchange {
	return httpcache.Exchange{
		Method: http.MethodGet, ReqHeader: f.c.reqH,
		Status: f.resp.StatusCode, RespHeader: f.resp.Header,
		RequestTime: f.reqTime, ResponseTime: f.respTime,
	}
}

// decide decides whether the response is stored (httpcache.Decide) and
// within which bounds.
func (f *fetch) decide() {
	p, c, resp := f.p, f.c, f.resp
	f.x = f.exchange()
	d := httpcache.Decide(f.x, c.rule.Policy)
	f.limit = int64(c.cfg.Config.L1.MaxEntrySize) - headerBytes(resp.Header) - entryOverhead
	f.storeMax, f.fileAbove = f.limit, f.limit
	if p.bodies != nil {
		// Bodies above the threshold (or above what an L1 entry holds, if
		// that is less) go to a body file, up to bodyStore.maxObjectSize.
		threshold, maxObject := bodyLimits(c.cfg)
		f.storeMax, f.fileAbove = max(f.limit, maxObject), min(f.limit, threshold)
	}
	if c.dbg != nil {
		c.dbg.decided, c.dbg.d = true, d
	}
	why := d.Why
	if d.Store && (resp.ContentLength > f.storeMax || isEventStream(resp.Header)) {
		d.Store, why = false, whyTooLarge
		if isEventStream(resp.Header) {
			why = whyEventStream
		}
		if c.dbg != nil {
			c.dbg.why = why
		}
	}
	f.d = d
	f.out = outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, fwd: c.why, stored: d.Store, notStored: why, originTime: f.originTime}
}

// answerHeader sends the client the response's header, with the Age its
// stored entry has, or a 304 when the response answers the client's own
// conditional; it sets the status the client got and where the body goes.
func (f *fetch) answerHeader() {
	p, c, w, resp := f.p, f.c, f.w, f.resp
	if f.deferred {
		// The client is answered from the stored entry (serveKept).
		f.bodyW, f.status = nil, resp.StatusCode
		return
	}
	h := w.Header()
	copyHeader(h, resp.Header)
	stripTargeted(h, c.cfg.StripTargeted)
	p.setMissAge(h, f.x)
	if c.norm {
		codedHeader(h)
		if f.relayDecoded != httpcache.CodingIdentity {
			delete(h, "Content-Encoding")
			delete(h, "Content-Length")
			delete(h, "Accept-Ranges")
			retag(h, nil, "identity")
		}
	}
	// A background refresh has no client to stream to.
	f.bodyW = w
	if c.background {
		f.bodyW = nil
	}
	v := verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: resp.StatusCode, stored: f.d.Store}
	if httpcache.NotModified(f.r.Header, resp.StatusCode, resp.Header) {
		httpcache.OmitForNotModified(h)
		p.setStatus(h, v, http.StatusNotModified)
		w.WriteHeader(http.StatusNotModified)
		f.bodyW = nil
	} else {
		p.setStatus(h, v, resp.StatusCode)
		w.WriteHeader(resp.StatusCode)
	}
	f.status = resp.StatusCode
	if f.bodyW == nil && !c.background {
		f.status = http.StatusNotModified
	}
}

// passOn relays a response that is not stored: the flight's waiters fetch
// for themselves, and the key is marked as the answer says (uncacheable).
func (f *fetch) passOn() outcome {
	p, resp := f.p, f.resp
	f.l.Publish(shared{})
	if !f.forwarded || resp.StatusCode != http.StatusNotModified {
		// A 304 to the client's own validators says nothing about
		// what may be stored for everyone.
		p.uncacheable(f.ctx, f.c, f.r, resp.StatusCode)
	}
	if f.bodyW == nil {
		return f.out.with(false, sent{status: f.status})
	}
	body := f.body
	if f.relayDecoded != httpcache.CodingIdentity {
		coded := &countingReader{r: body}
		d, err := p.codecs.open(f.relayDecoded, coded)
		if err != nil {
			p.log.Debug("origin body did not decode", "path", f.r.URL.Path, "err", err)
			return f.out.with(true, sent{status: f.status})
		}
		defer d.release()
		body = &boundedDecode{d: d, coded: coded, storeMax: f.storeMax}
	}
	n, err := p.relayAhead(f.bodyW, resp, body)
	if err != nil {
		p.bodyFailed(f.r, f.wd, err)
		return f.out.with(true, sent{f.status, n})
	}
	return f.out.with(false, sent{f.status, n})
}

// collect answers the client while it collects the body, keeps the
// response and publishes it to the flight's waiters before the client has
// its last byte. A body above fileAbove, or of unknown length, goes to a
// body file when there is a body store (fillfile.go).
func (f *fetch) collect() outcome {
	p, c, resp := f.p, f.c, f.resp
	// Stored fills are bound as a whole; past the bound the fill gives up
	// storing and its waiters fetch for themselves (no hit-for-miss
	// marker: the response was cacheable, only slow).
	f.wd.storeUntil(f.start.Add(c.cfg.Config.Origin.Timeout.Std()), func() { f.l.Publish(shared{}) })
	e := responseEntry(c, resp, f.d, f.reqTime, f.respTime)
	if p.bodies != nil && (resp.ContentLength < 0 || resp.ContentLength > f.fileAbove) {
		out := p.fillFile(f, e)
		out.sent.status = f.status // fillFile counts the bytes
		return f.out.as(out)
	}
	cw := newClientWriter(f.bodyW, f.wd.clientTook)
	defer cw.stop()
	data, held, complete, err := p.tee(cw, f.body, resp.ContentLength, f.limit, &f.wd.late, func() {
		// Too large to store: waiters fetch for themselves and later
		// requests skip coalescing.
		f.wd.stopStoring()
		f.l.Publish(shared{})
		p.uncacheable(f.ctx, c, f.r, resp.StatusCode)
	})
	if err != nil {
		p.bodyFailed(f.r, f.wd, err)
		f.l.Publish(shared{})
		return f.out.with(f.bodyW != nil, sent{f.status, cw.end(nil)})
	}
	if !complete {
		return f.out.with(false, sent{f.status, cw.end(nil)})
	}
	f.wd.stop()
	e.Body = data
	if e.Flags&entry.FlagCoded != 0 {
		p.codeBody(compressPolicyOf(c), e, f.decodeLimit(int64(len(e.Body))))
	}
	p.keep(f.ctx, c, f.l, e, p.place(f.ctx, c, resp.Header, f.r), f.watch)
	// The shared fetch is over too: a replica asked next finds the entry
	// in L2 (SetShared) and no lease.
	c.releaseLease()
	// Stored and handed to the waiters: now the client may have its
	// final bytes, and whatever it asks next finds the entry.
	return f.out.with(false, sent{f.status, cw.end(held)})
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
	if c.norm {
		// The tier's codings, whatever the client accepts: every client's
		// fill asks the same, so one stored copy serves them all.
		out.Header["Accept-Encoding"] = []string{c.cfg.Coding.Ask}
	}
	if c.rule.Key.ShapesQuery() {
		out.URL.RawQuery = string(c.rule.Key.AppendQuery(nil, r.URL.RawQuery))
	}
	return out
}

// fillHeadersOf is which request headers a fill under rule sends.
func fillHeadersOf(cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule) *fillHeaders {
	return &fillHeaders{keyed: rule.Key.Headers(), cookies: rule.Key.Cookies(), strict: cfg.StrictHeaders, allow: cfg.StrictAllow}
}

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
