package proxy

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
)

// Keeping a fill's response: the entry it becomes (responseEntry,
// updatedEntry), where it goes (place: its key, behind a Vary marker when
// it varies), how it is written (put, set: this replica's store, or where
// every replica sees it for a lease holder), what it replaces (superseded)
// and what an answer that cannot be stored leaves (uncacheable).

// markerLifetime is how long a Vary marker lives. Markers are tiny; their
// variants carry their own freshness, and a marker outliving them only
// costs a lookup.
const markerLifetime = 24 * time.Hour

// keep stores the complete response e of c's fill where pl says and
// hands it to the flight's waiters. A fill overtaken by an invalidation of
// its resource is not stored (its body file goes), and its waiters join a
// new flight: they may be reading their own write back.
func (p *Proxy) keep(ctx context.Context, c *call, l *lead, e *entry.Entry, pl placement, watch *invalidate.Watch) {
	var res shared
	if p.put(ctx, c, e, pl, watch) {
		c.kept = e
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
	h := storedHeader(resp.Header, d.Strip)
	fl, size := flags(d), int64(0)
	if c.norm {
		// Coded (coding.go): every answer from it says Vary:
		// Accept-Encoding; its decoded size is set when its body is
		// checked (codeBody, codingCheck).
		codedHeader(h)
		fl |= entry.FlagCoded
		size = -1
	}
	return &entry.Entry{
		Kind:                 entry.KindResponse,
		Host:                 c.host,
		Target:               c.tgt,
		Tags:                 httpcache.Tags(resp.Header),
		Status:               resp.StatusCode,
		Header:               entry.FieldsFrom(h),
		DecodedSize:          size,
		RequestTime:          reqTime,
		ResponseTime:         respTime,
		InitialAge:           d.InitialAge,
		Lifetime:             d.Lifetime,
		StaleWhileRevalidate: d.StaleWhileRevalidate,
		StaleIfError:         d.StaleIfError,
		StaleIfUnreachable:   d.StaleIfUnreachable,
		Flags:                fl,
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
	sh := storedHeader(merged, d.Strip)
	if e.Flags&entry.FlagCoded != 0 {
		codedHeader(sh)
	}
	e.Header = entry.FieldsFrom(sh)
	e.Tags = httpcache.Tags(merged)
	e.RequestTime, e.ResponseTime = reqTime, respTime
	e.InitialAge, e.Lifetime = d.InitialAge, d.Lifetime
	e.StaleWhileRevalidate, e.StaleIfError = d.StaleWhileRevalidate, d.StaleIfError
	e.StaleIfUnreachable = d.StaleIfUnreachable
	e.Flags = flags(d) | c.stale.Flags&(entry.FlagCoded|entry.FlagUndecodable|entry.FlagCompressed)
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
	if c.norm {
		// The origin saw the tier's Accept-Encoding, not the client's:
		// the stored copy does not vary by it (coded.go serves each
		// client the coding it takes).
		names = slices.DeleteFunc(names, func(n string) bool { return n == "accept-encoding" })
	}
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
