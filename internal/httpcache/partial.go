package httpcache

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Partial content (RFC 9111 §3.3, §3.4; RFC 9110 §14, §15.3.7): which 206
// responses a cache may keep, when a new part may be combined with the
// parts it holds, and which bytes it still has to ask the origin for. The
// byte spans a cache holds are kept as ByteRanges, sorted, disjoint and
// never adjacent (AddSpan keeps them so).

// ContentRange is a parsed single-part Content-Range (RFC 9110 §14.4): the
// bytes [Start, End] of a representation of Length bytes.
type ContentRange struct {
	Start, End int64
	// Length is the complete length, or -1 when the origin sent "*".
	Length int64
}

// ParseContentRange parses a 206's Content-Range, `bytes first-last/length`
// or `bytes first-last/*`. It is strict, since only what it accepts is
// stored: the unit is "bytes" (any case) followed by one space, the
// numbers are 1*DIGIT that fit an int64, first <= last, and last < length
// when the length is known. An unsatisfied-range (`bytes */length`, a 416's)
// is not ok.
func ParseContentRange(v string) (ContentRange, bool) {
	v = trimOWS(v)
	if len(v) < 6 || !strings.EqualFold(v[:6], "bytes ") {
		return ContentRange{}, false
	}
	rng, length, ok := strings.Cut(v[6:], "/")
	if !ok {
		return ContentRange{}, false
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return ContentRange{}, false
	}
	first, ok1 := parseExactPos(a)
	last, ok2 := parseExactPos(b)
	if !ok1 || !ok2 || last < first {
		return ContentRange{}, false
	}
	cr := ContentRange{Start: first, End: last, Length: -1}
	if length != "*" {
		n, ok := parseExactPos(length)
		if !ok || last >= n {
			return ContentRange{}, false
		}
		cr.Length = n
	}
	return cr, true
}

// parseExactPos is parsePos without clamping: a number that does not fit
// an int64 cannot describe bytes that were sent.
func parseExactPos(s string) (int64, bool) {
	n, ok := parsePos(s)
	return n, ok && n != math.MaxInt64
}

// StrongValidator returns the validator a cache can compare strongly and
// send in If-Range for the representation whose header is h (RFC 9110
// §8.8, §13.1.5): a strong ETag as sent (`"v1"`); else a Last-Modified
// that counts as strong because the Date it came with is at least one
// second later (§8.8.2.2), as an IMF-fixdate. has reports whether h carries
// any validator at all, so that "none" (v == "", !has) and "only weak ones"
// (v == "", has) can be told apart. An ETag value always starts with a
// quote and a date never does, so the two kinds never compare equal.
func StrongValidator(h Header) (v string, has bool) {
	etag := first(h, "ETag")
	lm := first(h, "Last-Modified")
	has = etag != "" || lm != ""
	if t, ok := parseETag(etag); ok && !t.weak && len(values(h, "ETag")) == 1 {
		return `"` + t.opaque + `"`, true
	}
	if len(values(h, "Last-Modified")) != 1 {
		return "", has
	}
	m, ok := ParseHTTPDate(lm)
	if !ok {
		return "", has
	}
	d, ok := ParseHTTPDate(first(h, "Date"))
	if !ok || len(values(h, "Date")) != 1 || d.Sub(m) < time.Second {
		return "", has
	}
	return m.UTC().Format(http.TimeFormat), true
}

// Part is what a 206 carries of a representation.
type Part struct {
	// Span is the bytes the body carries and Length the representation's
	// complete length, from Content-Range.
	Span   ByteRange
	Length int64
	// Validator is StrongValidator of the response ("" when it has none).
	Validator string
}

// ReceivedPart reads the part a 206 with header h carries, whose body is
// framed by contentLength (-1 when unknown: the caller then counts the
// bytes it receives and uses them only if they are exactly Span's). It
// returns why the part cannot be placed in its representation, or "": a
// single part (not multipart/byteranges) with exactly one Content-Range
// that ParseContentRange accepts, with a known complete length (a "*"
// length cannot be placed), a Content-Length, when known, equal to the
// number of bytes Content-Range names, and a strong validator or no
// validator at all (a weak one alone can neither be sent in If-Range nor
// prove that two parts belong together).
func ReceivedPart(h Header, contentLength int64) (Part, string) {
	if mediaType(first(h, "Content-Type")) == "multipart/byteranges" {
		return Part{}, "a multipart/byteranges 206 is not stored"
	}
	crs := values(h, "Content-Range")
	if len(crs) != 1 {
		return Part{}, "a 206 needs exactly one Content-Range to be stored"
	}
	cr, ok := ParseContentRange(crs[0])
	switch {
	case !ok:
		return Part{}, "the 206's Content-Range is malformed"
	case cr.Length < 0:
		return Part{}, "a 206 without a complete length (bytes a-b/*) is not stored"
	case contentLength >= 0 && contentLength != cr.End-cr.Start+1:
		return Part{}, "the 206's Content-Length is not the length its Content-Range names"
	}
	v, has := StrongValidator(h)
	if v == "" && has {
		return Part{}, "a 206 with only a weak validator is not stored"
	}
	return Part{Span: ByteRange{Start: cr.Start, End: cr.End}, Length: cr.Length, Validator: v}, ""
}

// PartialDecision says whether a 206 may be stored as part of a
// representation (RFC 9111 §3.3), with its freshness as Decide computes
// it, and what the part is.
type PartialDecision struct {
	Decision
	Part
}

// DecidePartial applies RFC 9111 §3.3 to a 206 answering a GET that asked
// for sentRange (the Range field the cache sent), whose body is framed by
// contentLength (as for ReceivedPart). It is stored only when the request
// asked for a single byte range, ReceivedPart accepts the part, and
// Decide's rules allow it as they would any response (no-store, private,
// Authorization, Set-Cookie, Vary: *, freshness or a validator; 206 is
// heuristically cacheable).
func DecidePartial(x Exchange, sentRange string, contentLength int64, p Policy) PartialDecision {
	if x.Method != http.MethodGet {
		return PartialDecision{Decision: notStored(WhyMethod, "only GET responses are stored")}
	}
	if x.Status != http.StatusPartialContent {
		return PartialDecision{Decision: notStored(WhyStatus, "only a 206 is a partial response")}
	}
	if _, ok := singleByteRange(sentRange); !ok {
		return PartialDecision{Decision: notStored(WhyRange, "a 206 is stored only in answer to a single byte range")}
	}
	part, why := ReceivedPart(x.RespHeader, contentLength)
	if why != "" {
		return PartialDecision{Decision: notStored(WhyPart, why)}
	}
	d := decide(x, p)
	if !d.Store {
		return PartialDecision{Decision: d}
	}
	return PartialDecision{Decision: d, Part: part}
}

// SingleRange returns the request's Range field when it is one field line
// asking for a single byte range (whatever its satisfiability), the only
// kind of range request whose answer a cache stores.
func SingleRange(req Header) (string, bool) {
	rs := values(req, "Range")
	if len(rs) != 1 {
		return "", false
	}
	if _, ok := singleByteRange(rs[0]); !ok {
		return "", false
	}
	return rs[0], true
}

// mediaType is the lowercase type/subtype of a Content-Type value.
func mediaType(ct string) string {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.ToLower(trimOWS(ct))
}

// CanCombine reports whether a new part (its validator and complete
// length) belongs to the same representation as a stored partial
// response, so that their spans may be combined (RFC 9111 §3.4, RFC 9110
// §15.3.7.3): the same complete length, and the same strong validator.
// Without a validator on either side the RFC gives no way to tell; this
// cache then combines only while the stored part is fresh (storedFresh):
// the origin vouched that its bytes are current for that long, so a part
// received meanwhile is taken to be of the same representation. A part
// with a validator never combines with one without.
func CanCombine(storedValidator string, storedLength int64, storedFresh bool, newValidator string, newLength int64) bool {
	if storedLength != newLength || storedValidator != newValidator {
		return false
	}
	return storedValidator != "" || storedFresh
}

// AddSpan returns spans with r added: overlapping and adjacent spans are
// merged, so the result is sorted, disjoint and never adjacent. spans must
// be so already; it is not modified.
func AddSpan(spans []ByteRange, r ByteRange) []ByteRange {
	out := make([]ByteRange, 0, len(spans)+1)
	i := 0
	for ; i < len(spans) && spans[i].End+1 < r.Start; i++ {
		out = append(out, spans[i])
	}
	for ; i < len(spans) && spans[i].Start <= r.End+1; i++ {
		r.Start = min(r.Start, spans[i].Start)
		r.End = max(r.End, spans[i].End)
	}
	out = append(out, r)
	return append(out, spans[i:]...)
}

// Covers reports whether spans hold every byte of r.
func Covers(spans []ByteRange, r ByteRange) bool {
	for _, s := range spans {
		if s.Start <= r.Start && r.End <= s.End {
			return true
		}
	}
	return false
}

// GapResult says what a cache lacks of a range it wants.
type GapResult uint8

const (
	GapNone GapResult = iota // every byte is held
	GapOne                   // one contiguous run of bytes is missing
	GapMany                  // two or more separate runs are missing
)

// Gap returns what spans lack of want: nothing, the one contiguous run of
// missing bytes, or that several runs are missing (a cache then asks the
// origin for the whole of want rather than for several ranges, whose
// answer would be multipart).
func Gap(spans []ByteRange, want ByteRange) (ByteRange, GapResult) {
	var gap ByteRange
	found := false
	next := want.Start // the first byte of want not yet accounted for
	for _, s := range spans {
		if s.End < next {
			continue
		}
		if s.Start > want.End {
			break
		}
		if s.Start > next {
			if found {
				return ByteRange{}, GapMany
			}
			gap, found = ByteRange{Start: next, End: s.Start - 1}, true
		}
		next = s.End + 1
		if next > want.End {
			break
		}
	}
	if next <= want.End {
		if found {
			return ByteRange{}, GapMany
		}
		gap, found = ByteRange{Start: next, End: want.End}, true
	}
	if !found {
		return ByteRange{}, GapNone
	}
	return gap, GapOne
}

// GapRange is the Range field value that asks for gap of a representation
// of length bytes: `bytes=first-last`, or `bytes=first-` when the gap runs
// to the end.
func GapRange(gap ByteRange, length int64) string {
	b := make([]byte, 0, 48)
	b = append(b, "bytes="...)
	b = strconv.AppendInt(b, gap.Start, 10)
	b = append(b, '-')
	if gap.End < length-1 {
		b = strconv.AppendInt(b, gap.End, 10)
	}
	return string(b)
}

// ContentRangeValue is the Content-Range of the bytes r of a
// representation of length bytes: `bytes first-last/length`.
func ContentRangeValue(r ByteRange, length int64) string {
	b := make([]byte, 0, 64)
	b = append(b, "bytes "...)
	b = strconv.AppendInt(b, r.Start, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, r.End, 10)
	b = append(b, '/')
	return string(strconv.AppendInt(b, length, 10))
}
