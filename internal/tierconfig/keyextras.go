package tierconfig

import (
	"net/http"
	"strings"
)

// AppendKeyExtras appends the rule's extra key parts to dst, in the order
// configured: for each header "\x00h:<lowercase name>=<values joined by
// ','>", for each cookie "\x00c:<name>=<value as received>", or
// "\x00c:<name>\x01" when the request has no such cookie, so that an absent
// cookie and an empty one make different keys. It does not allocate beyond
// growing dst. (Host is not a header here: net/http moves it to req.Host,
// and the key has the host already.)
func (r *CompiledRule) AppendKeyExtras(dst []byte, req *http.Request) []byte {
	for _, h := range r.headers {
		dst = append(dst, "\x00h:"...)
		dst = append(dst, h.lower...)
		dst = append(dst, '=')
		for i, v := range req.Header[h.canonical] {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, v...)
		}
	}
	for _, name := range r.cookies {
		dst = append(dst, "\x00c:"...)
		dst = append(dst, name...)
		if v, ok := findCookie(req.Header["Cookie"], name); ok {
			dst = append(dst, '=')
			dst = append(dst, v...)
		} else {
			dst = append(dst, '\x01')
		}
	}
	return dst
}

// findCookie returns the value of the first cookie called name in the
// Cookie field lines, as net/http's Request.Cookie would find it, but
// without parsing every cookie into a new value. The value is returned as
// received (surrounding double quotes included).
func findCookie(lines []string, name string) (string, bool) {
	for _, line := range lines {
		for rest := line; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, ";")
			part = strings.Trim(part, " \t")
			n, v, _ := strings.Cut(part, "=")
			if n == name {
				return v, true
			}
		}
	}
	return "", false
}

// AmbiguousCookies reports whether req's Cookie field names one of the
// rule's keyed cookies in a way origins read differently (scanCookie), so
// that the key cannot say which value the origin will use and the request
// must not fill or be served from the cache. It does not allocate.
func (r *CompiledRule) AmbiguousCookies(req *http.Request) bool {
	for _, name := range r.cookies {
		if _, _, ambiguous := scanCookie(req.Header["Cookie"], name); ambiguous {
			return true
		}
	}
	return false
}

// scanCookie reads the cookie called name from the Cookie field lines:
// its value and whether it is there, as findCookie reads them, and
// whether the lines name it in a way origins read differently:
//   - the cookie more than once (frameworks keep the first or the last);
//   - white space between its name and '=' (some trim names, some not);
//   - a name that is this one only to a looser reader: in another case
//     (ASP.NET Core compares names case-insensitively), percent-encoded
//     (PHP and Rack decode names), or before or after a ',' inside a
//     cookie (Rack 2 splits on ',' too).
//
// It stops at the first ambiguity (value and found are then meaningless)
// and does not allocate.
func scanCookie(lines []string, name string) (value string, found, ambiguous bool) {
	if !mayNameCookie(lines, name) {
		return "", false, false
	}
	for _, line := range lines {
		for rest := line; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, ";")
			for piece, first := part, true; ; first = false {
				var more string
				var comma bool
				piece, more, comma = strings.Cut(piece, ",")
				n, _, _ := strings.Cut(piece, "=")
				trimmed := strings.Trim(n, " \t")
				// Leading space after ';' is the separator's; a space
				// between the name and '=' is not.
				exact := first && trimmed == name && strings.TrimLeft(n, " \t") == trimmed
				switch {
				case exact && found:
					return "", false, true
				case exact:
					pn, pv, _ := strings.Cut(strings.Trim(part, " \t"), "=")
					if pn != name {
						// "name,other=v": a cookie without '=' to some
						// readers, "name,other" to others.
						return "", false, true
					}
					found, value = true, pv
				case looseNameEqual(trimmed, name):
					return "", false, true
				}
				if !comma {
					break
				}
				piece = more
			}
		}
	}
	return value, found, false
}

// mayNameCookie reports whether the lines could name the cookie at all,
// to scanCookie's loosest reading: only a line that holds the name in some
// case, or a '%' (a percent-encoded name), can. One pass over the bytes,
// where most requests (no such cookie) end.
func mayNameCookie(lines []string, name string) bool {
	for _, line := range lines {
		if strings.IndexByte(line, '%') >= 0 || containsFoldASCII(line, name) {
			return true
		}
	}
	return false
}

// containsFoldASCII reports whether s contains sub, ignoring ASCII case.
// It looks for sub's first byte in each case with strings.IndexByte (fast
// on long lines) and compares the rest where it is found.
func containsFoldASCII(s, sub string) bool {
	if sub == "" {
		return true
	}
	lower := lowerASCII(sub[0])
	upper := lower
	if 'a' <= lower && lower <= 'z' {
		upper = lower - 'a' + 'A'
	}
	return containsFoldFrom(s, sub, lower) || (upper != lower && containsFoldFrom(s, sub, upper))
}

// containsFoldFrom: containsFoldASCII for occurrences starting with the
// byte first.
func containsFoldFrom(s, sub string, first byte) bool {
	last := len(s) - len(sub) // the last index sub can start at
	for i := 0; i <= last; i++ {
		j := strings.IndexByte(s[i:last+1], first)
		if j < 0 {
			return false
		}
		i += j
		if equalFoldASCII(s[i+1:i+len(sub)], sub[1:]) {
			return true
		}
	}
	return false
}

// equalFoldASCII compares a and b, of one length, ignoring ASCII case.
func equalFoldASCII(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if lowerASCII(a[i]) != lowerASCII(b[i]) {
			return false
		}
	}
	return true
}

// looseNameEqual reports whether raw, percent-decoded, equals name
// ignoring ASCII case: how the loosest common cookie parsers compare.
func looseNameEqual(raw, name string) bool {
	j := 0
	for i := 0; i < len(raw); {
		c := raw[i]
		if c == '%' && i+2 < len(raw) && isHex(raw[i+1]) && isHex(raw[i+2]) {
			c = unhex(raw[i+1])<<4 | unhex(raw[i+2])
			i += 3
		} else {
			i++
		}
		if j == len(name) || lowerASCII(c) != lowerASCII(name[j]) {
			return false
		}
		j++
	}
	return j == len(name)
}

func lowerASCII(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

// KeyCookies returns the names of the cookies the rule adds to the key
// (nil when none), shared: callers must not modify it.
func (r *CompiledRule) KeyCookies() []string { return r.cookies }
