package store

import (
	"context"
	"errors"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/store/l2"
)

// Soft purges in L2: instead of deleting, they end the freshness of the
// stored responses at the purge (entry.Entry.Expire) and write them back
// with the L2 TTL that is left of their use (their stale windows, and the
// revalidation grace when they have a validator); one with nothing left
// is deleted, as Redis would have expired it. L1 is marked through Local.
// Like the hard purges (the purger's Remote), they go to L2 directly,
// not through the breaker: they are an operator's request, not a
// client's.

// errNoL2 is returned by the soft purges of a store without L2.
var errNoL2 = errors.New("store: no L2")

// ExpireL2Keys soft-purges at at the entries stored for keys that match
// accepts (match sees every entry found, Vary markers and hit-for-miss
// records included, so it can follow markers and count each key once)
// and returns how many stored responses the purge concerned.
func (s *Layered) ExpireL2Keys(ctx context.Context, at time.Time, keys []string, match func(key string, e *entry.Entry) bool) (int, error) {
	if s.l2 == nil {
		return 0, errNoL2
	}
	return s.l2.RewriteKeys(ctx, keys, s.expire(at, match))
}

// ExpireL2Tags is ExpireL2Keys for the entries stored with any of tags.
func (s *Layered) ExpireL2Tags(ctx context.Context, at time.Time, tags []string, match func(key string, e *entry.Entry) bool) (int, error) {
	if s.l2 == nil {
		return 0, errNoL2
	}
	return s.l2.RewriteTags(ctx, tags, s.expire(at, match))
}

// ExpireL2Matching is ExpireL2Keys for every entry of the tier (a scan).
func (s *Layered) ExpireL2Matching(ctx context.Context, at time.Time, match func(key string, e *entry.Entry) bool) (int, error) {
	if s.l2 == nil {
		return 0, errNoL2
	}
	return s.l2.RewriteMatching(ctx, s.expire(at, match))
}

// expire is the rewrite of a soft purge at at of what match accepts.
func (s *Layered) expire(at time.Time, match func(key string, e *entry.Entry) bool) l2.Rewrite {
	return func(key string, e *entry.Entry) l2.Rewritten {
		if e == nil || !match(key, e) {
			return l2.Rewritten{}
		}
		concerned, changed := e.Expire(at)
		if !changed {
			return l2.Rewritten{Counted: concerned}
		}
		return l2.Rewritten{Counted: true, Changed: true, TTL: l2TTL(e, s.now(), s.grace)}
	}
}

// A purge's repeat (internal/invalidate) deletes only what was requested
// before the purge: the rewrites below delete the entries match selects,
// each only if it is still the value read (a response stored in between
// is kept), with their bodies' chunks, and keep the rest as they are.

// DeleteL2KeysIf deletes the entries stored for keys that match selects
// and returns how many it deleted.
func (s *Layered) DeleteL2KeysIf(ctx context.Context, keys []string, match func(key string, e *entry.Entry) bool) (int, error) {
	if s.l2 == nil {
		return 0, errNoL2
	}
	return s.l2.RewriteKeys(ctx, keys, deleteIf(match))
}

// DeleteL2TagsIf is DeleteL2KeysIf for the entries stored with any of
// tags.
func (s *Layered) DeleteL2TagsIf(ctx context.Context, tags []string, match func(key string, e *entry.Entry) bool) (int, error) {
	if s.l2 == nil {
		return 0, errNoL2
	}
	return s.l2.RewriteTags(ctx, tags, deleteIf(match))
}

// deleteIf deletes what match selects, and every value under the keys
// read that is not an entry this sidecar reads: the purge deleted
// whatever the key held, and a repeat cannot tell when such a value was
// requested (a later version's write-back during a rolling upgrade).
func deleteIf(match func(key string, e *entry.Entry) bool) l2.Rewrite {
	return func(key string, e *entry.Entry) l2.Rewritten {
		if e != nil && !match(key, e) {
			return l2.Rewritten{}
		}
		return l2.Rewritten{Counted: e != nil, Changed: true}
	}
}
