package httpcache

import (
	"time"

	"github.com/dunglas/httpsfv"
)

// Targeted cache-control fields (RFC 9213): CDN-Cache-Control and fields
// like it carry Cache-Control directives meant for one class of cache. A
// cache keeps a target list, an ordered list of the field names it obeys;
// the first field on it that a response carries with a valid, non-empty
// value replaces Cache-Control and Expires for every decision of that cache
// about that response (§2.1).
//
// The fields are Structured Fields Dictionaries (RFC 8941, §2.2), parsed by
// github.com/dunglas/httpsfv rather than by hand: the Structured Fields
// grammar is strict (lowercase keys, no space around "=", typed values)
// where Cache-Control's lexer above is lenient on purpose, and the library
// passes the HTTP working group's structured-field test suite. The parse
// allocates; it runs only on the miss path (Decide), never on a hit.

// SelectResponseCC returns the response directives this cache obeys for a
// response with header h, given its target list (canonical field names,
// most applicable first): those of the first listed field that is present
// with a valid, non-empty value, with Targeted naming that field; else
// those of Cache-Control (Targeted empty). An empty target list is plain
// RFC 9111.
//
// A field that is present but empty or not a valid dictionary is ignored
// as if absent and the next one is tried (RFC 9213 §2.2). A valid field
// with no directive this cache knows ("foo") is still selected: the
// response then has no directives at all, and Cache-Control is ignored.
func SelectResponseCC(h Header, targeted []string) ResponseCC {
	for _, name := range targeted {
		lines := values(h, name)
		if len(lines) == 0 {
			continue
		}
		if cc, ok := ParseTargetedCC(lines); ok {
			cc.Targeted = name
			return cc
		}
	}
	return ParseResponseCC(h)
}

// ParseTargetedCC parses the field lines of one targeted field. ok is false
// when the field must be ignored: it is not a valid Structured Fields
// Dictionary, it has no member, or a directive this cache knows has a value
// of a type RFC 9213 §2.2's mapping cannot give it. The mapping is:
//
//   - max-age, s-maxage, stale-while-revalidate, stale-if-error: a
//     non-negative Integer (delta-seconds), clamped to 2^31 seconds. A
//     String ("60"), Decimal (1.5), negative Integer or Boolean makes
//     the field invalid.
//   - public, no-store, must-revalidate, proxy-revalidate, no-transform,
//     immutable, must-understand: the Boolean true (a bare key). Any
//     other value, ?0 included, makes the field invalid.
//   - private, no-cache: the Boolean true (unqualified), or a String of
//     field names (qualified, as private="Set-Cookie" in Cache-Control);
//     a String with no name counts as unqualified, as in ParseResponseCC.
//
// Parameters on a member are ignored, and so are members this cache does
// not know, whatever their value. A key given twice keeps its last value
// (RFC 8941 §4.2.2). Keys are lowercase: "Max-Age=60" is not a valid
// dictionary.
func ParseTargetedCC(lines []string) (cc ResponseCC, ok bool) {
	dict, err := httpsfv.UnmarshalDictionary(lines)
	if err != nil || len(dict.Names()) == 0 {
		return ResponseCC{}, false
	}
	for _, name := range dict.Names() {
		m, _ := dict.Get(name)
		var good bool
		switch name {
		case "max-age":
			cc.MaxAge, good = sfDelta(m)
		case "s-maxage":
			cc.SMaxAge, good = sfDelta(m)
		case "stale-while-revalidate":
			cc.StaleWhileRevalidate, good = sfDelta(m)
		case "stale-if-error":
			cc.StaleIfError, good = sfDelta(m)
		case "public":
			cc.Public, good = sfTrue(m)
		case "no-store":
			cc.NoStore, good = sfTrue(m)
		case "must-revalidate":
			cc.MustRevalidate, good = sfTrue(m)
		case "proxy-revalidate":
			cc.ProxyRevalidate, good = sfTrue(m)
		case "no-transform":
			cc.NoTransform, good = sfTrue(m)
		case "immutable":
			cc.Immutable, good = sfTrue(m)
		case "must-understand":
			cc.MustUnderstand, good = sfTrue(m)
		case "private":
			cc.Private, good = sfFieldList(m, &cc.PrivateFields)
		case "no-cache":
			cc.NoCache, good = sfFieldList(m, &cc.NoCacheFields)
		default:
			good = true
		}
		if !good {
			return ResponseCC{}, false
		}
	}
	return cc, true
}

// sfDelta reads a delta-seconds directive: a non-negative Integer.
func sfDelta(m httpsfv.Member) (Delta, bool) {
	it, ok := m.(httpsfv.Item)
	if !ok {
		return Delta{}, false
	}
	n, ok := it.Value.(int64)
	if !ok || n < 0 {
		return Delta{}, false
	}
	return Delta{Valid: true, Value: time.Duration(min(n, 1<<31)) * time.Second}, true
}

// sfTrue reads a flag directive: the Boolean true.
func sfTrue(m httpsfv.Member) (set, ok bool) {
	it, isItem := m.(httpsfv.Item)
	if !isItem {
		return false, false
	}
	b, isBool := it.Value.(bool)
	return b, isBool && b
}

// sfFieldList reads private or no-cache: true for the unqualified
// directive, or a String of field names appended to *fields (unqualified
// when it names none).
func sfFieldList(m httpsfv.Member, fields *[]string) (unqualified, ok bool) {
	it, isItem := m.(httpsfv.Item)
	if !isItem {
		return false, false
	}
	switch v := it.Value.(type) {
	case bool:
		return v, v
	case string:
		if appendFieldNames(fields, v) == 0 {
			return true, true
		}
		return false, true
	}
	return false, false
}
