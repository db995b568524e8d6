package httpcache

import "net/http"

// The rules of a miss: which requests go to the origin as they are, what
// an uncacheable answer does to what is stored, and which fields a stored
// or a 304 response leaves out. The proxy applies them; it does not
// re-derive them.

// HasOriginPrecondition reports request preconditions a cache does not
// evaluate itself (RFC 9110 §13.2.1: If-Match and If-Unmodified-Since are
// about the origin's current state): such requests go to the origin as
// they are. It reads h's canonical keys directly and does not allocate.
func HasOriginPrecondition(h http.Header) bool {
	return len(h["If-Match"]) > 0 || len(h["If-Unmodified-Since"]) > 0
}

// MissRoute is how a request that no stored response answers goes to the
// origin.
type MissRoute uint8

const (
	// MissFill fetches the representation; its answer may be stored.
	MissFill MissRoute = iota
	// MissHeadUpdate forwards a HEAD whose answer may update the stored
	// GET response (RFC 9111 §4.3.5).
	MissHeadUpdate
	// MissRange forwards the client's single byte range; a 206 answer may
	// be stored as a part (RFC 9111 §3.3).
	MissRange
	// MissPass forwards the request as it is; its answer is never stored.
	MissPass
)

// RouteMiss decides how a GET or HEAD that no stored response answers
// goes to the origin. haveStored says a complete stored response exists
// (stale, or refused by the request's directives); updateFromHead is the
// tier's choice to let a HEAD's answer update it.
//
//   - A HEAD is never stored as a GET response: it is passed, unless it
//     may update the stored one (the tier allows it, no Range, and no
//     request no-store or credentials: their answer may be the client's
//     own).
//   - A Range request is passed when a stored response must be
//     revalidated for it (the full validation is a GET's), and when it
//     asks for anything but one byte range in one field line, with at
//     most one If-Range: only such a 206 is stored.
//   - Everything else is a fill.
func RouteMiss(method string, req Header, rcc RequestCC, haveStored, updateFromHead bool) MissRoute {
	ranged := len(values(req, "Range")) > 0
	if method == http.MethodHead {
		if haveStored && updateFromHead && !ranged && !rcc.NoStore && !Credentialed(req) {
			return MissHeadUpdate
		}
		return MissPass
	}
	if !ranged {
		return MissFill
	}
	if haveStored || len(values(req, "If-Range")) > 1 {
		return MissPass
	}
	if _, ok := SingleRange(req); !ok {
		return MissPass
	}
	return MissRange
}

// UncacheableEffect is what an origin's answer that cannot be stored does
// to what the cache holds for its key.
type UncacheableEffect uint8

const (
	// UncacheableLeaves leaves what is stored and records nothing.
	UncacheableLeaves UncacheableEffect = iota
	// UncacheableRemoves removes the stored variant (behind a Vary
	// marker, which stays: the other variants are still good).
	UncacheableRemoves
	// UncacheableMarks replaces what the key holds with a hit-for-miss
	// marker, so that later requests for it are not queued behind one
	// another's fills for a while (Varnish's hit-for-miss).
	UncacheableMarks
)

// OnUncacheable decides what an answer that cannot be stored, of the
// given status, does to the key it answered. haveStored says a stored
// response was there (the one the request revalidated or missed);
// behindVary says the key is a variant behind a Vary marker.
//
//   - An error (5xx) and the request's own no-store say nothing about
//     the response other clients get: they leave everything.
//   - An answer to a request with credentials (Authorization, Cookie) may
//     be personal: it never removes what is stored (else one client could
//     empty a hot entry at will: a Cookie that makes the origin answer
//     private, with no-cache to force the fetch). Where nothing is
//     stored, it leaves a marker like any other, so that concurrent
//     personal requests are not queued behind one another.
//   - Behind a Vary marker, the stored variant goes and no marker is set
//     (a marker would hide the other variants).
//   - Otherwise a hit-for-miss marker replaces what the key held.
func OnUncacheable(status int, req Header, rcc RequestCC, haveStored, behindVary bool) UncacheableEffect {
	switch {
	case status >= 500 || rcc.NoStore:
		return UncacheableLeaves
	case haveStored && Credentialed(req):
		return UncacheableLeaves
	case behindVary && haveStored:
		return UncacheableRemoves
	case behindVary:
		return UncacheableLeaves
	}
	return UncacheableMarks
}

// notModifiedOmits are the fields a 304 leaves out of the stored header
// it is sent with: the representation's framing and media type (RFC 9110
// §15.4.5: a 304 describes the selected representation through its
// validators and cache fields, not through its content's metadata).
var notModifiedOmits = [...]string{"Content-Length", "Content-Type", "Content-Range", "Transfer-Encoding"}

// OmitForNotModified removes from h, the header a stored or forwarded
// response is being answered with, the fields a 304 does not carry.
func OmitForNotModified(h http.Header) {
	for _, k := range notModifiedOmits {
		delete(h, k)
	}
}

// StoredHeader returns the header a response is stored with: a copy of
// src without its hop-by-hop fields (RFC 9111 §3.1), without the fields
// the storing decision strips (strip: Set-Cookie, private="f",
// no-cache="f"), without Age and Content-Length, which the cache computes
// again for every response it serves (RFC 9111 §4.2.3, RFC 9112 §6.3), and
// without own, the fields the cache itself writes on its responses (its
// X-Cache and debug fields, which an origin must not be able to plant in
// what others receive). src is not modified.
func StoredHeader(src http.Header, strip, own []string) http.Header {
	h := src.Clone()
	if h == nil {
		h = make(http.Header)
	}
	RemoveHopByHop(h)
	for _, k := range strip {
		delete(h, k)
	}
	delete(h, "Age")
	delete(h, "Content-Length")
	for _, k := range own {
		delete(h, k)
	}
	return h
}
