package tierconfig

import (
	"slices"
	"strings"
)

// queryFilter is a compiled CacheKey query spec.
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

// AppendQuery appends the key form of rawQuery under r to dst: unchanged
// when the rule does not shape queries. Otherwise rawQuery is split on '&'
// (empty parts dropped); each parameter is kept or dropped by its name (the
// part before '=', compared percent- and '+'-decoded, case-sensitively, to
// the include or exclude patterns; a trailing '*' matches a prefix); kept
// parameters keep their original bytes, are sorted by (name, value) when
// the rule sorts (stable, comparing the bytes as received), and are joined
// with '&'. It does not allocate for up to 16 parameters beyond growing
// dst.
func (r *CompiledRule) AppendQuery(dst []byte, rawQuery string) []byte {
	if !r.ShapesQuery {
		return append(dst, rawQuery...)
	}
	f := &r.query
	if !f.sort {
		sep := false
		for rest := rawQuery; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, "&")
			if part == "" || !f.keep(paramName(part)) {
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
	for rest := rawQuery; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		if part != "" && f.keep(paramName(part)) {
			parts = append(parts, part)
		}
	}
	slices.SortStableFunc(parts, compareParams)
	for i, part := range parts {
		if i > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, part...)
	}
	return dst
}

// paramName returns the name of one name=value query part (all of it when
// there is no '=').
func paramName(part string) string {
	if i := strings.IndexByte(part, '='); i >= 0 {
		return part[:i]
	}
	return part
}

// compareParams orders query parts by name, then value, as received.
func compareParams(a, b string) int {
	an, av, _ := strings.Cut(a, "=")
	bn, bv, _ := strings.Cut(b, "=")
	if c := strings.Compare(an, bn); c != 0 {
		return c
	}
	return strings.Compare(av, bv)
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
	return isDigit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case isDigit(c):
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
