package httpcache

import (
	"iter"
	"net/textproto"
	"slices"
	"strings"
	"time"
)

// Delta is an optional delta-seconds value (RFC 9111 §1.2.2).
type Delta struct {
	Valid bool          // present (with a usable or clamped value)
	Value time.Duration // the value as a duration; 0 when !Valid
}

// ResponseCC holds the response Cache-Control directives (RFC 9111 §5.2.2)
// and what the parser noticed about them.
type ResponseCC struct {
	Public, Private, NoCache, NoStore      bool
	MustRevalidate, ProxyRevalidate        bool
	NoTransform, Immutable, MustUnderstand bool
	PrivateFields, NoCacheFields           []string // canonical header names of private="a, b" / no-cache="a"
	MaxAge, SMaxAge                        Delta
	StaleWhileRevalidate, StaleIfError     Delta
	// Invalid is set when a freshness directive (max-age, s-maxage) had an
	// invalid value or conflicting duplicates; such a response is treated
	// as stale (RFC 9111 §4.2.1).
	Invalid bool
	// Targeted names the targeted field (RFC 9213) these directives came
	// from; empty when they are Cache-Control's. With a targeted field,
	// Expires is ignored too.
	Targeted string
}

// RequestCC holds the request Cache-Control directives (RFC 9111 §5.2.1).
// Pragma: no-cache counts as no-cache only when there is no Cache-Control
// field at all (RFC 9111 §5.4).
type RequestCC struct {
	MaxAge, MinFresh, StaleIfError Delta
	MaxStale                       Delta // Valid with Value when a value was given
	MaxStaleAny                    bool  // max-stale without a value: any staleness
	NoCache, NoStore, OnlyIfCached bool
	NoTransform                    bool
}

// ParseResponseCC parses every Cache-Control field line of h. Unknown
// directives are ignored; malformed ones never panic. Delta-seconds larger
// than 2^31 are clamped to 2^31 seconds; negative or non-numeric values make
// the directive invalid (for max-age/s-maxage: Invalid=true and the value
// treated as 0).
//
// Where the field is ambiguous the reading that stores less or for shorter
// wins: private="" and no-cache="" (no usable field name) count as the
// unqualified directives, and duplicate stale-while-revalidate or
// stale-if-error values keep the smallest.
func ParseResponseCC(h Header) ResponseCC {
	var cc ResponseCC
	var maxAge, sMaxAge freshnessDelta
	for d := range directives(values(h, "Cache-Control")) {
		switch {
		case strings.EqualFold(d.name, "max-age"):
			maxAge.add(d)
		case strings.EqualFold(d.name, "s-maxage"):
			sMaxAge.add(d)
		case strings.EqualFold(d.name, "no-cache"):
			if !d.hasValue || appendFieldNames(&cc.NoCacheFields, d.value) == 0 {
				cc.NoCache = true
			}
		case strings.EqualFold(d.name, "private"):
			if !d.hasValue || appendFieldNames(&cc.PrivateFields, d.value) == 0 {
				cc.Private = true
			}
		case strings.EqualFold(d.name, "no-store"):
			cc.NoStore = true
		case strings.EqualFold(d.name, "public"):
			cc.Public = true
		case strings.EqualFold(d.name, "must-revalidate"):
			cc.MustRevalidate = true
		case strings.EqualFold(d.name, "proxy-revalidate"):
			cc.ProxyRevalidate = true
		case strings.EqualFold(d.name, "no-transform"):
			cc.NoTransform = true
		case strings.EqualFold(d.name, "immutable"):
			cc.Immutable = true
		case strings.EqualFold(d.name, "must-understand"):
			cc.MustUnderstand = true
		case strings.EqualFold(d.name, "stale-while-revalidate"):
			minDelta(&cc.StaleWhileRevalidate, d)
		case strings.EqualFold(d.name, "stale-if-error"):
			minDelta(&cc.StaleIfError, d)
		}
	}
	cc.MaxAge = maxAge.result(&cc.Invalid)
	cc.SMaxAge = sMaxAge.result(&cc.Invalid)
	return cc
}

// ParseRequestCC parses the request's Cache-Control (and Pragma) fields.
//
// A client's constraints are read conservatively: an invalid max-age counts
// as max-age=0 (the client asked for something fresh; revalidating honours
// that), invalid min-fresh, max-stale and stale-if-error values are ignored
// (they would only widen or narrow what the client accepts in ways we
// cannot know), duplicates keep the most restrictive value, and a bounded
// max-stale wins over an unbounded one.
func ParseRequestCC(h Header) RequestCC {
	var cc RequestCC
	lines := values(h, "Cache-Control")
	for d := range directives(lines) {
		switch {
		case strings.EqualFold(d.name, "max-age"):
			v, ok := parseDelta(d.value)
			if !ok {
				v = 0
			}
			if !cc.MaxAge.Valid || v < cc.MaxAge.Value {
				cc.MaxAge = Delta{Valid: true, Value: v}
			}
		case strings.EqualFold(d.name, "min-fresh"):
			if v, ok := parseDelta(d.value); ok && (!cc.MinFresh.Valid || v > cc.MinFresh.Value) {
				cc.MinFresh = Delta{Valid: true, Value: v}
			}
		case strings.EqualFold(d.name, "max-stale"):
			if !d.hasValue {
				cc.MaxStaleAny = true
			} else {
				minDelta(&cc.MaxStale, d)
			}
		case strings.EqualFold(d.name, "stale-if-error"):
			minDelta(&cc.StaleIfError, d)
		case strings.EqualFold(d.name, "no-cache"):
			cc.NoCache = true
		case strings.EqualFold(d.name, "no-store"):
			cc.NoStore = true
		case strings.EqualFold(d.name, "only-if-cached"):
			cc.OnlyIfCached = true
		case strings.EqualFold(d.name, "no-transform"):
			cc.NoTransform = true
		}
	}
	if cc.MaxStale.Valid {
		cc.MaxStaleAny = false
	}
	if len(lines) == 0 {
		for _, line := range values(h, "Pragma") {
			for rest := line; rest != ""; {
				var e string
				e, rest = cutElem(rest)
				if strings.EqualFold(e, "no-cache") {
					cc.NoCache = true
				}
			}
		}
	}
	return cc
}

// freshnessDelta accumulates the occurrences of max-age or s-maxage: any
// invalid value or two different values poison it (RFC 9111 §4.2.1 lets a
// cache consider such a response stale, the safe choice).
type freshnessDelta struct {
	seen, bad bool
	v         time.Duration
}

func (f *freshnessDelta) add(d directive) {
	v, ok := parseDelta(d.value)
	switch {
	case !ok:
		f.bad = true
	case f.seen && v != f.v:
		f.bad = true
	}
	f.seen, f.v = true, v
}

func (f *freshnessDelta) result(invalid *bool) Delta {
	if !f.seen {
		return Delta{}
	}
	if f.bad {
		*invalid = true
		return Delta{Valid: true}
	}
	return Delta{Valid: true, Value: f.v}
}

// minDelta records a valid value of d in dst, keeping the smaller of
// duplicates; an invalid value is ignored.
func minDelta(dst *Delta, d directive) {
	v, ok := parseDelta(d.value)
	if !ok {
		return
	}
	if !dst.Valid || v < dst.Value {
		*dst = Delta{Valid: true, Value: v}
	}
}

// appendFieldNames adds the canonical field names of a comma-separated list
// to *dst (deduplicated) and returns how many names the list held.
func appendFieldNames(dst *[]string, list string) int {
	n := 0
	for rest := list; rest != ""; {
		var e string
		e, rest = cutElem(rest)
		if e == "" {
			continue
		}
		n++
		name := textproto.CanonicalMIMEHeaderKey(e)
		if !slices.Contains(*dst, name) {
			*dst = append(*dst, name)
		}
	}
	return n
}

// directive is one cache-directive: token [ "=" ( token / quoted-string ) ].
type directive struct {
	name, value string
	hasValue    bool
}

// directives yields the directives of every field line in turn. It and its
// yield function inline into both parsers, so ranging over it does not
// allocate on the hit path (TestHitPathDoesNotAllocate guards this).
func directives(lines []string) iter.Seq[directive] {
	return func(yield func(directive) bool) {
		for _, line := range lines {
			for rest := line; ; {
				var d directive
				var ok bool
				if d, rest, ok = nextDirective(rest); !ok {
					break
				}
				if !yield(d) {
					return
				}
			}
		}
	}
}

// nextDirective lexes the first directive of a Cache-Control field value
// and returns the rest. A quoted value may contain commas (private="a, b");
// a quoted value is unescaped, which allocates only when it contains a
// backslash. Junk after a quoted value up to the next comma is skipped.
// Every call that returns ok consumes at least one byte.
func nextDirective(s string) (d directive, rest string, ok bool) {
	i := 0
	for i < len(s) && (s[i] == ',' || isOWS(s[i])) {
		i++
	}
	if i == len(s) {
		return d, "", false
	}
	start := i
	for i < len(s) && s[i] != ',' && s[i] != '=' {
		i++
	}
	d.name = trimOWS(s[start:i])
	if i < len(s) && s[i] == '=' {
		i++
		d.hasValue = true
		for i < len(s) && isOWS(s[i]) {
			i++
		}
		if i < len(s) && s[i] == '"' {
			i++
			vstart, escaped := i, false
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' && i+1 < len(s) {
					escaped = true
					i++
				}
				i++
			}
			d.value = s[vstart:i]
			if escaped {
				d.value = unquote(d.value)
			}
			for i < len(s) && s[i] != ',' {
				i++
			}
		} else {
			vstart := i
			for i < len(s) && s[i] != ',' {
				i++
			}
			d.value = trimOWS(s[vstart:i])
		}
	}
	return d, s[i:], true
}

// unquote removes the backslashes of quoted-pairs.
func unquote(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
