// Package originview is the one place that says what an origin may read
// from a request the sidecar forwards: the readings of its path and the
// header names an origin may take as one.
//
// The sidecar decides on a request (which rule, which key, which headers
// are withheld, whether it is logged, whether a purge covers it) and then
// forwards it. When the origin reads the same bytes another way, one
// client can make the sidecar decide for a resource the origin serves
// elsewhere: "/account/..%2fstatic/x.css" is under "/static/" once decoded
// and cleaned, and under "/account/" to a router that matches the raw
// path. Origins differ, and the sidecar cannot know which kind it fronts,
// so every decision made on a path consults all of its readings here:
//
//   - raw: the escaped path as the origin receives it (Express, the
//     Rack/Rails router and most catch-all routers match this);
//   - raw, cleaned: its dot-segments, repeated slashes, backslashes and
//     ";parameters" resolved without decoding (servlet containers);
//   - decoded: percent-decoded once (a router behind a decoding server);
//   - decoded, cleaned: as nginx and Go's ServeMux route it;
//   - decoded twice, and cleaned: for origins that decode again (an
//     application that unescapes a path its server already decoded).
//
// A path with no '%' and nothing to clean has one reading, itself, and
// costs one scan of its bytes.
//
// Header names: a field name with '_' or '.' is the dashed name to many
// gateways (Rack on Puma and Unicorn, WSGI, PHP and CGI environments turn
// '-' and '.' into '_' and upper-case the name), so SameName takes '-',
// '_', '.' and ASCII case as one, and Dashed says whether a name is spelt
// only with letters, digits and '-', the names nginx forwards by default
// (underscores_in_headers off).
//
// Written here rather than taken from a library: net/url decodes and
// path.Clean cleans, but no library enumerates how different origins
// read one path, which is the point of this package.
package originview

import "strings"

// maxReadings bounds the readings of a path (Paths): three decodings
// (none, once, twice), three cleanings each with and without a trailing
// slash, and the servlet reading.
const maxReadings = 24

// Paths holds the distinct readings of one path, the raw one first.
type Paths struct {
	n int
	r [maxReadings]string
}

// Readings returns the distinct readings of escapedPath, the path as the
// origin receives it (net/url's URL.EscapedPath). It does not allocate
// for a path that has one reading (Canonical).
func Readings(escapedPath string) Paths {
	var ps Paths
	ps.add(escapedPath)
	if Canonical(escapedPath) {
		return ps
	}
	ps.addCleaned(escapedPath)
	dec := escapedPath
	for range 2 {
		if strings.IndexByte(dec, '%') < 0 {
			break
		}
		// Decoded leniently: net/http refuses a target with an invalid
		// escape, but the first decoding may leave one ("%25zz" is
		// "%zz"), and an application that decodes again (Python's
		// unquote, PHP's urldecode) still decodes the escapes around it.
		dec = unescape(dec)
		ps.add(dec)
		ps.addCleaned(dec)
	}
	// Servlet containers remove ";parameters" before they decode, so an
	// escaped ';' stays in its segment.
	if strings.IndexByte(escapedPath, ';') >= 0 {
		ps.addClean(unescape(clean(escapedPath, cleanParams)), 0)
	}
	return ps
}

// unescape decodes every valid %XX escape of p and keeps a '%' that is not
// followed by two hex digits as it is: a strict decoder's result wherever
// that has one, and the lenient decoders' otherwise. '+' stays '+' (it is
// a space only in a query).
func unescape(p string) string {
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if c, ok := Escaped(p, i); ok {
			if b.Cap() == 0 {
				b.Grow(len(p))
				b.WriteString(p[:i])
			}
			b.WriteByte(c)
			i += 2
		} else if b.Cap() != 0 {
			b.WriteByte(p[i])
		}
	}
	if b.Cap() == 0 {
		return p
	}
	return b.String()
}

// Escaped returns the byte the escape "%XY" at p[i] stands for, and
// false when p[i] starts no valid escape.
func Escaped(p string, i int) (byte, bool) {
	if p[i] != '%' || i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
		return 0, false
	}
	return unhex(p[i+1])<<4 | unhex(p[i+2]), true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// addCleaned adds p as each kind of origin cleans it: '/' alone
// separating segments (nginx, Go), '\' too (IIS), and ";parameters"
// removed as well (CleanPath). When p ends in a dot-segment ("/a/." or
// "/a/.."), each also without the trailing slash: nginx reads "/a/." as
// "/a/", Go's path.Clean (and the routers built on it) as "/a".
func (ps *Paths) addCleaned(p string) {
	for _, m := range [...]cleanMode{0, cleanBackslash, cleanAll} {
		ps.addClean(p, m)
	}
}

// addClean adds p cleaned in mode m, and without its trailing slash when
// that came from a final dot-segment.
func (ps *Paths) addClean(p string, m cleanMode) {
	c := clean(p, m)
	ps.add(c)
	if last := p[strings.LastIndexAny(p, `/\`)+1:]; dotSegment(last, true) != 0 && len(c) > 1 {
		ps.add(strings.TrimSuffix(c, "/"))
	}
}

func (ps *Paths) add(p string) {
	for i := 0; i < ps.n; i++ {
		if ps.r[i] == p {
			return
		}
	}
	ps.r[ps.n] = p
	ps.n++
}

// Len is the number of distinct readings (at least 1).
func (ps *Paths) Len() int { return ps.n }

// At returns reading i; At(0) is the path as received.
func (ps *Paths) At(i int) string { return ps.r[i] }

// Every reports whether f holds for every reading.
func (ps *Paths) Every(f func(string) bool) bool {
	for i := 0; i < ps.n; i++ {
		if !f(ps.r[i]) {
			return false
		}
	}
	return true
}

// Any reports whether f holds for some reading.
func (ps *Paths) Any(f func(string) bool) bool {
	for i := 0; i < ps.n; i++ {
		if f(ps.r[i]) {
			return true
		}
	}
	return false
}

// HasPrefix reports whether some reading of escapedPath starts with
// prefix: what a purge by prefix covers (purging more than asked is safe;
// leaving a copy the origin serves under the prefix is not).
func HasPrefix(escapedPath, prefix string) bool {
	if strings.HasPrefix(escapedPath, prefix) {
		return true
	}
	if Canonical(escapedPath) {
		return false
	}
	ps := Readings(escapedPath)
	return ps.Any(func(p string) bool { return strings.HasPrefix(p, prefix) })
}

// Canonical reports whether p has a single reading: no '%' escape and
// nothing CleanPath would change. One pass over its bytes.
func Canonical(p string) bool {
	return strings.IndexByte(p, '%') < 0 && !needsCleaning(p)
}

// Dashed reports whether a header field name is spelt with letters,
// digits and '-' only.
func Dashed(name string) bool {
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// SameName reports whether two header field names are one to some origin:
// equal ignoring ASCII case, with '_', '.' and '-' taken as one. It does
// not allocate.
func SameName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if foldByte(a[i]) != foldByte(b[i]) {
			return false
		}
	}
	return true
}

func foldByte(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + ('a' - 'A')
	case c == '_' || c == '.':
		return '-'
	}
	return c
}
