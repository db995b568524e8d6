package cachekey

import (
	"net/textproto"
	"strings"
)

// Shape is how a rule shapes the keys of the requests it matches
// (tierconfig CacheKey): which query parameters are kept and in what
// order, and which request headers and cookies join the key as its extra
// parts. The zero Shape keys the URL as received.
type Shape struct {
	query       queryFilter
	headers     []keyHeader
	headerNames []string // canonical names of headers, for Headers
	cookies     []string
	shapesQuery bool
	hasExtras   bool
}

// keyHeader is a header that joins the key: canonical for the lookup in
// http.Header without allocating, lowercase for the key bytes.
type keyHeader struct {
	canonical string
	lower     string
}

// NewShape compiles a rule's cache key: the query's include or exclude
// list (at most one is set; '*' at the end of a name matches a prefix),
// whether kept parameters are sorted, and the request headers and cookies
// that join the key, in order. The lists are validated by the caller
// (tierconfig).
func NewShape(queryInclude, queryExclude []string, sortQuery bool, headers, cookies []string) Shape {
	s := Shape{query: newQueryFilter(queryInclude, queryExclude, sortQuery)}
	s.shapesQuery = s.query.shapes()
	for _, h := range headers {
		canonical := textproto.CanonicalMIMEHeaderKey(h)
		s.headers = append(s.headers, keyHeader{canonical: canonical, lower: strings.ToLower(h)})
		s.headerNames = append(s.headerNames, canonical)
	}
	s.cookies = append([]string(nil), cookies...)
	s.hasExtras = len(s.headers)+len(s.cookies) > 0
	return s
}

// ShapesQuery reports whether s changes the query part of the key.
func (s *Shape) ShapesQuery() bool { return s.shapesQuery }

// HasExtras reports whether request headers or cookies join the key.
func (s *Shape) HasExtras() bool { return s.hasExtras }

// Headers returns the canonical names of the request headers that join
// the key, in configured order (nil when none). Because they are keyed,
// the proxy may forward them even when they are headers it otherwise
// withholds from the origin. The slice is computed once and shared, so the
// call does not allocate: callers must not modify it.
func (s *Shape) Headers() []string { return s.headerNames }

// Cookies returns the names of the cookies that join the key (nil when
// none), shared: callers must not modify it.
func (s *Shape) Cookies() []string { return s.cookies }
