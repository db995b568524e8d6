package proxy

import (
	"net/http"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// detailAmbiguousPath is the Cache-Status detail of a request whose path
// readings select different rules.
const detailAmbiguousPath = "ambiguous-path"

// cacheName is the cache's name in its Cache-Status member (RFC 9211 §2).
const cacheName = tierconfig.CacheStatusName

// verdict is what a response's X-Cache and Cache-Status say about it,
// decided before its header is written.
type verdict struct {
	x    []string // X-Cache
	rule *tierconfig.CompiledRule
	// fwd says why the request went to the origin; fwdNone: it did not.
	fwd fwdKind
	// fwdStatus is the origin's status when it differs from the one sent
	// (a revalidation's 304, a 5xx answered from a stale entry).
	fwdStatus int
	stored    bool
	collapsed bool
	// detail, when set, is the Cache-Status detail instead of the rule's
	// name: why the request could not use the cache.
	detail string
	// dbg is the decision a debug request is told (debug.go); nil for
	// every other request, and never in what a flight shares.
	dbg *debugInfo
}

// with returns v for X-Cache value x.
func (v verdict) with(x []string) verdict { v.x = x; return v }

// hitVerdict is a response served from the cache without asking.
func hitVerdict(x []string, rule *tierconfig.CompiledRule, dbg *debugInfo) verdict {
	return verdict{x: x, rule: rule, dbg: dbg}
}

// setStatus writes X-Cache and, unless the tier turned it off,
// Cache-Status (cacheStatus) for a response with status sent.
func (p *Proxy) setStatus(h http.Header, v verdict, sent int) {
	h["X-Cache"] = v.x
	if cs, ok := cacheStatus(p.cfg.Load(), v, sent, 0, false); ok {
		h["Cache-Status"] = append(h["Cache-Status"], cs)
	}
	// Only this cache says Tiercache-Debug, and only to a debug request:
	// an origin's (or a client-controlled upstream's) field is dropped.
	delete(h, debugHeader)
	if v.dbg != nil {
		h[debugHeader] = []string{v.dbg.value(v, 0, false)}
	}
}

// cacheStatus is this cache's Cache-Status member for v and a response
// with status sent, false when the tier turned Cache-Status off. The
// caller appends it to the field, after the members the response already
// carries (RFC 9211 §2: the member of the cache nearest the client comes
// last), on a field line of its own so that the origin's lines are kept
// as they came. ttl is the remaining freshness of a response served from
// the cache (hasTTL).
func cacheStatus(cfg *tierconfig.Compiled, v verdict, sent int, ttl time.Duration, hasTTL bool) (string, bool) {
	if !cfg.CacheStatus {
		return "", false
	}
	s := httpcache.CacheStatus{
		Hit: v.fwd == fwdNone, Fwd: v.fwd.String(),
		TTL: ttl, HasTTL: hasTTL, Stored: v.stored, Collapsed: v.collapsed,
	}
	if v.fwdStatus != sent {
		// fwd-status defaults to the status sent (RFC 9211 §2.3).
		s.FwdStatus = v.fwdStatus
	}
	switch {
	case v.detail != "":
		s.Detail = v.detail
	case v.rule != nil:
		s.Detail = v.rule.Name
	}
	if v.dbg != nil {
		s.Key = v.dbg.key
	}
	var buf [128]byte
	return string(httpcache.AppendCacheStatus(buf[:0], cacheName, s)), true
}

// missKind says why a request that the cache could not answer from what
// lookup found goes to the origin: nothing stored for the URI, a Vary
// marker without this request's variant, a hit-for-miss marker, a stored
// response the request's own directives refuse (no-cache, max-age=0,
// min-fresh), or a stale one.
func missKind(f *found, rcc httpcache.RequestCC, now time.Time) fwdKind {
	switch {
	case f.hitForMiss:
		return fwdMiss
	case !f.ok && f.part != nil:
		return fwdPartial
	case !f.ok && f.marker != nil:
		return fwdVaryMiss
	case !f.ok:
		return fwdURIMiss
	}
	if rcc != (httpcache.RequestCC{}) {
		if use, _ := httpcache.Evaluate(stored(f.e), httpcache.RequestCC{}, now); use == httpcache.UseFresh {
			return fwdRequest
		}
	}
	return fwdStale
}

// ruleTable maps the rules of one config to their request counters.
type ruleTable struct {
	cfg   *tierconfig.Compiled
	rules map[*tierconfig.CompiledRule]*metrics.Rule
}

// ruleMetrics returns rule's request counters (requests_total's rule
// label). They are resolved once per config, the first time a request
// sees it, so a request does a pointer lookup, never a label lookup.
func (p *Proxy) ruleMetrics(cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule) *metrics.Rule {
	t := p.ruleTab.Load()
	if t == nil || t.cfg != cfg {
		// Two requests may build it at once: the same counters either way.
		rules := cfg.Rules()
		t = &ruleTable{cfg: cfg, rules: make(map[*tierconfig.CompiledRule]*metrics.Rule, len(rules)+1)}
		t.rules[cfg.Default] = p.m.Rule(cfg.Default.Name)
		for _, r := range rules {
			t.rules[r] = p.m.Rule(r.Name)
		}
		p.ruleTab.Store(t)
	}
	return t.rules[rule]
}
