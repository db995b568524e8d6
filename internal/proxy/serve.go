package proxy

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/originview"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// X-Cache values; shared slices so that setting the header does not
// allocate.
var (
	xHitL1         = []string{"HIT; layer=l1"}
	xHitL2         = []string{"HIT; layer=l2"}
	xStaleL1       = []string{"STALE; layer=l1"}
	xStaleL2       = []string{"STALE; layer=l2"}
	xRevalidated   = []string{"REVALIDATED"}
	xMiss          = []string{"MISS"}
	xBypass        = []string{"BYPASS"}
	xMissCoalesced = []string{"MISS; coalesced"}
	xStaleCoal     = []string{"STALE; coalesced"}
	xRevalCoal     = []string{"REVALIDATED; coalesced"}
	viaValue       = "1.1 tiercache"
)

// call carries what one cacheable request needs through the miss path.
type call struct {
	cfg    *tierconfig.Compiled
	rule   *tierconfig.CompiledRule
	rcc    httpcache.RequestCC
	reqH   httpcache.Header // request header as the caching rules see it
	host   string
	tgt    string
	prim   string // primary key (owned copy)
	extras string // the rule's extra key parts (owned copy), if any
	// key is the storage key of the response (primary or variant) and the
	// flight's key; before a marker exists under a rule with extras it is
	// primary plus extras, a key that is never stored.
	key   string
	mark  *entry.Entry // Vary marker under prim, if any
	stale *entry.Entry // stored response to validate or fall back to, if any
	layer string       // where stale came from
	// background: a stale-while-revalidate refresh, owned by the Proxy.
	background bool
	// shared: this replica holds the tier-wide lease for the key, so its
	// fill is written where the waiting replicas see it at once.
	shared bool
	// why says why the request goes to the origin (Cache-Status fwd).
	why fwdKind
	// dbg: a debug request's decision, filled as it is made (debug.go).
	dbg *debugInfo
	// rejoined: the request already waited on a flight that an
	// invalidation overtook and joined a new one.
	rejoined bool
	// fwd: which client headers the fill forwarded.
	fwd *fillHeaders
	// body is stale's open body file, when stale is file-backed and the
	// request needs its body; the request closes it.
	body *bodystore.Body
	// release gives the tier-wide lease back (once) when shared is set:
	// a fill that goes to a body file is not shared with other replicas.
	release func()
	// rng, when set, makes the fill ask for part of the representation
	// (partial.go).
	rng *rangeFill
	// norm: the tier normalizes Accept-Encoding (coding.go): the fill
	// asks with the tier's list and stores a coded entry.
	norm bool
	// kept is the entry the fill stored, once stored (keep).
	kept *entry.Entry
}

// releaseLease gives the tier-wide lease back, if held, at most once.
func (c *call) releaseLease() {
	if c.release != nil {
		c.release()
		c.release = nil
	}
	c.shared = false
}

// cacheReq is one cacheable request from its lookup to its miss: the
// rule it matched, its directives, its keys and what the lookup found.
// It lives on the handler's stack; a miss copies what it keeps into its
// call (newCall).
type cacheReq struct {
	cfg  *tierconfig.Compiled
	rule *tierconfig.CompiledRule
	dbg  *debugInfo
	rcc  httpcache.RequestCC
	reqH httpcache.Header // request header as the caching rules see it
	kb   *keyBuf          // the request's keys (pooled: valid while the handler runs)
	f    found
}

// newCacheReq is r under rule: its directives as the tier reads them (a
// tier that ignores them hides Cache-Control and Pragma from the rules).
func newCacheReq(r *http.Request, cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule, dbg *debugInfo) cacheReq {
	q := cacheReq{cfg: cfg, rule: rule, dbg: dbg, reqH: r.Header}
	if cfg.Config.Defaults.IgnoreRequestCacheControl {
		q.reqH = withoutCacheControl{r.Header}
	} else {
		q.rcc = httpcache.ParseRequestCC(r.Header)
	}
	return q
}

// serveCacheable handles GET and HEAD: it looks the request up and serves
// what is stored when it may (serveStored), else routes the miss
// (serveMiss). A stored part of the representation takes its own branch
// (partial.go). rule is the rule r matched, on its header without the
// fields its Connection names (ServeHTTP).
func (p *Proxy) serveCacheable(w http.ResponseWriter, r *http.Request, cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule, dbg *debugInfo) outcome {
	if rule.Bypass || httpcache.HasOriginPrecondition(r.Header) || hasBody(r) || oddPath(r.URL.Path) {
		// A body is not part of the key, so a GET or HEAD that carries
		// one could make the origin answer something the key does not
		// describe: it is neither filled nor served from the cache.
		return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwdBypass, dbg: dbg.bypass()}, metrics.ResultBypass)
	}
	// The tier's ignored cookies go before anything reads the request
	// (key, Vary, credentials, the fill's request): the cache decides on
	// what the origin will see. Passed requests above keep them.
	cfg.StripIgnoredCookies(r.Header)
	q := newCacheReq(r, cfg, rule, dbg)
	kb := p.keys.Get().(*keyBuf)
	defer p.keys.Put(kb)
	kb.build(r, rule)
	if kb.Ambiguous() {
		return p.pass(w, r, cfg, verdict{x: xBypass, rule: rule, fwd: fwdBypass, dbg: dbg.bypass()}, metrics.ResultBypass)
	}
	q.kb = kb
	q.f = p.lookup(r.Context(), kb, r)
	if dbg != nil {
		dbg.key = strings.Clone(kb.Key())
	}
	if q.f.part != nil {
		if c, name := storedCoding(q.f.part); c != httpcache.CodingIdentity && !httpcache.Acceptable(r.Header, c, name) {
			// Parts are kept as the origin sent them: one in a coding this
			// client does not take is not decoded (a part of a coded
			// stream cannot be), the request passes.
			return p.pass(w, r, cfg, verdict{x: xMiss, rule: rule, fwd: fwdMiss, dbg: dbg}, metrics.ResultMiss)
		}
		return p.servePart(w, r, &q)
	}
	return p.serveStored(w, r, &q, nil)
}

// serveStored serves q's stored response when the rules allow, and the
// miss otherwise; rg, when set, is how the miss asks for part of the
// representation (partial.go).
func (p *Proxy) serveStored(w http.ResponseWriter, r *http.Request, q *cacheReq, rg *rangeFill) outcome {
	var body *bodystore.Body // the open body file of a file-backed entry, when one is served
	if f := &q.f; f.ok && f.e.File != nil {
		// A body file is opened before anything is written: a file that
		// is gone or is not this entry's makes the entry a miss; one that
		// cannot be opened for now (out of descriptors) keeps the entry,
		// and this request passes to the origin.
		var st bodyState
		body, st = p.openBody(r, q.kb.Key(), f.e)
		switch {
		case st == bodyBusy:
			return p.passBusy(w, r, q.cfg, q.rule, q.dbg)
		case st == bodyMissing:
			f.e, f.ok = nil, false
		case body != nil:
			defer body.Close()
		}
	}
	if q.f.ok {
		if out, served := p.serveHit(w, r, q, body); served {
			return out
		}
	}
	return p.serveMiss(w, r, q, body, rg)
}

// serveHit serves q's stored response when it is fresh, or stale and
// usable (a stale-while-revalidate one starts its refresh).
func (p *Proxy) serveHit(w http.ResponseWriter, r *http.Request, q *cacheReq, body *bodystore.Body) (outcome, bool) {
	f := &q.f
	use, age := httpcache.Evaluate(stored(f.e), q.rcc, p.now())
	var x []string
	result := metrics.ResultStale
	switch use {
	case httpcache.UseFresh:
		x, result = pick(f.layer, xHitL1, xHitL2), metrics.ResultHit
	case httpcache.UseStale:
		x = pick(f.layer, xStaleL1, xStaleL2)
	case httpcache.UseStaleRevalidate:
		// The slot is taken before the call is built: under a herd most
		// stale hits find every slot taken, and building a call for
		// nothing costs allocations.
		if p.refreshes.tryAcquire() {
			p.refresh(r, p.newCall(q))
		} else {
			p.m.RefreshesDeferred.Inc()
		}
		x = pick(f.layer, xStaleL1, xStaleL2)
	default:
		return outcome{}, false
	}
	sn := p.serveEntry(w, r, f.e, age, hitVerdict(x, q.rule, q.dbg), body)
	return outcome{result: result, layer: f.layer, ttl: f.e.Lifetime - age, hasTTL: true, sent: sn}, true
}

// serveMiss sends a miss to the origin as httpcache.RouteMiss says:
// passed (pass.go), a HEAD update (head.go), or a fill (fill.go),
// collapsed with the key's other misses (coalesce) unless it must fetch
// alone. body is the stored response's open body file, for a fill that
// validates it or falls back on it; rg, when set, is the part of the
// representation the fill asks for (partial.go).
func (p *Proxy) serveMiss(w http.ResponseWriter, r *http.Request, q *cacheReq, body *bodystore.Body, rg *rangeFill) outcome {
	if r.Context().Err() != nil {
		// The client left (perhaps while L2 was being asked): nobody to
		// fetch for.
		return outcome{result: metrics.ResultError, layer: metrics.LayerNone, abort: false, sent: sent{status: statusClientGone}}
	}
	why := missKind(&q.f, q.rcc, p.now())
	if q.rcc.OnlyIfCached {
		// X-Cache stays unset: nothing was asked or served from the cache.
		if cs, ok := cacheStatus(q.cfg, verdict{rule: q.rule, fwd: why, dbg: q.dbg}, http.StatusGatewayTimeout, 0, false); ok {
			w.Header()["Cache-Status"] = []string{cs}
		}
		sn := errorAnswer(w, r, "only-if-cached: no usable stored response", http.StatusGatewayTimeout)
		return outcome{result: metrics.ResultMiss, layer: metrics.LayerNone, abort: false, sent: sn}
	}
	if rg == nil {
		// How the miss goes to the origin, unless the stored part already
		// chose its range.
		switch httpcache.RouteMiss(r.Method, r.Header, q.rcc, q.f.ok, q.cfg.Config.Defaults.UpdateFromHead) {
		case httpcache.MissHeadUpdate:
			// The HEAD's answer may update the stored GET response.
			c := p.newCall(q)
			c.why, c.dbg = why, q.dbg
			out := p.headUpdate(w, r, c)
			out.fwd = why
			return out
		case httpcache.MissPass:
			v := verdict{x: xMiss, rule: q.rule, fwd: why}
			if r.Method == http.MethodHead && q.dbg != nil {
				q.dbg.why = whyHead
				v.dbg = q.dbg
			}
			return p.pass(w, r, q.cfg, v, metrics.ResultMiss)
		case httpcache.MissRange:
			rg = forwardRange(r)
		}
	}
	c := p.newCall(q)
	c.why, c.dbg = why, q.dbg
	// Revalidating or falling back on a stored response serves its body
	// from the file opened for it.
	c.body = body
	c.rng = rg
	var out outcome
	switch {
	case rg != nil && rg.alone(), q.f.hitForMiss, q.rcc.NoStore, !q.cfg.Config.Coalescing.IsEnabled():
		out = p.fill(w, r, c, nil)
	case forwardsValidators(c, r):
		out = p.conditionalMiss(w, r, c)
	default:
		out = p.coalesce(w, r, c)
	}
	if out.result != metrics.ResultHit {
		out.fwd = why // a waiter's outcome is its leader's
	}
	return out
}

// newCall copies what the miss path needs out of q (the key buffer goes
// back to its pool when the request ends).
func (p *Proxy) newCall(q *cacheReq) *call {
	kb, f := q.kb, &q.f
	c := &call{cfg: q.cfg, rule: q.rule, rcc: q.rcc, reqH: q.reqH, host: kb.Host(), tgt: kb.Target(), norm: q.cfg.Coding.Normalize}
	c.prim = strings.Clone(kb.Primary())
	c.key = c.prim
	if kb.HasExtras() {
		c.extras = kb.Extras()
		c.key = c.prim + c.extras
	}
	if f.marker != nil {
		c.mark = detach(f.marker)
		c.key = strings.Clone(kb.Key()) // the variant key lookup left in kb
	}
	if f.ok {
		c.stale, c.layer = detach(f.e), f.layer
	}
	return c
}

func pick(layer string, l1, l2 []string) []string {
	if layer == metrics.LayerL2 {
		return l2
	}
	return l1
}

// oddPath reports a decoded path with bytes that can only have come from
// percent-encoding and that origins decode and route differently: control
// characters (%00, %0d, %0a), '?' and '#', in p or once p is decoded again
// ("%2500", "%253f": origins that decode twice, as the path readings
// assume, cut the path there, and a rule such as "\.css$" no longer
// describes what they serve). Such requests are passed uncached rather
// than matched against rules whose meaning they may dodge.
func oddPath(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if e, ok := originview.Escaped(p, i); ok {
			c = e
		}
		if c < 0x20 || c == 0x7f || c == '?' || c == '#' {
			return true
		}
	}
	return false
}

// hasBody reports whether the request carries a body (Content-Length > 0,
// or chunked or otherwise of unknown length).
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 || len(r.TransferEncoding) > 0
}

// withoutCacheControl hides the request's Cache-Control and Pragma from the
// caching rules when the tier ignores them.
type withoutCacheControl struct{ h http.Header }

func (w withoutCacheControl) Values(name string) []string {
	switch http.CanonicalHeaderKey(name) {
	case "Cache-Control", "Pragma":
		return nil
	}
	return w.h.Values(name)
}

// serveEntry writes a stored response, answering the client's conditional
// and single-range requests from it. e is not modified. A file-backed
// entry's body is read from file, opened by openBody (nil when the request
// needs no body).
func (p *Proxy) serveEntry(w http.ResponseWriter, r *http.Request, e *entry.Entry, age time.Duration, v verdict, file *bodystore.Body) sent {
	// A coded entry reaches each client as its Accept-Encoding says
	// (coded.go); what it is conditional on is the header it gets.
	how := asStored
	var cond httpcache.Header = e
	if e.Flags&entry.FlagCoded != 0 {
		switch how = codedPlan(r, e); how {
		case passed:
			return p.passCoded(w, r, v)
		case refused:
			return refuseCoding(w, r)
		}
	}
	h := w.Header()
	rewrite := how != asStored || e.Flags&entry.FlagCompressed != 0
	extra := 0
	if rewrite {
		extra = 2 // Content-Encoding, ETag
	}
	s := newHeaderScratch(len(e.Header) + extra)
	for i := range e.Header {
		f := &e.Header[i]
		s.add(h, f.Name, f.Value)
	}
	if rewrite {
		rewriteCoded(h, &s, e, how)
		cond = h
	}
	// Read from the live config rather than passed in: every path that
	// serves an entry (hit, stale, revalidated, coalesced) strips alike.
	stripTargeted(h, p.cfg.Load().StripTargeted)
	s.set(h, "Age", strconv.FormatInt(httpcache.AgeSeconds(age), 10))
	h["X-Cache"] = v.x
	s.add(h, "Via", viaValue)
	switch cfg := p.cfg.Load(); {
	case !cfg.CacheStatus:
	case v.fwd == fwdNone && v.rule != nil && !v.collapsed && v.dbg == nil:
		// A hit's member is shared with the rule's other hits this second.
		s.add(h, "Cache-Status", v.rule.HitStatus.Member(e.Lifetime-age))
	default:
		cs, _ := cacheStatus(cfg, v, e.Status, e.Lifetime-age, true)
		s.add(h, "Cache-Status", cs)
	}
	if v.dbg != nil {
		h[debugHeader] = []string{v.dbg.value(v, e.Lifetime, true)}
	}
	if httpcache.NotModified(r.Header, e.Status, cond) {
		notModified(w)
		return sent{status: http.StatusNotModified}
	}
	if how == decoded {
		return p.serveDecoded(w, r, e, file)
	}
	if e.File != nil {
		return p.serveFile(w, r, e, file)
	}
	status, body := e.Status, e.Body
	// A body the cache compressed has no validator of its own to compare
	// an If-Range with: its Range is ignored then (a 200 with all of it).
	if e.Status == http.StatusOK && r.Method == http.MethodGet && len(r.Header["Range"]) > 0 &&
		(e.Flags&entry.FlagCompressed == 0 || len(r.Header["If-Range"]) == 0) {
		status, body = rangeOfBody(h, r, e) // partial.go
	}
	if bodyAllowed(status) {
		s.set(h, "Content-Length", strconv.Itoa(len(body)))
	}
	w.WriteHeader(status)
	if r.Method != http.MethodHead && bodyAllowed(status) {
		n, _ := w.Write(body)
		return sent{status: status, bytes: int64(n)}
	}
	return sent{status: status}
}

// headerScratch holds the values of one served response's header fields,
// so that a hit fills its header map with one allocation (of exactly the
// size needed) instead of one per field. net/http reads the values after
// the handler returns, so the scratch is never reused: each response has
// its own.
type headerScratch struct {
	vals []string
}

func newHeaderScratch(fields int) headerScratch {
	return headerScratch{vals: make([]string, 0, fields+4)} // + Age, Via, Cache-Status, Content-Length
}

// set makes value the only value of the field name of h (the fields the
// cache computes replace whatever was stored).
func (s *headerScratch) set(h http.Header, name, value string) {
	delete(h, name)
	s.add(h, name, value)
}

// add appends value to the field name of h. A field's first value gets a
// one-element slice of the scratch whose capacity ends there, so that a
// later append to it (a repeated field, or a handler) copies rather than
// overwriting the next field's value.
func (s *headerScratch) add(h http.Header, name, value string) {
	if cur := h[name]; len(cur) > 0 {
		h[name] = append(cur, value)
		return
	}
	if len(s.vals) == cap(s.vals) {
		h[name] = []string{value}
		return
	}
	s.vals = append(s.vals, value)
	n := len(s.vals)
	h[name] = s.vals[n-1 : n : n]
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func appendVia(h http.Header) {
	h["Via"] = append(h["Via"], viaValue)
}
