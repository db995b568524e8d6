package tierconfig

import "strings"

// CleanPath returns the decoded request path p as an origin routes it, for
// matching rules: '\' counts as '/' (IIS and some frameworks treat it so),
// runs of '/' become one (nginx merge_slashes, most routers), and
// path parameters (";jsessionid=...", matrix parameters) are removed from
// every segment, as Java servlet containers and Spring do before routing
// (so "/account;x.css" is "/account", not a .css asset), and dot-segments
// are removed as RFC 3986 §5.2.4 says. A trailing slash is kept. The
// result always starts with '/' when p does.
//
// Cleaning only ever changes which rule matches: the proxy keys and
// forwards the path as received, so two requests the origin might answer
// differently never share an entry. It returns p itself, without
// allocating, when p needs no cleaning.
func CleanPath(p string) string {
	if !needsCleaning(p) {
		return p
	}
	var stack [32]string
	segs := stack[:0]
	dir := false // the cleaned path ends with a slash
	for rest := p; rest != ""; {
		i := strings.IndexAny(rest, "/\\")
		seg := rest
		if i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		dir = i >= 0
		if j := strings.IndexByte(seg, ';'); j >= 0 {
			seg = seg[:j]
		}
		switch dotSegment(seg) {
		case 1:
			dir = true
		case 2:
			if len(segs) > 0 {
				segs = segs[:len(segs)-1]
			}
			dir = true
		default:
			if seg != "" {
				segs = append(segs, seg)
			}
		}
	}
	var b strings.Builder
	b.Grow(len(p))
	rooted := p != "" && isSlash(p[0])
	for i, seg := range segs {
		if i > 0 || rooted {
			b.WriteByte('/')
		}
		b.WriteString(seg)
	}
	if dir && (len(segs) > 0 || rooted) {
		b.WriteByte('/')
	}
	return b.String()
}

// needsCleaning reports whether CleanPath would change p: a backslash, a
// semicolon, a doubled slash or a dot-segment anywhere.
func needsCleaning(p string) bool {
	// Most paths have no dot, backslash, semicolon or doubled slash at
	// all: one pass says so before segments are looked at.
	suspect := false
	for i := 0; i < len(p); i++ {
		if c := p[i]; c == '.' || c == '\\' || c == ';' || (c == '/' && i > 0 && p[i-1] == '/') {
			suspect = true
			break
		}
	}
	if !suspect {
		return false
	}
	start := 0
	for i := 0; i <= len(p); i++ {
		if i < len(p) && p[i] != '/' {
			if p[i] == '\\' || p[i] == ';' {
				return true
			}
			continue
		}
		seg := p[start:i]
		if dotSegment(seg) != 0 || (seg == "" && start > 0 && i < len(p)) {
			return true
		}
		start = i + 1
	}
	return false
}

// dotSegment returns 1 for ".", 2 for "..", each optionally followed by
// ";parameters", and 0 for any other segment.
func dotSegment(seg string) int {
	if i := strings.IndexByte(seg, ';'); i >= 0 {
		seg = seg[:i]
	}
	switch seg {
	case ".":
		return 1
	case "..":
		return 2
	}
	return 0
}

func isSlash(c byte) bool { return c == '/' || c == '\\' }
