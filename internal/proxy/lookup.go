package proxy

import (
	"context"
	"net/http"
	"slices"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// keyBuf is a request's keys (cachekey.Builder) and the scratch entries
// its lookups decode into, reused through a pool so that the hit path
// does not allocate for them.
type keyBuf struct {
	cachekey.Builder
	resp, mark entry.Entry
}

// build builds r's keys under rule: its key shape and Vary options.
func (kb *keyBuf) build(r *http.Request, rule *tierconfig.CompiledRule) {
	kb.Build(r, &rule.Key, rule.Policy.Vary)
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
// request's variant. kb must hold r's primary key; afterwards kb.Key() is
// the variant key when there was a marker.
func (p *Proxy) lookup(ctx context.Context, kb *keyBuf, r *http.Request) found {
	var f found
	layer, err := p.store.Get(ctx, kb.Primary(), &kb.resp)
	if err != nil {
		return f
	}
	switch kb.resp.Kind {
	case entry.KindResponse:
		// Under a rule that keys on request headers or cookies, responses
		// live behind a marker only; one stored directly under the primary
		// key was stored before the rule said so and must not be shared.
		if !kb.HasExtras() {
			f.e, f.ok, f.layer = &kb.resp, true, layer
		}
	case entry.KindPartial:
		if !kb.HasExtras() {
			f.part, f.layer = &kb.resp, layer
		}
	case entry.KindUncacheable:
		f.hitForMiss = p.now().Before(kb.resp.FreshUntil())
	case entry.KindVary:
		kb.mark, kb.resp = kb.resp, kb.mark // keep the marker, reuse the other's slices
		f.marker = &kb.mark
		layer, err := p.store.Get(ctx, kb.Variant(f.marker.Nonce, f.marker.Vary, r.Header), &kb.resp)
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
// partial spans and pieces, which decoding reuses too, need copying).
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
		pa.Pieces = slices.Clone(pa.Pieces)
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
