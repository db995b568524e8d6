package httpcache

import (
	"net/http"
	"slices"
	"strings"
)

// VaryNames returns the lowercase field names the response's Vary lists,
// deduplicated and sorted, and star=true when it lists "*".
func VaryNames(h Header) (names []string, star bool) {
	for _, line := range values(h, "Vary") {
		for rest := line; rest != ""; {
			var e string
			e, rest = cutElem(rest)
			switch {
			case e == "":
			case e == "*":
				star = true
			default:
				e = strings.ToLower(e)
				if !slices.Contains(names, e) {
					names = append(names, e)
				}
			}
		}
	}
	slices.Sort(names)
	return names, star
}

// Bytes of the secondary key encoding. A field value is written with 0x00
// and 0x01 escaped (as 0x01 '0' and 0x01 '1'), so inside a value 0x01 is
// always followed by '0' or '1'; that leaves 0x00 free to end a value and
// the pair 0x01 0x00 free to mean "field absent".
const (
	varyEnd    = 0x00
	varyEscape = 0x01
)

// AppendVaryKey appends to dst the normalized values of the named request
// fields (RFC 9111 §4.1: field lines combined, whitespace around commas
// removed), separated so that different value sets never produce the same
// bytes, and returns the extended slice.
//
// Per name it writes: the name in lowercase, 0x00, then either the marker
// 0x01 (field absent) or the combined value (escaped, see varyEscape), then
// 0x00. Field lines are joined with ","; list elements are trimmed; empty
// elements are kept, so "a,,b" and "a,b" stay distinct. For an
// http.Header the lookup canonicalizes the name on the stack, so nothing
// is allocated beyond growing dst.
func AppendVaryKey(dst []byte, names []string, req Header) []byte {
	hh, isHTTP := req.(http.Header)
	for _, name := range names {
		for i := 0; i < len(name); i++ {
			dst = append(dst, lowerASCII(name[i]))
		}
		dst = append(dst, varyEnd)
		var vs []string
		if isHTTP {
			vs = lookupHTTP(hh, name)
		} else {
			vs = values(req, name)
		}
		if len(vs) == 0 {
			dst = append(dst, varyEscape, varyEnd)
			continue
		}
		for i, line := range vs {
			if i > 0 {
				dst = append(dst, ',')
			}
			for rest, firstElem := line, true; ; firstElem = false {
				e, r, more := strings.Cut(rest, ",")
				if !firstElem {
					dst = append(dst, ',')
				}
				dst = appendEscaped(dst, trimOWS(e))
				if !more {
					break
				}
				rest = r
			}
		}
		dst = append(dst, varyEnd)
	}
	return dst
}

func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case varyEnd, varyEscape:
			dst = append(dst, varyEscape, '0'+c)
		default:
			dst = append(dst, c)
		}
	}
	return dst
}

// lookupHTTP is h.Values(name) without the allocation that canonicalizing
// a lowercase name costs: the canonical form is built on the stack and the
// map index with string(bytes) does not copy. Names that
// CanonicalMIMEHeaderKey would leave alone (invalid bytes) or that are
// unusually long go through h.Values.
func lookupHTTP(h http.Header, name string) []string {
	var buf [64]byte
	if len(name) == 0 || len(name) > len(buf) {
		return h.Values(name)
	}
	upper := true
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !isTchar(c) {
			return h.Values(name)
		}
		if upper && 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		} else if !upper && 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf[i] = c
		upper = c == '-'
	}
	return h[string(buf[:len(name)])]
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
