package httpcache

import (
	"net/url"
)

// ContentLocationIsTarget reports whether the response's Content-Location
// names the request's target URI (absolute), after resolving a relative
// reference against it: the condition under which RFC 9110 §9.3.3 lets a
// cache reuse a POST response for a later GET of that URI (the content is
// then "a current representation of that resource", §8.7).
//
// Scheme and host compare case-insensitively with default ports folded
// (as for invalidation, §4.4 of RFC 9111); the path compares exactly as
// escaped and the query byte for byte, since the key holds both as
// received. A fragment is ignored. Several Content-Location lines, or one
// that does not parse, name nothing.
func ContentLocationIsTarget(target *url.URL, resp Header) bool {
	cl := values(resp, "Content-Location")
	if target == nil || !target.IsAbs() || len(cl) != 1 {
		return false
	}
	v := trimOWS(cl[0])
	if v == "" {
		return false
	}
	ref, err := url.Parse(v)
	if err != nil {
		return false
	}
	u := target.ResolveReference(ref)
	return sameOrigin(target, u) && u.EscapedPath() == target.EscapedPath() && u.RawQuery == target.RawQuery &&
		u.User == nil
}
