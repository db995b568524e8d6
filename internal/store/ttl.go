package store

import (
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// usefulUntil is the last instant at which a stored entry can still be of
// any use: its StaleDeadline (freshness plus the longest stale window,
// stale-if-unreachable included, so a response can stand in for an
// unreachable origin as long as the tier allows and no longer),
// and for a response with a validator (ETag or Last-Modified) grace more,
// during which it can still be revalidated with a conditional request
// instead of fetched whole. Vary markers and hit-for-miss records use
// their own times and never get grace.
func usefulUntil(e *entry.Entry, grace time.Duration) time.Time {
	d := e.StaleDeadline()
	if e.Kind == entry.KindResponse && hasValidator(e) {
		d = d.Add(grace)
	}
	return d
}

// l2TTL is how long L2 keeps e written at now; ≤ 0 means not worth
// writing.
func l2TTL(e *entry.Entry, now time.Time, grace time.Duration) time.Duration {
	return usefulUntil(e, grace).Sub(now)
}

// hasValidator reports whether e carries an ETag or Last-Modified field.
// Stored field names are canonical, so it compares them directly rather
// than through Entry.Get, which would canonicalize "ETag" on every call.
func hasValidator(e *entry.Entry) bool {
	for i := range e.Header {
		switch e.Header[i].Name {
		case "Etag", "Last-Modified":
			if e.Header[i].Value != "" {
				return true
			}
		}
	}
	return false
}
