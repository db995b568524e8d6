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
// always followed by '0' or '1'; that leaves 0x00 free to end a value, the
// pair 0x01 0x00 free to mean "field absent", and the pair 0x01 '2' free to
// start a value written in a normalized form (VaryOptions), which
// therefore never equals a value written as received.
const (
	varyEnd        = 0x00
	varyEscape     = 0x01
	varyNormalized = '2'
)

// VaryOptions choose normalizations of selecting header values beyond
// those of RFC 9111 §4.1 (field lines combined, whitespace around commas
// removed), which AppendVaryKey always applies. The zero value adds none.
type VaryOptions struct {
	// NormalizeAcceptLanguage compares Accept-Language values by meaning
	// (RFC 9110 §12.5.4): language ranges case-insensitively (RFC 4647
	// §2), in any order, and their weights by value ("q=0.50" is "q=0.5",
	// "q=1" or "q=1.000" is no weight); a range keeps its weight, so
	// "en, de;q=0.5" and "de, en;q=0.5" stay different, and so do "en" and
	// "en;q=0". Repeated identical ranges count once. A value that is not a
	// valid Accept-Language list, or that holds more than maxLangRanges
	// ranges, is keyed as received and never shares a variant with a
	// normalized one.
	NormalizeAcceptLanguage bool
}

// AppendVaryKey appends to dst the normalized values of the named request
// fields (RFC 9111 §4.1: field lines combined, whitespace around commas
// removed, plus what o asks for), separated so that different value sets
// never produce the same bytes, and returns the extended slice.
//
// Per name it writes: the name in lowercase, 0x00, then either the marker
// 0x01 (field absent) or the combined value (escaped, see varyEscape), then
// 0x00. Field lines are joined with ",", so a value split over several
// lines ("Foo: 1" and "Foo: 2") and the same value on one line ("Foo: 1,
// 2") give the same bytes; list elements are trimmed; empty elements are
// kept, so "a,,b" and "a,b" stay distinct. For an http.Header the lookup
// canonicalizes the name on the stack, and an Accept-Language that o
// normalizes is sorted on the stack, so nothing is allocated beyond
// growing dst.
func AppendVaryKey(dst []byte, names []string, req Header, o VaryOptions) []byte {
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
		if o.NormalizeAcceptLanguage && strings.EqualFold(name, "accept-language") {
			if out, ok := appendLanguages(dst, vs); ok {
				dst = append(out, varyEnd)
				continue
			}
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

// maxLangRanges bounds the language ranges an Accept-Language value may
// hold to be normalized (they are sorted in a fixed array on the stack).
// Browsers send a handful; a longer value is keyed as received.
const maxLangRanges = 32

// langRange is one element of Accept-Language: a language range as
// received (compared and written in lowercase) and its weight in
// thousandths.
type langRange struct {
	tag string
	q   uint16
}

// appendLanguages appends the normalized form of the Accept-Language
// field lines (VaryOptions.NormalizeAcceptLanguage): 0x01 '2', then the
// ranges sorted by weight (highest first) and then by name, each in
// lowercase with ";q=0.xyz" when its weight is below 1, joined with ",".
// ok is false, and dst unchanged, when the value cannot be normalized.
func appendLanguages(dst []byte, lines []string) (out []byte, ok bool) {
	var buf [maxLangRanges]langRange
	n := 0
	for _, line := range lines {
		for rest := line; rest != ""; {
			var e string
			e, rest = cutElem(rest)
			if e == "" {
				continue // empty list elements carry nothing (RFC 9110 §5.6.1)
			}
			if n == len(buf) {
				return dst, false
			}
			r, ok := parseLangRange(e)
			if !ok {
				return dst, false
			}
			buf[n] = r
			n++
		}
	}
	for i := 1; i < n; i++ {
		for j := i; j > 0 && langBefore(buf[j], buf[j-1]); j-- {
			buf[j], buf[j-1] = buf[j-1], buf[j]
		}
	}
	dst = append(dst, varyEscape, varyNormalized)
	for i := range n {
		r := buf[i]
		if i > 0 {
			if p := buf[i-1]; p.q == r.q && strings.EqualFold(p.tag, r.tag) {
				continue
			}
			dst = append(dst, ',')
		}
		for k := 0; k < len(r.tag); k++ {
			dst = append(dst, lowerASCII(r.tag[k]))
		}
		dst = appendWeight(dst, r.q)
	}
	return dst, true
}

// parseLangRange parses one trimmed, non-empty Accept-Language element:
// language-range [ OWS ";" OWS "q=" qvalue ] (RFC 9110 §12.4.2, §12.5.4),
// the range basic (RFC 4647 §2.1): "*" or 1*8ALPHA *("-" 1*8alphanum).
// "Q=" is accepted like "q=" (the parameter name is case-insensitive).
func parseLangRange(e string) (langRange, bool) {
	tag, param, hasParam := strings.Cut(e, ";")
	r := langRange{tag: trimOWS(tag), q: 1000}
	if !basicRange(r.tag) {
		return langRange{}, false
	}
	if hasParam {
		p := trimOWS(param)
		if len(p) < 2 || (p[0] != 'q' && p[0] != 'Q') || p[1] != '=' {
			return langRange{}, false
		}
		q, ok := parseQValue(p[2:])
		if !ok {
			return langRange{}, false
		}
		r.q = q
	}
	return r, true
}

// basicRange reports whether s is a basic language range (RFC 4647 §2.1).
func basicRange(s string) bool {
	if s == "*" {
		return true
	}
	for i, sub := 0, s; ; i++ {
		part, rest, more := strings.Cut(sub, "-")
		if len(part) == 0 || len(part) > 8 {
			return false
		}
		for k := 0; k < len(part); k++ {
			c := part[k]
			alpha := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
			if !alpha && (i == 0 || c < '0' || c > '9') {
				return false
			}
		}
		if !more {
			return true
		}
		sub = rest
	}
}

// parseQValue parses a qvalue (RFC 9110 §12.4.2): "0" [ "." 0*3DIGIT ] or
// "1" [ "." 0*3("0") ], in thousandths.
func parseQValue(s string) (uint16, bool) {
	if s == "" || (s[0] != '0' && s[0] != '1') {
		return 0, false
	}
	whole := uint16(s[0]-'0') * 1000
	frac := s[1:]
	if frac == "" {
		return whole, true
	}
	if frac[0] != '.' || len(frac) > 4 {
		return 0, false
	}
	var v uint16
	mult := uint16(100)
	for k := 1; k < len(frac); k++ {
		c := frac[k]
		if c < '0' || c > '9' {
			return 0, false
		}
		v += uint16(c-'0') * mult
		mult /= 10
	}
	if whole == 1000 && v != 0 {
		return 0, false
	}
	return whole + v, true
}

// langBefore orders ranges by weight, highest first, then by name,
// case-insensitively.
func langBefore(a, b langRange) bool {
	if a.q != b.q {
		return a.q > b.q
	}
	for k := 0; k < len(a.tag) && k < len(b.tag); k++ {
		if ca, cb := lowerASCII(a.tag[k]), lowerASCII(b.tag[k]); ca != cb {
			return ca < cb
		}
	}
	return len(a.tag) < len(b.tag)
}

// appendWeight appends ";q=" and the weight q (thousandths) without
// trailing zeros, or nothing for the full weight 1.
func appendWeight(dst []byte, q uint16) []byte {
	switch {
	case q >= 1000:
		return dst
	case q == 0:
		return append(dst, ";q=0"...)
	}
	d := [3]byte{byte('0' + q/100), byte('0' + q/10%10), byte('0' + q%10)}
	n := 3
	for d[n-1] == '0' {
		n--
	}
	dst = append(dst, ";q=0."...)
	return append(dst, d[:n]...)
}
