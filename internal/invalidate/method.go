package invalidate

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// MethodPurge is the request method of a purge on the serving port.
// Methods are case-sensitive (RFC 9110 §9.1): "purge" is not one.
const MethodPurge = "PURGE"

// SoftPurgeHeader on a PURGE asks for a soft purge ("1") or a hard one
// ("0", as without it).
const SoftPurgeHeader = "Tiercache-Soft-Purge"

// MethodHandler serves "PURGE <url>" on the serving port, where it is
// switched on by purge.httpMethod (the caller decides; this handler
// purges whenever it is called). It purges the URL the request names
// itself: its Host and its target, resolved as the proxy resolves them
// into a cache key (host normalized, path as received, query shaped by
// the path's rule; every variant, under both schemes), so a client can
// purge one URL of one host of this tier and nothing else.
//
// It is authorized as POST /purge is, with one difference: the purge
// token is always required. Clients of the serving port arrive through
// the pod's address, and under a service mesh from loopback, so the
// admin port's loopback rule would admit anyone. Then it is validated,
// rate-limited (o.Limit, the admin purges' bucket), counted (o.Count)
// and answered exactly as POST /purge.
func MethodHandler(p *Purger, cfg *tierconfig.Holder, o HandlerOptions) http.Handler {
	a := newApplier(p, o)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := cfg.Load().Config.Purge.Token
		if token == "" {
			a.count(ResultUnauthorized)
			writeError(w, http.StatusForbidden, "purge: PURGE on the serving port requires the tier's purge token (purge.token), and this sidecar has none")
			return
		}
		if status, msg := authorize(r, token); status != 0 {
			a.count(ResultUnauthorized)
			writeError(w, status, msg)
			return
		}
		req, msg := methodRequest(r)
		if msg != "" {
			a.count(ResultInvalid)
			writeError(w, http.StatusBadRequest, msg)
			return
		}
		a.apply(w, r, req)
	})
}

// methodRequest returns the purge a PURGE asks for, or why it is not one.
func methodRequest(r *http.Request) (Request, string) {
	var req Request
	switch v := r.Header.Values(SoftPurgeHeader); {
	case len(v) > 1:
		return req, fmt.Sprintf("purge: %s: give it once (got %d fields)", SoftPurgeHeader, len(v))
	case len(v) == 0 || v[0] == "0":
	case v[0] == "1":
		req.Soft = true
	default:
		return req, fmt.Sprintf("purge: %s: must be 1 (mark stale) or 0 (remove) (got %q)", SoftPurgeHeader, v[0])
	}
	if r.ContentLength != 0 || len(r.TransferEncoding) > 0 {
		return req, "purge: PURGE takes no body: it purges its own URL; purge by prefix, tag or everything with POST /purge on the admin port"
	}
	if r.Host == "" {
		return req, "purge: Host: required; PURGE purges the URL of its Host and target"
	}
	path := r.URL.EscapedPath()
	if !strings.HasPrefix(path, "/") {
		return req, fmt.Sprintf("purge: request target: must be a path, /path?query (got %q)", r.RequestURI)
	}
	// The scheme does not matter: a URL is purged under both. A Host
	// that a URL cannot carry as it is (userinfo, '/', '?') comes out
	// escaped, which checkURL refuses: the purger reads back the host
	// named or nothing.
	u := (&url.URL{Scheme: "http", Host: r.Host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}).String()
	if err := checkURL(u); err != nil {
		return req, "purge: Host and request target: " + err.Error()
	}
	req.URLs = []string{u}
	return req, ""
}
