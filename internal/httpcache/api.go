// Package httpcache holds the rules of RFC 9111 (HTTP caching) for a shared
// cache, RFC 5861 (stale-while-revalidate, stale-if-error) and the RFC 9110
// conditional and range rules a cache needs. Everything here is a pure
// function of its arguments: no I/O, no clock (callers pass now), no
// package state. The proxy asks these functions; it never re-derives a
// caching rule itself.
package httpcache

import (
	"net/http"
	"net/url"
	"time"
)

// Header is what the rules read from a header: http.Header and
// *entry.Entry both satisfy it.
type Header interface {
	Values(name string) []string
}

// Delta is an optional delta-seconds value (RFC 9111 §1.2.2).
type Delta struct {
	Valid   bool          // present (with a usable or clamped value)
	Seconds time.Duration // the value as a duration; 0 when !Valid
}

// ResponseCC holds the response Cache-Control directives (RFC 9111 §5.2.2)
// and what the parser noticed about them.
type ResponseCC struct {
	Public, Private, NoCache, NoStore      bool
	MustRevalidate, ProxyRevalidate        bool
	NoTransform, Immutable, MustUnderstand bool
	PrivateFields, NoCacheFields           []string // canonical header names of private="a, b" / no-cache="a"
	MaxAge, SMaxAge                        Delta
	StaleWhileRevalidate, StaleIfError     Delta
	// Invalid is set when a freshness directive (max-age, s-maxage) had an
	// invalid value or conflicting duplicates; such a response is treated
	// as stale (RFC 9111 §4.2.1).
	Invalid bool
}

// RequestCC holds the request Cache-Control directives (RFC 9111 §5.2.1).
// Pragma: no-cache counts as no-cache only when there is no Cache-Control
// field at all (RFC 9111 §5.4).
type RequestCC struct {
	MaxAge, MinFresh, StaleIfError Delta
	MaxStale                       Delta // Valid with Seconds when a value was given
	MaxStaleAny                    bool  // max-stale without a value: any staleness
	NoCache, NoStore, OnlyIfCached bool
	NoTransform                    bool
}

// ParseResponseCC parses every Cache-Control field line of h. Unknown
// directives are ignored; malformed ones never panic. Delta-seconds larger
// than 2^31 are clamped to 2^31 seconds; negative or non-numeric values make
// the directive invalid (for max-age/s-maxage: Invalid=true and the value
// treated as 0).
func ParseResponseCC(h Header) ResponseCC { panic("not implemented") }

// ParseRequestCC parses the request's Cache-Control (and Pragma) fields.
func ParseRequestCC(h Header) RequestCC { panic("not implemented") }

// ParseHTTPDate parses an HTTP-date in any of the three formats RFC 9110
// §5.6.7 requires a recipient to accept. ok is false for anything else.
func ParseHTTPDate(s string) (t time.Time, ok bool) { panic("not implemented") }

// AgeValue returns the Age field's value (RFC 9111 §5.1): the first member
// of a list, ignored (0) when invalid, clamped to 2^31 seconds.
func AgeValue(h Header) time.Duration { panic("not implemented") }

// Policy is the part of the tier's configuration that changes caching
// decisions. The zero Policy is pure RFC 9111 behaviour.
type Policy struct {
	// AllowSetCookie lets responses carrying Set-Cookie be stored (the
	// Set-Cookie field itself is still never stored or replayed).
	AllowSetCookie bool
	// ForceTTL, when > 0, replaces the origin's freshness lifetime for
	// storable responses (like nginx proxy_cache_valid with ignored
	// headers). no-store and private still prevent storing.
	ForceTTL time.Duration
	// MaxTTL, when > 0, caps the freshness lifetime.
	MaxTTL time.Duration
	// FallbackTTL, when > 0, is the lifetime of a heuristically cacheable
	// response (RFC 9110 §15.1 list) that has no explicit freshness; it
	// takes precedence over the Last-Modified heuristic.
	FallbackTTL time.Duration
	// NegativeTTL, when > 0, is the lifetime of a 404 or 410 without
	// explicit freshness.
	NegativeTTL time.Duration
	// HeuristicFraction of (Date - Last-Modified) is the heuristic
	// lifetime, capped at HeuristicMax. 0 disables the heuristic.
	HeuristicFraction float64
	HeuristicMax      time.Duration
	// Default stale windows when the origin gives none.
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
}

// Exchange is one request/response pair seen by the cache.
type Exchange struct {
	Method       string
	ReqHeader    Header
	Status       int
	RespHeader   Header
	RequestTime  time.Time // when the request to the origin was sent
	ResponseTime time.Time // when the origin's response headers arrived
}

// Decision says whether and how a response may be stored (RFC 9111 §3 with
// the shared-cache rules) and with what freshness.
type Decision struct {
	Store bool
	// Reason is a short sentence saying why the response is not stored
	// (empty when Store), for logs and tests.
	Reason string
	// Lifetime is the freshness lifetime (§4.2.1) after Policy; InitialAge
	// is corrected_initial_age (§4.2.3).
	Lifetime   time.Duration
	InitialAge time.Duration
	// Stale windows in effect (origin's directive, else the Policy
	// default); both 0 when MustRevalidate.
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	// MustRevalidate: must-revalidate, proxy-revalidate or s-maxage.
	MustRevalidate bool
	// NoCache: unqualified no-cache: store, but revalidate on every use.
	NoCache bool
	// Strip lists canonical header names the stored copy must not keep
	// (private="f", no-cache="f", and Set-Cookie when allowed to store).
	Strip []string
}

// Decide applies RFC 9111 §3 for a shared cache. Only GET responses are
// stored. Rules, in order: no-store (request or response) and private
// (unqualified) prevent storing; a request with Authorization is stored
// only with public, s-maxage or must-revalidate (§3.5); Set-Cookie prevents
// storing unless Policy.AllowSetCookie (or no-cache/private names it);
// Vary: * is not stored; the status must be final and understood; the
// response needs explicit freshness (s-maxage > max-age > Expires - Date),
// or a heuristically cacheable status with a Policy fallback/negative TTL
// or a Last-Modified heuristic, or no-cache/validators so that it can be
// revalidated. Responses with neither freshness nor validators are not
// stored. An invalid Expires means already expired.
func Decide(x Exchange, p Policy) Decision { panic("not implemented") }

// Stored is what freshness evaluation needs of a stored entry.
type Stored struct {
	ResponseTime         time.Time
	InitialAge           time.Duration
	Lifetime             time.Duration
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	MustRevalidate       bool
	NoCache              bool
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

// CurrentAge is current_age of RFC 9111 §4.2.3 at now (never negative).
func CurrentAge(s Stored, now time.Time) time.Duration { panic("not implemented") }

// Evaluate decides how s may answer a request with directives req at now,
// and returns the entry's current age. NoCache on either side means
// UseValidate. Request max-age, min-fresh and max-stale are honoured;
// MustRevalidate forbids every stale use.
func Evaluate(s Stored, req RequestCC, now time.Time) (Use, time.Duration) {
	panic("not implemented")
}

// StaleOnErrorOK reports whether a stale s may answer a request at now
// because the origin failed (RFC 5861 §4): within the entry's
// stale-if-error window, or the request's stale-if-error, and not
// MustRevalidate.
func StaleOnErrorOK(s Stored, req RequestCC, now time.Time) bool { panic("not implemented") }

// AgeHeader formats an age as the Age field value (whole seconds).
func AgeHeader(age time.Duration) string { panic("not implemented") }

// VaryNames returns the lowercase field names the response's Vary lists,
// deduplicated and sorted, and star=true when it lists "*".
func VaryNames(h Header) (names []string, star bool) { panic("not implemented") }

// AppendVaryKey appends to dst the normalized values of the named request
// fields (RFC 9111 §4.1: field lines combined, whitespace around commas
// removed), separated so that different value sets never produce the same
// bytes, and returns the extended slice.
func AppendVaryKey(dst []byte, names []string, req Header) []byte { panic("not implemented") }

// NotModified reports whether a client's conditional GET/HEAD is answered
// with 304 by a stored response with header stored (RFC 9110 §13.2.2):
// If-None-Match (weak comparison, "*" matches) takes precedence; otherwise
// If-Modified-Since against the stored Last-Modified (else Date), only when
// the stored status is 200.
func NotModified(req Header, storedStatus int, stored Header) bool { panic("not implemented") }

// ValidatorsFrom returns the conditional request headers (If-None-Match
// from ETag, If-Modified-Since from Last-Modified) to revalidate a stored
// response; empty when it has no validators.
func ValidatorsFrom(stored Header) http.Header { panic("not implemented") }

// MergeNotModified returns the header of the stored response updated with
// the fields of a 304 (RFC 9111 §3.2 and §4.3.4): every field in the 304
// replaces the stored field of the same name, except Content-Length,
// Content-Encoding, Transfer-Encoding, Content-Range and hop-by-hop fields.
func MergeNotModified(stored, notModified http.Header) http.Header { panic("not implemented") }

// RemoveHopByHop deletes the hop-by-hop fields (RFC 9110 §7.6.1): those
// named by Connection, plus Connection, Keep-Alive, Proxy-Connection, TE,
// Transfer-Encoding, Upgrade, Trailer, Proxy-Authenticate and
// Proxy-Authorization.
func RemoveHopByHop(h http.Header) { panic("not implemented") }

// InvalidationTargets lists the URIs a response to an unsafe method
// invalidates (RFC 9111 §4.4): for a non-error status (2xx or 3xx) to a
// method other than GET, HEAD, OPTIONS and TRACE, the target URI plus the
// Location and Content-Location URIs when they have the same scheme and
// host as the target. target is absolute.
func InvalidationTargets(method string, status int, target *url.URL, resp Header) []*url.URL {
	panic("not implemented")
}

// ByteRange is one satisfiable range [Start, End] (inclusive).
type ByteRange struct{ Start, End int64 }

// RangeResult is how a cache answers a Range request from a full stored
// representation.
type RangeResult uint8

const (
	RangeIgnore        RangeResult = iota // serve the full 200 (no Range, multi-range, If-Range mismatch, malformed)
	RangeSatisfiable                      // serve 206 with the one range
	RangeUnsatisfiable                    // serve 416 with Content-Range: bytes */size
)

// EvalRange applies RFC 9110 §14 to a GET with req's Range and If-Range
// against a stored 200 of size bytes with header stored. Only a single
// range is served; anything else is RangeIgnore. If-Range must match
// strongly (ETag) or exactly (Last-Modified date).
func EvalRange(req Header, stored Header, size int64) (ByteRange, RangeResult) {
	panic("not implemented")
}

// Tags returns the purge tags of a response: Surrogate-Key (space
// separated) and Cache-Tag (comma separated), trimmed and deduplicated.
func Tags(h Header) []string { panic("not implemented") }

// HeuristicallyCacheable reports whether status is cacheable by default
// (RFC 9110 §15.1): 200, 203, 204, 206, 300, 301, 308, 404, 405, 410,
// 414, 501.
func HeuristicallyCacheable(status int) bool { panic("not implemented") }
