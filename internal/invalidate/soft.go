package invalidate

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/entry"
)

// Soft purges (Request.Soft) mark what a purge names stale instead of
// removing it, as Varnish's soft purge does: from the purge on, a marked
// response is served only within its stale windows (stale-while-
// revalidate, while one background refresh runs; stale-if-error when the
// origin fails) and validated or fetched again otherwise, exactly as an
// entry whose freshness lifetime just ended. The stores do the marking
// (entry.Entry.Expire rewrites the stored entry with its lifetime ended
// at the purge, keeping its validators, so that a 304 renews it): the
// proxy's hit path reads entries as it always did and changes in nothing.
//
// Everything else is a hard purge's: the same requests (by URL, prefix,
// tag or all), authorization and rate limit, marks on the fills in
// progress (a fill that began before the purge is served but not stored),
// dropped queued L2 writes, L2 before L1, and the fan-out to the tier's
// other sidecars, which mark their L1.

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

// purgeLocal removes what r names from this sidecar's L1 and body files,
// or with r.Soft marks it stale as of at, and counts what it did. With
// before set (a repeat) it removes only what was requested before it.
func (p *Purger) purgeLocal(r Request, refs []ref, at, before time.Time) localCount {
	tags := tagSet(r.Tags)
	match := func(e *entry.Entry) bool {
		return (r.All || matches(e, refs, r.Prefix, tags)) && (before.IsZero() || older(e, before))
	}
	var c localCount
	if l, ok := p.local.(LocalFiles); ok {
		if r.Soft {
			c.responses, c.files, c.filesOnly = l.ExpireMatchingCount(at, match)
		} else {
			c.responses, c.files, c.filesOnly = l.DeleteMatchingCount(match)
		}
		return c
	}
	if r.Soft {
		c.responses = p.local.ExpireMatching(at, match)
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

// expireRemote applies the soft purge r, made at at, to L2: the primary
// keys of absolute URLs, the tags' sets for tags, and one scan for the
// rest (prefixes, origin-form URLs, which name every host, and absolute
// URLs whose primary key holds a Vary marker: their variants are stored
// under keys a purge cannot compute). Each stored response counts once,
// however many parts of r name it.
func (p *Purger) expireRemote(ctx context.Context, r Request, at time.Time) (int, error) {
	if r.All {
		return p.remote.ExpireMatching(ctx, at, func(string, *entry.Entry) bool { return true })
	}
	cfg := p.cfg.Load()
	counted := make(map[string]struct{})
	once := func(key string, _ *entry.Entry) bool {
		if _, dup := counted[key]; dup {
			return false
		}
		counted[key] = struct{}{}
		return true
	}
	var keys, scanURLs []string
	urlOf := make(map[string]string) // primary key → the URL naming it
	for _, raw := range r.URLs {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		if u.Host == "" {
			scanURLs = append(scanURLs, raw)
			continue
		}
		for _, k := range cachekey.PrimaryKeys(&cfg.StoredRule(u.Host, u.EscapedPath()).Key, u.Host, u.EscapedPath(), u.RawQuery) {
			keys = append(keys, k)
			urlOf[k] = raw
		}
	}
	total := 0
	var errs []error
	if len(keys) > 0 {
		varied := make(map[string]struct{})
		n, err := p.remote.ExpireKeys(ctx, at, keys, func(key string, e *entry.Entry) bool {
			if e.Kind == entry.KindVary {
				varied[urlOf[key]] = struct{}{}
				return false
			}
			return once(key, e)
		})
		total += n
		errs = append(errs, err)
		for raw := range varied {
			scanURLs = append(scanURLs, raw)
		}
	}
	if len(r.Tags) > 0 {
		n, err := p.remote.ExpireTags(ctx, at, r.Tags, once)
		total += n
		errs = append(errs, err)
	}
	if len(scanURLs) > 0 || r.Prefix != "" {
		refs := p.refsOf(cfg, scanURLs)
		n, err := p.remote.ExpireMatching(ctx, at, func(key string, e *entry.Entry) bool {
			return matches(e, refs, r.Prefix, nil) && once(key, e)
		})
		total += n
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return total, fmt.Errorf("l2: %w", err)
	}
	return total, nil
}
