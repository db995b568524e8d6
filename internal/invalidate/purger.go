// Package invalidate owns removing entries before their time: purges from
// the admin API (by URL, path prefix or tag) and the invalidations that
// unsafe requests cause (RFC 9111 §4.4). It keeps a generation number that
// changes with every purge, so a fill that began before a purge is served
// but never stored after it.
//
// This sidecar's L1 is the only store today; the cluster-wide fan-out
// (L2 and the other sidecars' L1 through Redis pub/sub) plugs in here.
package invalidate

import (
	"context"
	"net/url"
	"strings"
	"sync/atomic"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Local is the store a Purger removes entries from.
type Local interface {
	Delete(key string)
	DeleteMatching(match func(e *entry.Entry) bool) int
}

// Purger removes entries and counts generations.
type Purger struct {
	local Local
	cfg   *tierconfig.Holder
	gen   atomic.Uint64
	// OnPurge, when set, is called after every purge or invalidation (for
	// metrics).
	OnPurge func()
}

// NewPurger returns a Purger over local, shaping URLs with the tier config
// in effect.
func NewPurger(local Local, cfg *tierconfig.Holder) *Purger {
	return &Purger{local: local, cfg: cfg}
}

// Generation changes whenever anything is purged or invalidated.
func (p *Purger) Generation() uint64 { return p.gen.Load() }

// Invalidate removes every variant of each absolute URL: the exact primary
// keys when the URL's rule keys only on host and target, else by matching
// entries. It is what unsafe requests trigger, so the common case does no
// scan.
func (p *Purger) Invalidate(_ context.Context, urls []*url.URL) {
	p.gen.Add(1)
	cfg := p.cfg.Load()
	var scan []ref
	for _, u := range urls {
		keys := cachekey.PrimaryKeys(cfg, u.Host, u.EscapedPath(), u.RawQuery)
		if keys == nil {
			scan = append(scan, p.refOf(cfg, u.Host, u.EscapedPath(), u.RawQuery))
			continue
		}
		for _, k := range keys {
			p.local.Delete(k)
		}
	}
	if len(scan) > 0 {
		p.local.DeleteMatching(func(e *entry.Entry) bool { return matchesAny(e, scan) })
	}
	p.purged()
}

// Request is a purge: any combination of URLs, a path prefix and tags.
type Request struct {
	URLs   []string `json:"urls,omitempty"`
	Prefix string   `json:"prefix,omitempty"`
	Tags   []string `json:"tags,omitempty"`
}

// Purge removes what r names and returns how many stored responses went
// (every variant counts). r must have passed Validate.
func (p *Purger) Purge(_ context.Context, r Request) int {
	p.gen.Add(1)
	cfg := p.cfg.Load()
	refs := make([]ref, 0, len(r.URLs))
	for _, raw := range r.URLs {
		u, err := url.Parse(raw)
		if err != nil {
			continue // Validate refuses these
		}
		refs = append(refs, p.refOf(cfg, u.Host, u.EscapedPath(), u.RawQuery))
	}
	tags := make(map[string]struct{}, len(r.Tags))
	for _, t := range r.Tags {
		tags[t] = struct{}{}
	}
	n := 0
	p.local.DeleteMatching(func(e *entry.Entry) bool {
		hit := matchesAny(e, refs) ||
			(r.Prefix != "" && strings.HasPrefix(e.Target, r.Prefix)) ||
			hasTag(e, tags)
		if hit && e.Kind == entry.KindResponse {
			n++
		}
		return hit
	})
	p.purged()
	return n
}

func (p *Purger) purged() {
	if p.OnPurge != nil {
		p.OnPurge()
	}
}

// ref names a resource: a host (empty: any host) and a target as keyed.
type ref struct{ host, target string }

func (p *Purger) refOf(cfg *tierconfig.Compiled, host, escapedPath, rawQuery string) ref {
	rule := cfg.Match(unescape(escapedPath))
	r := ref{target: cachekey.Target(rule, escapedPath, rawQuery)}
	if host != "" {
		// Both schemes' default ports fold away; what remains is the same
		// under either scheme.
		r.host = cachekey.Host(cachekey.Host(host, "http"), "https")
	}
	return r
}

func matchesAny(e *entry.Entry, refs []ref) bool {
	for _, r := range refs {
		if e.Target == r.target && (r.host == "" || r.host == e.Host) {
			return true
		}
	}
	return false
}

func hasTag(e *entry.Entry, tags map[string]struct{}) bool {
	if len(tags) == 0 {
		return false
	}
	for _, t := range e.Tags {
		if _, ok := tags[t]; ok {
			return true
		}
	}
	return false
}

func unescape(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}
