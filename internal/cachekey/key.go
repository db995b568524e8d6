// Package cachekey owns the cache key, so that the proxy (which stores
// under it), the purger (which deletes by it) and kubectl-tiercache explain
// (which shows it) can never disagree: its textual form (this file), how a
// rule shapes it (Shape: the query parameters kept and their order, the
// request headers and cookies that join it) and how a request's keys are
// built (Builder), which calls httpcache for the normalization of Vary
// values. Keys are opaque to the stores: L1 uses them as they are (or a
// digest when long), L2 hashes them into its Redis key names.
//
// Primary key:  "GET " scheme "://" host target
// Variant key:  primary 0x00 'v' nonce(16 hex) 0x00 [extras] vary-values
//
// Under the primary key is either a response or a marker (entry.KindVary)
// whose nonce names the current set of variants: responses that vary (by
// their Vary header) and every response under a rule that adds request
// headers or cookies to the key (the extras) are stored under variant
// keys. Deleting the primary key (a purge, an unsafe request) thus retires
// every variant of a URL without a scan, in L1 and L2 alike.
//
// The method class is always GET: HEAD is answered from GET entries and
// nothing else is stored.
package cachekey

import (
	"strings"

	"github.com/tiercache/tiercache/internal/httpcache"
)

const variantTag = "\x00v"

// AppendPrimary appends the primary key for scheme, host and target
// (path?query, already shaped by the tier's rules) plus the rule's extra key
// parts, which the caller appends after this returns.
func AppendPrimary(dst []byte, scheme, host, target string) []byte {
	dst = append(dst, "GET "...)
	dst = append(dst, scheme...)
	dst = append(dst, "://"...)
	dst = append(dst, host...)
	dst = append(dst, target...)
	return dst
}

// AppendVariant appends to dst (which holds the primary key) the variant
// part for a Vary marker's nonce. The caller then appends the request's
// normalized values of the marker's selecting headers.
func AppendVariant(dst []byte, nonce uint64) []byte {
	dst = append(dst, variantTag...)
	const hexdigits = "0123456789abcdef"
	for shift := 60; shift >= 0; shift -= 4 {
		dst = append(dst, hexdigits[(nonce>>uint(shift))&0xf])
	}
	return append(dst, 0)
}

// AppendVariantKey appends to dst, which holds a primary key, the rest of
// the key of a response stored behind a Vary marker: the marker's nonce
// (AppendVariant), the rule's extra key parts, then the request's values
// of the marker's Vary fields names as h shows them, normalized as o says
// (httpcache.AppendVaryKey). It is the one place a variant key is made:
// a lookup (Builder.Variant) and a fill that stores behind a marker build
// it alike, so that what is stored is what is looked up.
func AppendVariantKey(dst []byte, nonce uint64, extras string, names []string, h httpcache.Header, o httpcache.VaryOptions) []byte {
	dst = AppendVariant(dst, nonce)
	dst = append(dst, extras...)
	return httpcache.AppendVaryKey(dst, names, h, o)
}

// Primary returns the primary key of key: key itself when it is a
// primary key, else the part of a variant key before its variant tag.
// (Neither a normalized host nor an escaped target holds a NUL, so the
// first variant tag is the variant's.)
func Primary(key string) string {
	if i := strings.Index(key, variantTag); i >= 0 {
		return key[:i]
	}
	return key
}

// Scheme returns the scheme a request is keyed under: the client-facing
// scheme as told by X-Forwarded-Proto when it is exactly http or https
// (an ingress in front of the pod sets it), else https for TLS, else http.
// Because the scheme is part of the key, a forged X-Forwarded-Proto can
// only ever select its own cache entries, never poison another's.
func Scheme(forwardedProto string, tls bool) string {
	switch {
	case strings.EqualFold(forwardedProto, "https"):
		return "https"
	case strings.EqualFold(forwardedProto, "http"):
		return "http"
	case tls:
		return "https"
	}
	return "http"
}

// Host normalizes a Host header value: lowercase, without the scheme's
// default port and without the trailing dot of a fully qualified name
// ("Example.COM.:80" is "example.com"). The proxy keys on it and sends it
// to the origin (as Host and X-Forwarded-Host), so the key and what the
// origin routes on are the same value. It allocates only when it has to
// change s.
func Host(s, scheme string) string {
	if scheme == "http" && strings.HasSuffix(s, ":80") {
		s = s[:len(s)-3]
	} else if scheme == "https" && strings.HasSuffix(s, ":443") {
		s = s[:len(s)-4]
	}
	// A trailing dot ends the name: before the port's digits and ':', or
	// at the end. Found by one backward scan over the port (an IPv6
	// literal ends in ']' before its port and never matches).
	i := len(s)
	for i > 0 && '0' <= s[i-1] && s[i-1] <= '9' {
		i--
	}
	if i > 0 && s[i-1] == ':' {
		if i > 2 && s[i-2] == '.' {
			s = s[:i-2] + s[i-1:]
		}
	} else if n := len(s); n > 1 && s[n-1] == '.' {
		s = s[:n-1]
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(s)
		}
	}
	return s
}
