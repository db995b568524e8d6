package originview

import "strings"

// CleanPath returns path p cleaned the most: '\' counts as '/' (IIS),
// runs of '/' become one (nginx merge_slashes, most routers), path
// parameters (";jsessionid=...", matrix parameters) are removed from every
// segment, as Java servlet containers and Spring do before routing, and
// dot-segments are removed as RFC 3986 §5.2.4 says. A trailing slash is
// kept. The result always starts with '/' when p does. It is one of the
// readings of a path (Readings), the one explanations show. It returns p
// itself, without allocating, when p needs no cleaning.
func CleanPath(p string) string {
	if !needsCleaning(p) {
		return p
	}
	return clean(p, cleanAll)
}

// How clean reads a path: which bytes separate segments and whether
// ";parameters" are removed from segments. Origins differ on both
// (Readings).
type cleanMode uint8

const (
	cleanBackslash cleanMode = 1 << iota // '\' separates segments (IIS)
	cleanParams                          // ";parameters" are removed (servlets)
	cleanAll       = cleanBackslash | cleanParams
)

// clean resolves dot-segments and merges repeated separators in p, in
// mode m.
func clean(p string, m cleanMode) string {
	seps := "/"
	if m&cleanBackslash != 0 {
		seps = "/\\"
	}
	var stack [32]string
	segs := stack[:0]
	dir := false // the cleaned path ends with a slash
	for rest := p; rest != ""; {
		i := strings.IndexAny(rest, seps)
		seg := rest
		if i >= 0 {
			seg, rest = rest[:i], rest[i+1:]
		} else {
			rest = ""
		}
		dir = i >= 0
		if m&cleanParams != 0 {
			if j := strings.IndexByte(seg, ';'); j >= 0 {
				seg = seg[:j]
				// "/a/;x" is "/a/": a segment of parameters only is
				// an empty one.
				dir = dir || seg == ""
			}
		}
		switch dotSegment(seg, m&cleanParams != 0) {
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
	rooted := p != "" && (p[0] == '/' || m&cleanBackslash != 0 && p[0] == '\\')
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
		if dotSegment(seg, true) != 0 || (seg == "" && start > 0 && i < len(p)) {
			return true
		}
		start = i + 1
	}
	return false
}

// dotSegment returns 1 for ".", 2 for "..", each followed by
// ";parameters" when params is set, and 0 for any other segment.
func dotSegment(seg string, params bool) int {
	if params {
		if i := strings.IndexByte(seg, ';'); i >= 0 {
			seg = seg[:i]
		}
	}
	switch seg {
	case ".":
		return 1
	case "..":
		return 2
	}
	return 0
}
