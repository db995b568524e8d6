package cachekey

import (
	"slices"
	"strings"
)

// queryFilter is a compiled query spec: the include or exclude list of a
// rule's cacheKey, or the access log's list of parameters to show.
type queryFilter struct {
	// patterns are the include or exclude list (at most one is set).
	patterns []namePattern
	// include: keep only parameters matching a pattern; else drop them.
	include bool
	sort    bool
}

// namePattern matches a decoded parameter name exactly, or by prefix when
// the configured pattern ended in '*'.
type namePattern struct {
	text   string
	prefix bool
}

func newQueryFilter(include, exclude []string, sort bool) queryFilter {
	f := queryFilter{include: len(include) > 0, sort: sort}
	list := exclude
	if f.include {
		list = include
	}
	for _, p := range list {
		np := namePattern{text: p}
		if strings.HasSuffix(p, "*") {
			np = namePattern{text: p[:len(p)-1], prefix: true}
		}
		f.patterns = append(f.patterns, np)
	}
	return f
}

func (f *queryFilter) shapes() bool { return len(f.patterns) > 0 || f.sort }

// keep decides on one parameter by its (still encoded) name.
func (f *queryFilter) keep(encName string) bool {
	if len(f.patterns) == 0 {
		return true
	}
	for _, p := range f.patterns {
		if matchDecoded(encName, p.text, p.prefix) {
			return f.include
		}
	}
	return !f.include
}

// maxStackParams is how many parameters AppendQuery sorts without
// allocating; longer queries are rare and may allocate.
const maxStackParams = 16

// AppendQuery appends the key form of rawQuery under s to dst: unchanged
// when s does not shape queries. Otherwise rawQuery is split on '&'
// (empty parts dropped) and each part is kept or dropped by its name (the
// part before '=', compared percent- and '+'-decoded, case-sensitively, to
// the include or exclude patterns; a trailing '*' matches a prefix).
//
// Origins disagree about ';': many split on it too. A part is dropped only
// when both readings drop it: by its own name and by the name of every
// ';'-separated piece in it; otherwise it is kept whole, as received. So
// "utm_x=1;callback=x" is kept under exclude "utm_*": it is not the query
// without it to an origin that reads callback.
//
// Kept parts keep their original bytes and are joined with '&'. When the
// rule sorts, they are ordered by name only, stably, so that duplicates
// keep their order (origins read the first or the last of "a=1&a=2", so
// "a=2&a=1" is another resource); a query with a ';' in a kept part is not
// sorted at all, since its names depend on the origin's reading. It does
// not allocate for up to 16 parameters beyond growing dst.
func (s *Shape) AppendQuery(dst []byte, rawQuery string) []byte {
	if !s.shapesQuery {
		return append(dst, rawQuery...)
	}
	f := &s.query
	if !f.sort {
		sep := false
		for rest := rawQuery; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, "&")
			if part == "" || !f.keepPart(part) {
				continue
			}
			if sep {
				dst = append(dst, '&')
			}
			dst = append(dst, part...)
			sep = true
		}
		return dst
	}
	var stack [maxStackParams]string
	parts := stack[:0]
	semicolon := false
	for rest := rawQuery; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		if part != "" && f.keepPart(part) {
			parts = append(parts, part)
			semicolon = semicolon || strings.IndexByte(part, ';') >= 0
		}
	}
	if !semicolon {
		slices.SortStableFunc(parts, compareNames)
	}
	for i, part := range parts {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, part...)
	}
	return dst
}

// keepPart decides on one '&'-separated part: kept when its name is kept,
// or when the name of any ';'-separated piece of it is.
func (f *queryFilter) keepPart(part string) bool {
	if f.keep(paramName(part)) {
		return true
	}
	if strings.IndexByte(part, ';') < 0 {
		return false
	}
	for rest := part; rest != ""; {
		var piece string
		piece, rest, _ = strings.Cut(rest, ";")
		if piece != "" && f.keep(paramName(piece)) {
			return true
		}
	}
	return false
}

// paramName returns the name of one name=value query part (all of it when
// there is no '=').
func paramName(part string) string {
	if i := strings.IndexByte(part, '='); i >= 0 {
		return part[:i]
	}
	return part
}

// compareNames orders query parts by name only, as received.
func compareNames(a, b string) int {
	return strings.Compare(paramName(a), paramName(b))
}

// matchDecoded reports whether enc, decoded as a form-encoded query name
// ('+' is a space, %XX a byte; a malformed escape stands for itself),
// equals pat, or starts with it when prefix is set. It decodes on the fly
// so that it does not allocate.
func matchDecoded(enc, pat string, prefix bool) bool {
	j := 0
	for i := 0; i < len(enc); {
		c := enc[i]
		switch {
		case c == '+':
			c = ' '
			i++
		case c == '%' && i+2 < len(enc) && isHex(enc[i+1]) && isHex(enc[i+2]):
			c = unhex(enc[i+1])<<4 | unhex(enc[i+2])
			i += 3
		default:
			i++
		}
		if j == len(pat) {
			return prefix
		}
		if pat[j] != c {
			return false
		}
		j++
	}
	return j == len(pat)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// ParamFilter keeps the query parameters of a list by name: the access
// log's accessLog.queryParams, matched as a cacheKey's queryInclude is.
type ParamFilter struct{ f queryFilter }

// NewParamFilter compiles a list of parameter names ('*' at the end
// matches a prefix).
func NewParamFilter(names []string) ParamFilter {
	return ParamFilter{f: newQueryFilter(names, nil, false)}
}

// Empty reports whether no parameter is ever kept.
func (p *ParamFilter) Empty() bool { return len(p.f.patterns) == 0 }

// Keeps reports whether the name=value query part is kept: its name,
// decoded, is listed.
func (p *ParamFilter) Keeps(part string) bool { return p.f.keep(paramName(part)) }
