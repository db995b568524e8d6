package httpcache

import (
	"strconv"
	"time"
)

// Stored is what freshness evaluation needs of a stored entry.
type Stored struct {
	ResponseTime         time.Time
	InitialAge           time.Duration
	Lifetime             time.Duration
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	// StaleIfUnreachable is how long past its freshness the entry may
	// stand in for an origin that cannot be reached (RFC 9111 §4.2.4).
	StaleIfUnreachable time.Duration
	MustRevalidate     bool
	NoCache            bool
}

// Use is how a stored entry may answer a request.
type Use uint8

const (
	// UseFresh: serve it as is.
	UseFresh Use = iota
	// UseStaleRevalidate: stale but within stale-while-revalidate: serve
	// it and refresh it in the background.
	UseStaleRevalidate
	// UseStale: stale but the request's max-stale accepts it: serve it,
	// no refresh needed.
	UseStale
	// UseValidate: validate (conditional request) before use.
	UseValidate
)

// AgeValue returns the Age field's value (RFC 9111 §5.1): the first member
// of a list, ignored (0) when invalid, clamped to 2^31 seconds.
func AgeValue(h Header) time.Duration {
	vs := values(h, "Age")
	if len(vs) == 0 {
		return 0
	}
	e, _ := cutElem(vs[0])
	d, ok := parseDelta(e)
	if !ok {
		return 0
	}
	return d
}

// CurrentAge is current_age of RFC 9111 §4.2.3 at now (never negative).
// A now before ResponseTime (a clock that stepped back) adds no resident
// time; every term is clamped to 2^31 s so the sum cannot overflow.
func CurrentAge(s Stored, now time.Time) time.Duration {
	return AgeAt(s.InitialAge, s.ResponseTime, now)
}

// AgeAt is CurrentAge on plain values: the age at now of a response
// received at responseTime with corrected_initial_age initialAge. It is
// the project's one age computation: stores and the entry model (soft
// purges, expiry) use it too.
func AgeAt(initialAge time.Duration, responseTime, now time.Time) time.Duration {
	return clampDelta(initialAge) + clampDelta(now.Sub(responseTime))
}

// FreshUntil is the instant a response received at responseTime with
// freshness lifetime lifetime and corrected_initial_age initialAge stops
// being fresh: response_time + (lifetime - corrected_initial_age), the
// instant its AgeAt reaches lifetime.
func FreshUntil(responseTime time.Time, lifetime, initialAge time.Duration) time.Time {
	return responseTime.Add(lifetime - clampDelta(initialAge))
}

// Evaluate decides how s may answer a request with directives req at now,
// and returns the entry's current age. NoCache on either side means
// UseValidate. Request max-age, min-fresh and max-stale are honoured;
// MustRevalidate forbids every stale use.
//
// A fresh entry is one whose Lifetime exceeds its age (an entry exactly at
// its lifetime is stale by 0). When the request's max-age or min-fresh is
// what rules the entry out, nothing stale is served: the client asked for
// something fresher. stale-while-revalidate is used only when the request
// sets no freshness constraint of its own.
func Evaluate(s Stored, req RequestCC, now time.Time) (Use, time.Duration) {
	age := CurrentAge(s, now)
	if s.NoCache || req.NoCache {
		return UseValidate, age
	}
	lifetime := clampDelta(s.Lifetime)
	if req.MaxAge.Valid && age > req.MaxAge.Value {
		return UseValidate, age
	}
	if req.MinFresh.Valid && lifetime-age < req.MinFresh.Value {
		return UseValidate, age
	}
	if lifetime > age {
		return UseFresh, age
	}
	if s.MustRevalidate {
		return UseValidate, age
	}
	staleness := age - lifetime
	if req.MaxStaleAny || (req.MaxStale.Valid && staleness <= req.MaxStale.Value) {
		return UseStale, age
	}
	if swr := clampDelta(s.StaleWhileRevalidate); swr > 0 && staleness <= swr && !req.MaxAge.Valid && !req.MinFresh.Valid {
		return UseStaleRevalidate, age
	}
	return UseValidate, age
}

// StaleOnErrorOK reports whether a stale s may answer a request at now
// because the origin failed (RFC 5861 §4): within the entry's
// stale-if-error window, or the request's stale-if-error, and not
// MustRevalidate.
//
// The window is the larger of the two and must be > 0; an entry that is
// still fresh (the fetch was forced by the request) has staleness 0 and
// qualifies whenever some window exists. NoCache entries never qualify:
// RFC 9111 §4.2.4 forbids serving a no-cache response stale.
func StaleOnErrorOK(s Stored, req RequestCC, now time.Time) bool {
	if s.MustRevalidate || s.NoCache {
		return false
	}
	window := clampDelta(s.StaleIfError)
	if req.StaleIfError.Valid {
		window = max(window, clampDelta(req.StaleIfError.Value))
	}
	if window <= 0 {
		return false
	}
	staleness := max(0, CurrentAge(s, now)-clampDelta(s.Lifetime))
	return staleness <= window
}

// StaleIfUnreachableOK reports whether a stale s may answer a request at
// now because the origin could not be reached at all (the connection was
// refused, reset or closed before a response, or could not be made in
// time): RFC 9111 §4.2.4 lets a disconnected cache serve stale responses
// that no directive forbids, without the origin's stale-if-error.
//
// It needs the entry's StaleIfUnreachable window (the tier's setting; 0
// for must-revalidate, proxy-revalidate, s-maxage and no-cache responses,
// which forbid every stale use) to cover the staleness, and respects what
// the request itself asked for: no-cache (validate), max-age (no older
// than), min-fresh (fresh for at least) and a bounded max-stale (no staler
// than) each rule it out when the entry does not meet them. An entry still
// fresh (a fetch the request forced) qualifies when the request's own
// limits allow it.
func StaleIfUnreachableOK(s Stored, req RequestCC, now time.Time) bool {
	if s.MustRevalidate || s.NoCache || req.NoCache {
		return false
	}
	window := clampDelta(s.StaleIfUnreachable)
	if window <= 0 {
		return false
	}
	age := CurrentAge(s, now)
	lifetime := clampDelta(s.Lifetime)
	if req.MaxAge.Valid && age > req.MaxAge.Value {
		return false
	}
	if req.MinFresh.Valid && lifetime-age < req.MinFresh.Value {
		return false
	}
	staleness := max(0, age-lifetime)
	if req.MaxStale.Valid && staleness > req.MaxStale.Value {
		return false
	}
	return staleness <= window
}

// ForwardedAge returns the Age field value a cache sends with a response
// it has just fetched (a miss) whose current age is age, and whether to
// send it at all (RFC 9111 §4.2.3 and §5.1). The value is the age the
// stored entry has (corrected_initial_age plus the time since it
// arrived), so a miss and the hits after it count the same way. An Age
// the origin sent is always replaced by it (one valid value, never a list
// or garbage); without one, Age is sent only once the age reaches a whole
// second, since Age implies the response was not generated for this
// request.
func ForwardedAge(resp Header, age time.Duration) (string, bool) {
	secs := AgeSeconds(age)
	if secs == 0 && len(values(resp, "Age")) == 0 {
		return "", false
	}
	return strconv.FormatInt(secs, 10), true
}

// AgeHeader formats an age as the Age field value (whole seconds, rounded
// down; negative ages are 0 and ages past 2^31 s are 2147483648, as RFC
// 9111 §1.2.2 asks).
func AgeHeader(age time.Duration) string {
	return strconv.FormatInt(AgeSeconds(age), 10)
}

// AgeSeconds is the value of the Age header for age, as a number.
func AgeSeconds(age time.Duration) int64 {
	return int64(clampDelta(age) / time.Second)
}
