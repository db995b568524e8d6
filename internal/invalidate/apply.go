package invalidate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// A purge is applied to each layer by one path, hard or soft (Mode):
// purgeRemote for L2, purgeLocal for this sidecar's L1 and body files.

// LocalFiles is implemented by a Local that keeps response bodies in files
// beside L1 (store.Local): purges go through these methods, which do what
// DeleteMatching and ExpireMatching do and count apart the stored
// responses of L1, the body files, and of those the files whose entries L1
// no longer held.
type LocalFiles interface {
	DeleteMatchingCount(match func(e *entry.Entry) bool) (responses, files, filesOnly int)
	ExpireMatchingCount(at time.Time, match func(e *entry.Entry) bool) (responses, files, filesOnly int)
}

// stored reports whether e is a stored response, whole or partial (what
// purges count; Vary markers and hit-for-miss records are not).
func stored(e *entry.Entry) bool {
	return e.Kind == entry.KindResponse || e.Kind == entry.KindPartial
}

// localCount is what a purge did in this sidecar (see LocalFiles).
type localCount struct{ responses, files, filesOnly int }

// purgeLocal applies r in mode m to this sidecar's L1 and body files:
// removes what r names or, soft, marks it stale as of m.At, and counts
// what it did. With before set (a repeat) it takes only what was
// requested before it.
func (p *Purger) purgeLocal(r Request, refs []ref, m Mode, before time.Time) localCount {
	tags := tagSet(r.Tags)
	match := func(e *entry.Entry) bool {
		return (r.All || matches(e, refs, r.Prefix, tags)) && (before.IsZero() || older(e, before))
	}
	var c localCount
	if l, ok := p.local.(LocalFiles); ok {
		if m.Soft {
			c.responses, c.files, c.filesOnly = l.ExpireMatchingCount(m.At, match)
		} else {
			c.responses, c.files, c.filesOnly = l.DeleteMatchingCount(match)
		}
		return c
	}
	if m.Soft {
		c.responses = p.local.ExpireMatching(m.At, match)
		return c
	}
	p.local.DeleteMatching(func(e *entry.Entry) bool {
		hit := match(e)
		if hit && stored(e) {
			c.responses++
		}
		return hit
	})
	return c
}

// purgeRemote applies r to L2 in mode m: the primary keys of absolute
// URLs, the tags' sets for tags, and one scan for the rest (prefixes and
// origin-form URLs, which name every host). A soft purge scans for the
// absolute URLs whose primary key holds a Vary marker too (their variants
// are stored under keys a purge cannot compute; a hard one retires them
// by deleting the marker), and counts each stored response once, however
// many parts of r name it. With before set (a repeat) a hard purge takes
// only what was requested before it; a soft one is made at before (m.At)
// and so marks only that.
func (p *Purger) purgeRemote(ctx context.Context, r Request, m Mode, before time.Time) (int, error) {
	var each func(string, *entry.Entry) bool // nil: every entry
	if !m.Soft {
		each = requestedBefore(before)
	}
	if r.All {
		return p.remote.Purge(ctx, Selector{Kind: SelectAll, Match: each}, m)
	}
	if m.Soft {
		each = once()
	}
	cfg := p.cfg.Load()
	keys, urlOf, scanURLs := splitURLs(cfg, r.URLs)
	total := 0
	var errs []error
	if len(keys) > 0 {
		match := each
		varied := make(map[string]struct{})
		if m.Soft {
			match = func(key string, e *entry.Entry) bool {
				if e.Kind == entry.KindVary {
					varied[urlOf[key]] = struct{}{}
					return false
				}
				return each(key, e)
			}
		}
		n, err := p.remote.Purge(ctx, Selector{Kind: SelectKeys, Values: keys, Match: match}, m)
		total += n
		errs = append(errs, err)
		for raw := range varied {
			scanURLs = append(scanURLs, raw)
		}
	}
	if len(r.Tags) > 0 {
		n, err := p.remote.Purge(ctx, Selector{Kind: SelectTags, Values: r.Tags, Match: each}, m)
		total += n
		errs = append(errs, err)
	}
	if len(scanURLs) > 0 || r.Prefix != "" {
		refs := p.refsOf(cfg, scanURLs)
		n, err := p.remote.Purge(ctx, Selector{Kind: SelectAll, Match: func(key string, e *entry.Entry) bool {
			return matches(e, refs, r.Prefix, nil) && (each == nil || each(key, e))
		}}, m)
		total += n
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return total, fmt.Errorf("l2: %w", err)
	}
	return total, nil
}

// splitURLs sorts a purge's URLs: the primary keys of the absolute ones,
// each mapped to the URL naming it, and the origin-form ones, which name
// every host and are found by a scan.
func splitURLs(cfg *tierconfig.Compiled, urls []string) (keys []string, urlOf map[string]string, scan []string) {
	urlOf = make(map[string]string)
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue // Validate refuses these
		}
		if u.Host == "" {
			scan = append(scan, raw)
			continue
		}
		for _, k := range cachekey.PrimaryKeys(&cfg.StoredRule(u.Host, u.EscapedPath()).Key, u.Host, u.EscapedPath(), u.RawQuery) {
			keys = append(keys, k)
			urlOf[k] = raw
		}
	}
	return keys, urlOf, scan
}

// once accepts each key the first time it sees it.
func once() func(string, *entry.Entry) bool {
	counted := make(map[string]struct{})
	return func(key string, _ *entry.Entry) bool {
		if _, dup := counted[key]; dup {
			return false
		}
		counted[key] = struct{}{}
		return true
	}
}

// requestedBefore is a hard repeat's condition (older), nil when before is
// zero (not a repeat: every entry).
func requestedBefore(before time.Time) func(string, *entry.Entry) bool {
	if before.IsZero() {
		return nil
	}
	return func(_ string, e *entry.Entry) bool { return older(e, before) }
}
