package proxy

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// markerLifetime is how long a Vary marker lives. Markers are tiny; their
// variants carry their own freshness, and a marker outliving them only
// costs a lookup.
const markerLifetime = 24 * time.Hour

// entryOverhead is what an encoded entry needs besides headers and body
// (fixed fields, key identity, tags), with room to spare.
const entryOverhead = 2048

// fill fetches r from the origin, answers the client with it, and stores
// it when the rules allow. f is the flight fill leads, or nil when the
// request fetches for itself. The origin fetch is detached from the
// client's cancellation (waiters and the cache still need it). It is bound
// by the response-header and idle timeouts, and while its body is being
// stored by origin.timeout from its start: past that the response is
// served but not stored (timeouts.go).
func (p *Proxy) fill(w http.ResponseWriter, r *http.Request, c *call, f *flight) outcome {
	finish := func(res shared) {
		if f != nil {
			p.flights.finish(c.key, f, res)
		}
	}
	staleRes := func() shared {
		return shared{e: c.stale, xcache: xStaleCoal, out: outcome{metrics.ResultStale, c.layer, false}}
	}
	gen := p.inval.Generation()
	base := context.WithoutCancel(r.Context())
	if c.background {
		base = p.ctx
	}
	start := time.Now()
	ctx, wd := p.watch(base, &c.cfg.Config.Origin, w)
	defer wd.close()

	out := p.outbound(ctx, r, c.rule.KeyHeaders(), true)
	out.Body = wd.sending(out.Body)
	for _, k := range clientConditionals {
		delete(out.Header, k)
	}
	validating := false
	if c.stale != nil {
		for k, v := range httpcache.ValidatorsFrom(c.stale) {
			out.Header[k] = v
			validating = true
		}
	}
	reqTime := p.now()
	resp, err := p.roundTrip(out, w)
	respTime := p.now()
	if err != nil {
		if p.staleOnError(c) {
			finish(staleRes())
			return p.serveStale(w, r, c)
		}
		finish(shared{})
		p.originFailed(w, r, wd, err)
		return outcome{metrics.ResultError, metrics.LayerOrigin, false}
	}
	defer resp.Body.Close()
	body := wd.receiving(resp.Body)
	if resp.StatusCode >= 500 && p.staleOnError(c) {
		finish(staleRes())
		return p.serveStale(w, r, c)
	}
	if resp.StatusCode == http.StatusNotModified && validating {
		wd.stop()
		e := p.revalidated(ctx, c, resp.Header, reqTime, respTime, gen)
		finish(shared{e: e, xcache: xRevalCoal, out: outcome{metrics.ResultRevalidated, c.layer, false}})
		p.serveEntry(w, r, e, httpcache.CurrentAge(stored(e), p.now()), xRevalidated)
		return outcome{metrics.ResultRevalidated, c.layer, false}
	}

	d := httpcache.Decide(httpcache.Exchange{
		Method: http.MethodGet, ReqHeader: c.reqH,
		Status: resp.StatusCode, RespHeader: resp.Header,
		RequestTime: reqTime, ResponseTime: respTime,
	}, c.rule.Policy)
	limit := int64(c.cfg.Config.L1.MaxEntrySize) - headerBytes(resp.Header) - entryOverhead
	if d.Store && (resp.ContentLength > limit || isEventStream(resp.Header)) {
		d.Store = false
	}

	h := w.Header()
	copyHeader(h, resp.Header)
	h["X-Cache"] = xMiss
	// The client's own conditional is answered from the fresh response.
	// A background refresh has no client to stream to.
	bodyW := w
	if c.background {
		bodyW = nil
	}
	if httpcache.NotModified(r.Header, resp.StatusCode, resp.Header) {
		for _, k := range [...]string{"Content-Length", "Content-Type", "Content-Range", "Transfer-Encoding"} {
			delete(h, k)
		}
		w.WriteHeader(http.StatusNotModified)
		bodyW = nil
	} else {
		w.WriteHeader(resp.StatusCode)
	}

	if !d.Store {
		finish(shared{})
		p.uncacheable(ctx, c, r, resp.StatusCode)
		if bodyW == nil {
			return outcome{metrics.ResultMiss, metrics.LayerOrigin, false}
		}
		if err := p.stream(bodyW, body); err != nil {
			p.bodyFailed(r, wd, err)
			return outcome{metrics.ResultMiss, metrics.LayerOrigin, true}
		}
		return outcome{metrics.ResultMiss, metrics.LayerOrigin, false}
	}

	// Stored fills are bound as a whole; past the bound the fill gives up
	// storing and its waiters fetch for themselves (no hit-for-miss
	// marker: the response was cacheable, only slow).
	wd.storeUntil(start.Add(c.cfg.Config.Origin.Timeout.Std()), func() { finish(shared{}) })
	data, complete, err := p.tee(bodyW, body, resp.ContentLength, limit, &wd.late, func() {
		// Too large to store: waiters fetch for themselves and later
		// requests skip coalescing.
		wd.stopStoring()
		finish(shared{})
		p.uncacheable(ctx, c, r, resp.StatusCode)
	})
	if err != nil {
		p.bodyFailed(r, wd, err)
		finish(shared{})
		return outcome{metrics.ResultMiss, metrics.LayerOrigin, bodyW != nil}
	}
	if !complete {
		return outcome{metrics.ResultMiss, metrics.LayerOrigin, false}
	}
	wd.stop()
	e := &entry.Entry{
		Kind:                 entry.KindResponse,
		Host:                 c.host,
		Target:               c.tgt,
		Tags:                 httpcache.Tags(resp.Header),
		Status:               resp.StatusCode,
		Header:               entry.FieldsFrom(storedHeader(resp.Header, d.Strip)),
		Body:                 data,
		RequestTime:          reqTime,
		ResponseTime:         respTime,
		InitialAge:           d.InitialAge,
		Lifetime:             d.Lifetime,
		StaleWhileRevalidate: d.StaleWhileRevalidate,
		StaleIfError:         d.StaleIfError,
		Flags:                flags(d),
	}
	vary, vk := p.put(ctx, c, e, resp.Header, r, gen)
	finish(shared{e: e, xcache: xMissCoalesced, out: outcome{metrics.ResultMiss, metrics.LayerOrigin, false}, vary: vary, varyKey: vk})
	return outcome{metrics.ResultMiss, metrics.LayerOrigin, false}
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

// revalidated applies a 304 to the stored response (RFC 9111 §4.3.4) and
// stores the result; it returns the entry to serve.
func (p *Proxy) revalidated(ctx context.Context, c *call, h304 http.Header, reqTime, respTime time.Time, gen uint64) *entry.Entry {
	merged := httpcache.MergeNotModified(c.stale.HTTPHeader(), h304)
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
	e.Flags = flags(d)
	if !d.Store {
		_ = p.store.Delete(ctx, c.key)
		return &e
	}
	if p.inval.Generation() == gen {
		p.set(ctx, c, c.key, &e)
	}
	return &e
}

// put stores e for the request, behind a Vary marker when the response
// varies. A purge since the fetch began (gen changed) means the response
// is served but not stored. It returns the response's Vary names and the
// request's values for them.
func (p *Proxy) put(ctx context.Context, c *call, e *entry.Entry, respH http.Header, r *http.Request, gen uint64) ([]string, []byte) {
	names, _ := httpcache.VaryNames(respH)
	var vk []byte
	if len(names) > 0 {
		vk = httpcache.AppendVaryKey(nil, names, r.Header)
	}
	if p.inval.Generation() != gen {
		return names, vk
	}
	if len(names) == 0 {
		p.set(ctx, c, c.prim, e)
		return nil, nil
	}
	m := c.mark
	if m == nil {
		// Another fill may have created the marker since our lookup
		// (a waiter whose variant differed from its leader's); reuse it
		// rather than retire the variant that fill just stored.
		var cur entry.Entry
		if _, err := p.store.Get(ctx, c.prim, &cur); err == nil && cur.Kind == entry.KindVary {
			m = &cur
		}
	}
	if m == nil || !slices.Equal(m.Vary, names) {
		// A new marker (new nonce) retires every variant of the old one.
		m = &entry.Entry{
			Kind: entry.KindVary, Host: c.host, Target: c.tgt,
			Vary: names, Nonce: rand.Uint64(),
			ResponseTime: p.now(), Lifetime: markerLifetime,
		}
		p.set(ctx, c, c.prim, m)
	}
	key := cachekey.AppendVariant([]byte(c.prim), m.Nonce)
	key = append(key, vk...)
	p.set(ctx, c, string(key), e)
	return names, vk
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
	}
}

// uncacheable records that the origin answered c's key with something that
// cannot be stored: the old entry goes, and a hit-for-miss marker makes
// later requests skip coalescing for a while (Varnish's hit-for-miss).
// Errors (5xx) and answers that were uncacheable because of the request
// (no-store, Authorization) leave no marker: coalescing keeps protecting
// the origin for those.
func (p *Proxy) uncacheable(ctx context.Context, c *call, r *http.Request, status int) {
	if c.mark != nil {
		if c.stale != nil {
			_ = p.store.Delete(ctx, c.key)
		}
		return
	}
	if status >= 500 || c.rcc.NoStore || len(r.Header["Authorization"]) > 0 {
		if c.stale != nil {
			_ = p.store.Delete(ctx, c.prim)
		}
		return
	}
	p.set(ctx, c, c.prim, &entry.Entry{
		Kind: entry.KindUncacheable, Host: c.host, Target: c.tgt,
		ResponseTime: p.now(), Lifetime: c.cfg.Config.Defaults.HitForMissTTL.Std(),
	})
}

// staleOnError reports whether c's stored response may stand in for a
// failed origin (RFC 5861 stale-if-error).
func (p *Proxy) staleOnError(c *call) bool {
	return c.stale != nil && httpcache.StaleOnErrorOK(stored(c.stale), c.rcc, p.now())
}

func (p *Proxy) serveStale(w http.ResponseWriter, r *http.Request, c *call) outcome {
	p.serveEntry(w, r, c.stale, httpcache.CurrentAge(stored(c.stale), p.now()), pick(c.layer, xStaleL1, xStaleL2))
	return outcome{metrics.ResultStale, c.layer, false}
}

// tee streams body to w (nil: to nobody) while collecting it, up to limit
// bytes, for the cache. Past the limit it calls overflow once and stops
// collecting; once late is set it stops collecting too. It keeps reading
// after the client has gone for as long as it is collecting, since the
// fill serves everyone; with nobody left to serve it stops. complete is
// true when the whole body was collected.
func (p *Proxy) tee(w http.ResponseWriter, body io.Reader, hint, limit int64, late *atomic.Bool, overflow func()) (data []byte, complete bool, err error) {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	collect := true
	if hint >= 0 && hint <= limit {
		data = make([]byte, 0, hint)
	}
	var rc *http.ResponseController
	if w != nil {
		rc = http.NewResponseController(w)
	}
	for {
		n, rerr := body.Read(buf)
		if collect && late.Load() {
			collect, data = false, nil
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
			if w != nil {
				if _, werr := w.Write(buf[:n]); werr != nil {
					w = nil
				} else {
					_ = rc.Flush()
				}
			}
		}
		if w == nil && !collect {
			return nil, false, nil
		}
		if rerr == io.EOF {
			if data == nil && collect {
				data = []byte{}
			}
			return data, collect, nil
		}
		if rerr != nil {
			return nil, false, rerr
		}
	}
}

// storedHeader is the header kept with an entry: end-to-end fields only,
// without those the decision strips and those the cache regenerates.
func storedHeader(src http.Header, strip []string) http.Header {
	h := src.Clone()
	httpcache.RemoveHopByHop(h)
	for _, k := range strip {
		delete(h, k)
	}
	for _, k := range [...]string{"Age", "X-Cache", "Content-Length"} {
		delete(h, k)
	}
	return h
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

// discard is the client of a background refresh: nobody.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = make(http.Header)
	}
	return d.h
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// refresh revalidates c's stale entry in the background, once per key:
// when a fetch for the key is already running, it does nothing.
func (p *Proxy) refresh(r *http.Request, c *call) {
	f, leader := p.flights.join(c.key)
	if !leader {
		return
	}
	// The request ends when the handler returns; the refresh keeps its own
	// copy, bound to the Proxy's lifetime.
	br := r.Clone(p.ctx)
	br.Method, br.Body, br.ContentLength = http.MethodGet, http.NoBody, 0
	c.background = true
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		defer p.flights.finish(c.key, f, shared{})
		if p.cluster != nil && c.cfg.Config.CoalesceClusterWide() {
			// One refresh per key across the tier: a replica that does not
			// get the lease takes the refreshing replica's result from L2.
			wait := c.cfg.Config.Coalescing.Timeout.Std()
			release, lead := p.cluster.TryLead(p.ctx, c.key, min(leaseTTL, wait))
			if !lead {
				p.awaitRefresh(c, f, min(wait, 2*leaseTTL))
				return
			}
			defer release()
			c.shared = true
		}
		p.fill(&discard{}, br, c, f)
	}()
}

// awaitRefresh waits, up to wait and with the same backing-off polls as a
// waiting fill, for the replica that refreshes c's key to store the newer
// response in L2, which it promotes into L1 and hands to the flight's
// waiters. Meanwhile this replica keeps serving its stale copy.
func (p *Proxy) awaitRefresh(c *call, f *flight, wait time.Duration) {
	p.poll(wait, func() bool {
		var e entry.Entry
		layer, err := p.cluster.GetNewer(p.ctx, c.key, &e, c.stale.ResponseTime)
		if err != nil {
			return false
		}
		p.flights.finish(c.key, f, shared{e: detach(&e), xcache: pick(layer, xHitL1, xHitL2), out: outcome{metrics.ResultHit, layer, false}})
		return true
	})
}
