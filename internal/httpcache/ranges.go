package httpcache

import (
	"math"
	"strings"
)

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
//
// Details: the unit "bytes" is case-insensitive; empty list elements
// ("bytes=0-1,") are allowed; positions too large for int64 are clamped,
// which makes them unsatisfiable as a first-pos and "to the end" as a
// last-pos or suffix; first-pos > last-pos is malformed. If-Range is only
// looked at for a well-formed Range, and before satisfiability (a failed
// If-Range means the full 200, not a 416). An empty representation cannot
// express any byte range: an int-range is unsatisfiable, a suffix-range
// gets the full (empty) 200.
func EvalRange(req Header, stored Header, size int64) (ByteRange, RangeResult) {
	rs := values(req, "Range")
	if len(rs) != 1 || size < 0 {
		return ByteRange{}, RangeIgnore
	}
	spec, ok := singleByteRange(rs[0])
	if !ok {
		return ByteRange{}, RangeIgnore
	}
	if ir := values(req, "If-Range"); len(ir) > 0 && (len(ir) > 1 || !ifRangeHolds(ir[0], stored)) {
		return ByteRange{}, RangeIgnore
	}
	if spec.suffix {
		switch {
		case spec.last == 0:
			return ByteRange{}, RangeUnsatisfiable
		case size == 0:
			return ByteRange{}, RangeIgnore
		}
		return ByteRange{Start: max(0, size-spec.last), End: size - 1}, RangeSatisfiable
	}
	if spec.first >= size {
		return ByteRange{}, RangeUnsatisfiable
	}
	end := size - 1
	if spec.hasLast && spec.last < end {
		end = spec.last
	}
	return ByteRange{Start: spec.first, End: end}, RangeSatisfiable
}

// rangeSpec is one parsed range-spec: first-last, first- or -suffix (then
// last holds the suffix length).
type rangeSpec struct {
	first, last     int64
	hasLast, suffix bool
}

// singleByteRange parses `bytes=<one range-spec>`; ok is false for another
// unit, more than one range or anything malformed.
func singleByteRange(v string) (rangeSpec, bool) {
	v = trimOWS(v)
	if len(v) < 6 || !strings.EqualFold(v[:6], "bytes=") {
		return rangeSpec{}, false
	}
	var spec string
	n := 0
	for rest := v[6:]; rest != ""; {
		var e string
		e, rest = cutElem(rest)
		if e == "" {
			continue
		}
		if n++; n > 1 {
			return rangeSpec{}, false
		}
		spec = e
	}
	if n != 1 {
		return rangeSpec{}, false
	}
	a, b, found := strings.Cut(spec, "-")
	if !found {
		return rangeSpec{}, false
	}
	if a == "" {
		l, ok := parsePos(b)
		return rangeSpec{last: l, suffix: true}, ok
	}
	f, ok := parsePos(a)
	if !ok {
		return rangeSpec{}, false
	}
	if b == "" {
		return rangeSpec{first: f}, true
	}
	l, ok := parsePos(b)
	if !ok || l < f {
		return rangeSpec{}, false
	}
	return rangeSpec{first: f, last: l, hasLast: true}, true
}

// parsePos parses 1*DIGIT, clamping at MaxInt64.
func parsePos(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			n = math.MaxInt64
		} else {
			n = n*10 + d
		}
	}
	return n, true
}

// ifRangeHolds evaluates an If-Range value (RFC 9110 §13.1.5): an
// entity-tag must equal the stored ETag with both strong; a date must
// equal the stored Last-Modified.
func ifRangeHolds(v string, stored Header) bool {
	v = trimOWS(v)
	if strings.HasPrefix(v, `"`) || strings.HasPrefix(v, "W/") {
		t, ok := parseETag(v)
		if !ok || t.weak {
			return false
		}
		have, ok := parseETag(first(stored, "ETag"))
		return ok && !have.weak && have.opaque == t.opaque
	}
	d, ok := ParseHTTPDate(v)
	if !ok {
		return false
	}
	lm, ok := ParseHTTPDate(first(stored, "Last-Modified"))
	return ok && lm.Equal(d)
}
