package httpcache

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
)

// entityTag is a parsed entity-tag (RFC 9110 §8.8.3).
type entityTag struct {
	opaque string // between the quotes
	weak   bool
}

// cutETag parses the entity-tag at the start of s (after optional
// whitespace) and returns the rest. Unquoted tags are not entity-tags.
func cutETag(s string) (t entityTag, rest string, ok bool) {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	if strings.HasPrefix(s, "W/") {
		t.weak = true
		s = s[2:]
	}
	if len(s) < 2 || s[0] != '"' {
		return entityTag{}, s, false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return entityTag{}, s, false
	}
	t.opaque = s[1 : 1+end]
	return t, s[2+end:], true
}

// parseETag parses a whole field value holding exactly one entity-tag.
func parseETag(s string) (entityTag, bool) {
	t, rest, ok := cutETag(s)
	if !ok || trimOWS(rest) != "" {
		return entityTag{}, false
	}
	return t, true
}

// NotModified reports whether a client's conditional GET/HEAD is answered
// with 304 by a stored response with header stored (RFC 9110 §13.2.2):
// If-None-Match (weak comparison, "*" matches) takes precedence; otherwise
// If-Modified-Since, only when the stored status is 200, against the
// stored response's modification date as RFC 9111 §4.3.2 defines it: its
// Last-Modified, else its Date (a response stored without Date is given
// the time it was received, AddDate). 304 when that date is earlier than
// or equal to the client's.
//
// Details: only a stored 2xx answers a conditional at all. An
// If-None-Match that is present but malformed still takes precedence (and
// matches nothing); a stored ETag that is not a quoted entity-tag matches
// nothing but "*". If-Modified-Since is ignored when it is not exactly one
// valid HTTP-date (RFC 9110 §13.1.3), and a stored response with neither a
// valid Last-Modified nor a valid Date has no modification date to
// compare: it answers 200. A client date later than the stored Date is
// compared like any other (RFC 9111 §4.3.2 has no exception for it; the
// 304 only tells that client its own copy will do).
func NotModified(req Header, storedStatus int, stored Header) bool {
	if storedStatus < 200 || storedStatus > 299 {
		return false
	}
	if inm := values(req, "If-None-Match"); len(inm) > 0 {
		have, haveOK := parseETag(first(stored, "ETag"))
		for _, line := range inm {
			for rest := line; ; {
				for len(rest) > 0 && (rest[0] == ',' || isOWS(rest[0])) {
					rest = rest[1:]
				}
				if rest == "" {
					break
				}
				if rest[0] == '*' {
					return true
				}
				t, r, ok := cutETag(rest)
				if !ok {
					break
				}
				if haveOK && t.opaque == have.opaque {
					return true
				}
				rest = r
			}
		}
		return false
	}
	ims := values(req, "If-Modified-Since")
	if storedStatus != http.StatusOK || len(ims) != 1 {
		return false
	}
	since, ok := ParseHTTPDate(ims[0])
	if !ok {
		return false
	}
	modified, ok := ParseHTTPDate(first(stored, "Last-Modified"))
	if !ok {
		if modified, ok = ParseHTTPDate(first(stored, "Date")); !ok {
			return false
		}
	}
	return !modified.After(since)
}

// ValidatorsFrom returns the conditional request headers (If-None-Match
// from ETag, If-Modified-Since from Last-Modified) to revalidate a stored
// response; empty when it has no validators. A Last-Modified that is not
// an HTTP-date is not sent: the origin would have to ignore it.
func ValidatorsFrom(stored Header) http.Header {
	h := http.Header{}
	if etag := first(stored, "ETag"); etag != "" {
		h["If-None-Match"] = []string{etag}
	}
	if lm := first(stored, "Last-Modified"); lm != "" {
		if _, ok := ParseHTTPDate(lm); ok {
			h["If-Modified-Since"] = []string{lm}
		}
	}
	return h
}

// MergeNotModified returns the header of the stored response updated with
// the fields of a 304 (RFC 9111 §3.2 and §4.3.4): every field in the 304
// replaces the stored field of the same name, except Content-Length,
// Content-Encoding, Transfer-Encoding, Content-Range and hop-by-hop fields.
//
// The fields the 304's Connection names are hop-by-hop too and are kept
// out. Fields a shared cache must not store (Set-Cookie, private="f",
// no-cache="f") are merged like any other: the caller runs Decide on the
// merged header and removes Decision.Strip, as for a fresh response.
// Neither input is modified.
func MergeNotModified(stored, notModified http.Header) http.Header {
	out := stored.Clone()
	if out == nil {
		out = make(http.Header, len(notModified))
	}
	connection := notModified.Values("Connection")
	for name, vs := range notModified {
		if len(vs) == 0 {
			continue
		}
		canon := textproto.CanonicalMIMEHeaderKey(name)
		if keptOnMerge(canon) || namedByConnection(connection, canon) {
			continue
		}
		delete(out, name)
		out[canon] = slices.Clone(vs)
	}
	return out
}

// keptOnMerge reports whether a 304's field of this canonical name must
// not replace the stored one.
func keptOnMerge(canon string) bool {
	switch canon {
	case "Content-Length", "Content-Encoding", "Transfer-Encoding", "Content-Range":
		return true
	}
	return isHopByHop(canon)
}

// namedByConnection reports whether a Connection field lists canon.
func namedByConnection(connection []string, canon string) bool {
	for _, line := range connection {
		for rest := line; rest != ""; {
			var e string
			e, rest = cutElem(rest)
			if strings.EqualFold(e, canon) {
				return true
			}
		}
	}
	return false
}
