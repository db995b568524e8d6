package httpcache

import (
	"net/http"
	"net/url"
	"strings"
)

// InvalidationTargets lists the URIs a response to an unsafe method
// invalidates (RFC 9111 §4.4): for a non-error status (2xx or 3xx) to a
// method other than GET, HEAD, OPTIONS and TRACE, the target URI plus the
// Location and Content-Location URIs when they have the same scheme and
// host as the target. target is absolute.
//
// Location and Content-Location may be relative references; they are
// resolved against target. Hosts compare case-insensitively and a default
// port (80 for http, 443 for https) equals no port. Fragments are dropped
// and duplicates removed; the returned URLs are new values (target is
// never aliased). Method names are case-sensitive (RFC 9110 §9.1), so
// "get" counts as an unknown, unsafe method.
func InvalidationTargets(method string, status int, target *url.URL, resp Header) []*url.URL {
	if target == nil || status < 200 || status > 399 {
		return nil
	}
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return nil
	}
	out := []*url.URL{withoutFragment(target)}
	if !target.IsAbs() || target.Host == "" {
		return out
	}
	for _, name := range [...]string{"Location", "Content-Location"} {
		v := first(resp, name)
		if v == "" {
			continue
		}
		ref, err := url.Parse(v)
		if err != nil {
			continue
		}
		u := withoutFragment(target.ResolveReference(ref))
		if !sameOrigin(target, u) || containsURL(out, u) {
			continue
		}
		out = append(out, u)
	}
	return out
}

func withoutFragment(u *url.URL) *url.URL {
	c := *u // Userinfo is immutable, so sharing it is fine
	c.Fragment, c.RawFragment = "", ""
	return &c
}

func containsURL(list []*url.URL, u *url.URL) bool {
	s := u.String()
	for _, v := range list {
		if v.String() == s {
			return true
		}
	}
	return false
}

// sameOrigin compares scheme and host (with the scheme's default port
// filled in), case-insensitively.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) &&
		strings.EqualFold(a.Hostname(), b.Hostname()) &&
		effectivePort(a) == effectivePort(b)
}

func effectivePort(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	switch strings.ToLower(u.Scheme) {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}
