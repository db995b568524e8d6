package cachekey

import (
	"net/http"
	"unsafe"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// Builder builds a request's keys in a reused buffer, so that the hit
// path does not allocate for them: first the primary key and the extra
// key parts (Build), then, when the primary key holds a Vary marker, the
// variant key (Variant). The strings it returns point into its buffer:
// valid until the next Build or Variant; copy them to keep them.
type Builder struct {
	b      []byte
	extras []byte // the shape's request header and cookie key parts
	// ambiguous: a keyed cookie is named so that origins may read another
	// value than the key holds; the request bypasses the cache.
	ambiguous bool

	vary                   httpcache.VaryOptions
	scheme, host           string
	targetStart, targetEnd int // b[targetStart:targetEnd] is path?query as keyed
	primaryLen             int // b[:primaryLen] is the primary key
}

// Build writes the primary key of r under the shape s into kb, and the
// extra key parts of s (request headers, cookies), which select a variant
// behind the primary key's marker, into kb's extras. vary is how the
// request's values of a marker's Vary fields are normalized (Variant).
func (kb *Builder) Build(r *http.Request, s *Shape, vary httpcache.VaryOptions) {
	kb.scheme = RequestScheme(r)
	kb.host = Host(r.Host, kb.scheme)
	b := AppendPrimary(kb.b[:0], kb.scheme, kb.host, "")
	kb.targetStart = len(b)
	b = AppendTarget(b, s, r.URL.EscapedPath(), r.URL.RawQuery)
	kb.targetEnd = len(b)
	kb.vary = vary
	kb.extras = kb.extras[:0]
	kb.ambiguous = false
	if s.HasExtras() {
		kb.extras = s.AppendExtras(kb.extras, r)
		kb.ambiguous = s.AmbiguousCookies(r)
	}
	kb.primaryLen = len(b)
	kb.b = b
}

// RequestScheme is the scheme r is keyed under (Scheme): its
// X-Forwarded-Proto (read without canonicalizing the name: the server
// stores it canonical) or its TLS.
func RequestScheme(r *http.Request) string {
	proto := ""
	if v := r.Header["X-Forwarded-Proto"]; len(v) > 0 {
		proto = v[0]
	}
	return Scheme(proto, r.TLS != nil)
}

// Ambiguous reports that a keyed cookie of the request is named so that
// origins may read another value than the key holds (Shape.AmbiguousCookies):
// the request must bypass the cache.
func (kb *Builder) Ambiguous() bool { return kb.ambiguous }

// Scheme is the scheme the request is keyed under.
func (kb *Builder) Scheme() string { return kb.scheme }

// Host is the normalized host the request is keyed under.
func (kb *Builder) Host() string { return kb.host }

// HasExtras reports whether request headers or cookies joined the key.
func (kb *Builder) HasExtras() bool { return len(kb.extras) > 0 }

// Extras returns a copy of the extra key parts ("" when none).
func (kb *Builder) Extras() string { return string(kb.extras) }

// Primary returns the primary key without copying.
func (kb *Builder) Primary() string { return unsafeString(kb.b[:kb.primaryLen]) }

// Variant appends the variant part for a Vary marker (its nonce and the
// names of its Vary fields) as AppendVariantKey builds it: the extra key
// parts, then the request's values of the Vary fields, normalized. It
// returns the variant key without copying.
func (kb *Builder) Variant(nonce uint64, varyNames []string, req http.Header) string {
	kb.b = AppendVariantKey(kb.b[:kb.primaryLen], nonce, unsafeString(kb.extras), varyNames, req, kb.vary)
	return unsafeString(kb.b)
}

// Key returns the key built last: the variant key after Variant, else the
// primary key (without copying).
func (kb *Builder) Key() string { return unsafeString(kb.b) }

// Target returns a copy of path?query as keyed.
func (kb *Builder) Target() string { return string(kb.b[kb.targetStart:kb.targetEnd]) }

func unsafeString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
