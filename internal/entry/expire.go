package entry

import (
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// Expire applies a soft purge made at at to e: from at on, e is stale
// exactly as if its freshness lifetime had run out at that instant. Only
// Lifetime changes, to e's age at at (RFC 9111 §4.2.3: InitialAge plus the
// time since ResponseTime), so the stored times, the Age a client sees,
// the validators and the stale windows stay as they were: e is served
// within stale-while-revalidate and stale-if-error, validated otherwise,
// and a 304 renews it like any entry whose time ran out.
//
// A soft purge concerns the stored responses, whole (KindResponse) or
// partial (KindPartial), requested before at. Markers and hit-for-miss
// records are not content, and a response whose
// request left at or after at was fetched after the purge: it is what the
// purge asks for. concerned reports whether e is one the purge concerns
// (a purge counts those), changed whether e was fresh at at and has been
// changed (its encoding is as long as before: only a fixed-size field
// differs).
func (e *Entry) Expire(at time.Time) (concerned, changed bool) {
	if e.Kind != KindResponse && e.Kind != KindPartial || !e.RequestTime.Before(at) {
		return false, false
	}
	age := httpcache.AgeAt(e.InitialAge, e.ResponseTime, at)
	if e.Lifetime <= age {
		return true, false
	}
	e.Lifetime = age
	return true, true
}
