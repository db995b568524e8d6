package proxy

import (
	"context"
	"net/http"
	"slices"
	"unsafe"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// keyBuf builds a request's keys in a reused buffer so that the hit path
// does not allocate for them.
type keyBuf struct {
	b      []byte
	extras []byte // the rule's request header and cookie key parts
	// ambiguous: a keyed cookie is named so that origins may read another
	// value than the key holds; the request bypasses the cache.
	ambiguous bool

	resp, mark             entry.Entry // scratch entries lookups decode into
	vary                   httpcache.VaryOptions
	scheme, host           string
	targetStart, targetEnd int // b[targetStart:targetEnd] is path?query as keyed
	primaryLen             int // b[:primaryLen] is the primary key
}

// build writes the primary key of r under rule into kb, and the rule's
// extra key parts (request headers, cookies), which select a variant
// behind the primary key's marker, into kb.extras.
func (kb *keyBuf) build(r *http.Request, rule *tierconfig.CompiledRule) {
	kb.scheme = cachekey.Scheme(forwardedProto(r.Header), r.TLS != nil)
	kb.host = cachekey.Host(r.Host, kb.scheme)
	b := cachekey.AppendPrimary(kb.b[:0], kb.scheme, kb.host, "")
	kb.targetStart = len(b)
	b = cachekey.AppendTarget(b, rule, r.URL.EscapedPath(), r.URL.RawQuery)
	kb.targetEnd = len(b)
	kb.vary = rule.Policy.Vary
	kb.extras = kb.extras[:0]
	kb.ambiguous = false
	if rule.HasKeyExtras {
		kb.extras = rule.AppendKeyExtras(kb.extras, r)
		kb.ambiguous = rule.AmbiguousCookies(r)
	}
	kb.primaryLen = len(b)
	kb.b = b
}

// forwardedProto reads X-Forwarded-Proto without canonicalizing the name
// (the server stores it canonical).
func forwardedProto(h http.Header) string {
	if v := h["X-Forwarded-Proto"]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// primary returns the primary key without copying; valid until kb changes.
func (kb *keyBuf) primary() string { return unsafeString(kb.b[:kb.primaryLen]) }

// variant appends the variant part for marker m (the rule's extra key
// parts, then the request's values of the Vary fields) and returns the
// variant key (without copying; valid until kb changes).
func (kb *keyBuf) variant(m *entry.Entry, req http.Header) string {
	b := cachekey.AppendVariant(kb.b[:kb.primaryLen], m.Nonce)
	b = append(b, kb.extras...)
	b = httpcache.AppendVaryKey(b, m.Vary, req, kb.vary)
	kb.b = b
	return unsafeString(b)
}

// key returns the key the last lookup used last: the variant key when
// there was a marker, else the primary key (without copying; valid until
// kb changes).
func (kb *keyBuf) key() string { return unsafeString(kb.b) }

// target returns a copy of path?query as keyed.
func (kb *keyBuf) target() string { return string(kb.b[kb.targetStart:kb.targetEnd]) }

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// found is the result of a lookup. Its entries point into the key
// buffer's scratch space: valid until the buffer goes back to its pool;
// detach them to keep them longer.
type found struct {
	e      *entry.Entry // the stored response, when ok
	ok     bool
	layer  string
	marker *entry.Entry // the Vary marker under the primary key, when not nil
	// hitForMiss: the origin recently answered this key with something
	// uncacheable; skip coalescing.
	hitForMiss bool
	// part is a stored partial response (entry.KindPartial) where a
	// complete one would be (never with ok): partial.go.
	part *entry.Entry
}

// lookup finds the stored response for r, following a Vary marker to the
// request's variant. kb must hold r's primary key; afterwards kb.b holds the
// variant key when there was a marker.
func (p *Proxy) lookup(ctx context.Context, kb *keyBuf, r *http.Request) found {
	var f found
	layer, err := p.store.Get(ctx, kb.primary(), &kb.resp)
	if err != nil {
		return f
	}
	switch kb.resp.Kind {
	case entry.KindResponse:
		// Under a rule that keys on request headers or cookies, responses
		// live behind a marker only; one stored directly under the primary
		// key was stored before the rule said so and must not be shared.
		if len(kb.extras) == 0 {
			f.e, f.ok, f.layer = &kb.resp, true, layer
		}
	case entry.KindPartial:
		if len(kb.extras) == 0 {
			f.part, f.layer = &kb.resp, layer
		}
	case entry.KindUncacheable:
		f.hitForMiss = p.now().Before(kb.resp.FreshUntil())
	case entry.KindVary:
		kb.mark, kb.resp = kb.resp, kb.mark // keep the marker, reuse the other's slices
		f.marker = &kb.mark
		layer, err := p.store.Get(ctx, kb.variant(f.marker, r.Header), &kb.resp)
		if err == nil && kb.resp.Kind == entry.KindResponse {
			f.e, f.ok, f.layer = &kb.resp, true, layer
		} else if err == nil && kb.resp.Kind == entry.KindPartial {
			f.part, f.layer = &kb.resp, layer
		}
	}
	return f
}

// detach returns a copy of e that shares nothing with a scratch entry
// (strings and the body alias the store's own copy of the value, which is
// never reused, so only the slices, the body file reference and the
// partial spans, which decoding reuses too, need copying).
func detach(e *entry.Entry) *entry.Entry {
	c := *e
	c.Header = slices.Clone(e.Header)
	c.Tags = slices.Clone(e.Tags)
	c.Vary = slices.Clone(e.Vary)
	if e.File != nil {
		f := *e.File
		c.File = &f
	}
	if e.Partial != nil {
		pa := *e.Partial
		pa.Spans = slices.Clone(pa.Spans)
		c.Partial = &pa
	}
	return &c
}

// stored converts an entry to what httpcache's freshness rules read.
func stored(e *entry.Entry) httpcache.Stored {
	return httpcache.Stored{
		ResponseTime:         e.ResponseTime,
		InitialAge:           e.InitialAge,
		Lifetime:             e.Lifetime,
		StaleWhileRevalidate: e.StaleWhileRevalidate,
		StaleIfError:         e.StaleIfError,
		StaleIfUnreachable:   e.StaleIfUnreachable,
		MustRevalidate:       e.Has(entry.FlagMustRevalidate),
		NoCache:              e.Has(entry.FlagNoCache),
	}
}
