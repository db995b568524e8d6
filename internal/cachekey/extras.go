package cachekey

import (
	"net/http"
	"strings"
)

// AppendExtras appends the extra key parts of s to dst, in the order
// configured: for each header "\x00h:<lowercase name>=<values joined by
// ','>", for each cookie "\x00c:<name>=<value as received>", or
// "\x00c:<name>\x01" when the request has no such cookie, so that an absent
// cookie and an empty one make different keys. It does not allocate beyond
// growing dst. (Host is not a header here: net/http moves it to req.Host,
// and the key has the host already.)
func (s *Shape) AppendExtras(dst []byte, req *http.Request) []byte {
	for _, h := range s.headers {
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
	for _, name := range s.cookies {
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
// keyed cookies of s in a way origins read differently (ScanCookie), so
// that the key cannot say which value the origin will use and the request
// must not fill or be served from the cache. It does not allocate.
func (s *Shape) AmbiguousCookies(req *http.Request) bool {
	for _, name := range s.cookies {
		if _, _, ambiguous := ScanCookie(req.Header["Cookie"], name); ambiguous {
			return true
		}
	}
	return false
}

// ScanCookie reads the cookie called name from the Cookie field lines:
// its value and whether it is there, as findCookie reads them, and
// whether the lines name it in a way origins read differently:
//   - the cookie more than once (frameworks keep the first or the last);
//   - white space between its name and '=' (some trim names, some not);
//   - a name that is this one only to a looser reader: in another case
//     (ASP.NET Core compares names case-insensitively), percent-encoded
//     (PHP and Rack decode names), with '.', ' ', '+' or '[' for '_' or
//     the other way (PHP reads "session.id" as "session_id"), or before
//     or after a ',' inside a cookie (Rack 2 splits on ',' too).
//
// It stops at the first ambiguity (value and found are then meaningless)
// and does not allocate.
func ScanCookie(lines []string, name string) (value string, found, ambiguous bool) {
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
// to ScanCookie's loosest reading: only a line that holds the name in some
// case and spelling (containsLooseName), or a '%' (a percent-encoded
// name), can. One pass over the bytes, where most requests (no such
// cookie) end.
func mayNameCookie(lines []string, name string) bool {
	for _, line := range lines {
		if strings.IndexByte(line, '%') >= 0 || containsLooseName(line, name) {
			return true
		}
	}
	return false
}

// nameSeparators are the bytes PHP reads as '_' in a cookie name
// (looseNameByte), '_' included.
const nameSeparators = "_. +["

// looseNameByte is one byte of a cookie name as the loosest common
// cookie parsers read it: in lower case (ASP.NET Core compares names
// case-insensitively), and '.', ' ', '+' and '[' as '_' (PHP url-decodes
// a name, '+' to ' ', then turns ' ', '.' and a lone '[' into '_', so
// "session.id" is its $_COOKIE["session_id"]). A '[' with a ']' after it
// makes an array to PHP, not '_': reading it as '_' anyway only ever
// counts one more name as ambiguous, the safe side.
func looseNameByte(c byte) byte {
	switch c {
	case '.', ' ', '+', '[':
		return '_'
	}
	return lowerASCII(c)
}

// containsLooseName reports whether s contains name, each byte compared
// as looseNameByte reads it. It looks for name's first byte in each of its
// spellings (strings.IndexByte, fast on long lines; strings.IndexAny for
// the separators) and compares the rest where it is found. It does not
// allocate.
func containsLooseName(s, name string) bool {
	if name == "" {
		return true
	}
	first := looseNameByte(name[0])
	if first == '_' {
		return containsLooseFrom(s, name, 0, true)
	}
	upper := first
	if 'a' <= first && first <= 'z' {
		upper = first - 'a' + 'A'
	}
	return containsLooseFrom(s, name, first, false) || (upper != first && containsLooseFrom(s, name, upper, false))
}

// containsLooseFrom: containsLooseName for occurrences starting with the
// byte first, or with any of nameSeparators when separator is set.
func containsLooseFrom(s, name string, first byte, separator bool) bool {
	last := len(s) - len(name) // the last index name can start at
	for i := 0; i <= last; i++ {
		var j int
		if separator {
			j = strings.IndexAny(s[i:last+1], nameSeparators)
		} else {
			j = strings.IndexByte(s[i:last+1], first)
		}
		if j < 0 {
			return false
		}
		i += j
		if equalLoose(s[i+1:i+len(name)], name[1:]) {
			return true
		}
	}
	return false
}

// equalLoose compares a and b, of one length, byte by byte as
// looseNameByte reads them.
func equalLoose(a, b string) bool {
	for i := 0; i < len(a); i++ {
		if looseNameByte(a[i]) != looseNameByte(b[i]) {
			return false
		}
	}
	return true
}

// looseNameEqual reports whether raw, percent-decoded, equals name, each
// byte compared as looseNameByte reads it: how the loosest common cookie
// parsers compare.
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
		if j == len(name) || looseNameByte(c) != looseNameByte(name[j]) {
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
