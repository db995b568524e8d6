package tierconfig

import (
	"fmt"
	"net/http"
	"net/textproto"
	"regexp"
	"strconv"
	"strings"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/originview"
)

// Header and cookie conditions (Match.Headers, Match.Cookies) select
// requests by what the client sends. The client chooses that, so they are
// allowed only on bypass rules (validateConditions): a condition can take
// the client's own request past the cache, and nothing else. It cannot
// choose the key, the lifetimes or the rule under which a shared entry is
// stored, so two clients of one URL always store and read the same entry,
// and a purge finds the entries of a URL by its path alone
// (Compiled.MatchStored).
//
// Because meeting a condition only ever bypasses the cache, every doubt
// about what the origin will read resolves to "met": a header or cookie
// that origins read differently from the sidecar (named twice, spelt
// another way, a value some decode) meets the condition. Otherwise a
// client could spell its session cookie so that the sidecar does not see
// it and the origin does, and have its personal page stored for everyone.

// Limits of the conditions (validateConditions).
const (
	maxConditions   = 8    // per list: match.headers, match.cookies
	maxCondNameLen  = 256  // header or cookie name of a condition
	maxCondValueLen = 1024 // exact, prefix
	maxCondRegexLen = 256  // runs on every request the rule's path selects
)

// condition is a compiled HeaderMatch or CookieMatch.
type condition struct {
	cookie bool
	// name is the canonical header name (for the lookup in http.Header
	// without allocating) or the cookie name.
	name  string
	kind  condKind
	value string         // exact or prefix
	re    *regexp.Regexp // regex
}

type condKind uint8

const (
	condPresent condKind = iota + 1
	condAbsent
	condExact
	condPrefix
	condRegex
)

// compileConditions compiles the header and cookie conditions of m,
// headers first, each list in configured order; nil when there are none.
func compileConditions(m Match) ([]condition, error) {
	if len(m.Headers)+len(m.Cookies) == 0 {
		return nil, nil
	}
	out := make([]condition, 0, len(m.Headers)+len(m.Cookies))
	for _, h := range m.Headers {
		c, err := newCondition(false, textproto.CanonicalMIMEHeaderKey(h.Name), h.Present, h.Absent, h.Exact, h.Prefix, h.Regex)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	for _, k := range m.Cookies {
		c, err := newCondition(true, k.Name, k.Present, k.Absent, k.Exact, "", k.Regex)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func newCondition(cookie bool, name string, present, absent bool, exact, prefix, regex string) (condition, error) {
	c := condition{cookie: cookie, name: name}
	switch {
	case present:
		c.kind = condPresent
	case absent:
		c.kind = condAbsent
	case exact != "":
		c.kind, c.value = condExact, exact
	case prefix != "":
		c.kind, c.value = condPrefix, prefix
	default:
		re, err := regexp.Compile(regex)
		if err != nil { // Validate compiled it already
			return c, err
		}
		c.kind, c.re = condRegex, re
	}
	return c, nil
}

// holdAll reports whether every condition holds for the request header
// h. It does not allocate.
func holdAll(conds []condition, h http.Header) bool {
	for i := range conds {
		if met, _ := conds[i].holds(h); !met {
			return false
		}
	}
	return true
}

// holds reports whether the condition holds for h, and whether it holds
// only because the request is ambiguous about the field or cookie.
func (c *condition) holds(h http.Header) (met, ambiguous bool) {
	if c.cookie {
		return c.cookieHolds(h["Cookie"])
	}
	return c.headerHolds(h)
}

func (c *condition) headerHolds(h http.Header) (met, ambiguous bool) {
	vals := h[c.name]
	if len(vals) == 0 {
		if c.kind == condAbsent {
			return true, false
		}
		// CGI-style origins (PHP, Rack, WSGI) read X_Debug and X.Debug as
		// X-Debug.
		if otherSpelling(h, c.name) {
			return true, true
		}
		return false, false
	}
	switch c.kind {
	case condAbsent:
		return false, false
	case condPresent:
		return true, false
	}
	// Several lines: origins read the first, the last or all of them
	// joined.
	if len(vals) > 1 || otherSpelling(h, c.name) {
		return true, true
	}
	return c.valueMatches(vals[0]), false
}

func (c *condition) cookieHolds(lines []string) (met, ambiguous bool) {
	v, found, amb := cachekey.ScanCookie(lines, c.name)
	switch {
	case amb:
		return true, true
	case c.kind == condPresent:
		return found, false
	case c.kind == condAbsent:
		return !found, false
	case !found:
		return false, false
	case strings.ContainsAny(v, "%\"\\"):
		// PHP percent-decodes cookie values, net/http and others unquote
		// them: the origin may read another value than this one.
		return true, true
	}
	return c.valueMatches(v), false
}

func (c *condition) valueMatches(v string) bool {
	switch c.kind {
	case condExact:
		return v == c.value
	case condPrefix:
		return strings.HasPrefix(v, c.value)
	case condRegex:
		return c.re.MatchString(v)
	}
	return false
}

// otherSpelling reports whether h has a field that is canonical's under
// another spelling: '_' or '.' for '-' or the other way, in any case
// (CGI gateways such as Apache's turn every
// '-' and '.' into '_'). It does not allocate.
func otherSpelling(h http.Header, canonical string) bool {
	if !strings.ContainsAny(canonical, "-_.") {
		return false // case alone: canonicalization made them one key
	}
	for k := range h {
		if len(k) == len(canonical) && k != canonical && originview.SameName(k, canonical) {
			return true
		}
	}
	return false
}

// ConditionCheck is one header or cookie condition of a rule evaluated on
// a request, for explaining a match.
type ConditionCheck struct {
	// Field is the condition's place in the rule: "match.headers[0]",
	// "match.cookies[1]".
	Field string
	// Met says whether the condition holds.
	Met bool
	// Ambiguous says it holds because origins may read the request's
	// field or cookie differently from the sidecar (named twice, spelt
	// another way, a value some decode).
	Ambiguous bool
}

// CheckConditions evaluates each of the rule's header and cookie
// conditions on h, headers first, in configured order (nil when the rule
// has none). For explaining; the request path uses Compiled.Match.
func (r *CompiledRule) CheckConditions(h http.Header) []ConditionCheck {
	var out []ConditionCheck
	headers, cookies := 0, 0
	for i := range r.conds {
		c := &r.conds[i]
		var field string
		if c.cookie {
			field = "match.cookies[" + strconv.Itoa(cookies) + "]"
			cookies++
		} else {
			field = "match.headers[" + strconv.Itoa(headers) + "]"
			headers++
		}
		met, amb := c.holds(h)
		out = append(out, ConditionCheck{Field: field, Met: met, Ambiguous: amb})
	}
	return out
}

// MatchesPath reports whether the rule's path condition holds for the
// decoded request path, cleaned as Match cleans it. For explaining.
func (r *CompiledRule) MatchesPath(path string) bool {
	return r.match.matches(originview.CleanPath(path))
}

// HasConditions reports whether the rule has header or cookie conditions.
func (r *CompiledRule) HasConditions() bool { return len(r.conds) > 0 }

// validateConditions checks rule r's header and cookie conditions; at is
// "rules[i]".
func validateConditions(p *problems, at string, r Rule) {
	m := r.Match
	if len(m.Headers)+len(m.Cookies) > 0 && !r.Bypass {
		field := at + ".match.headers"
		if len(m.Headers) == 0 {
			field = at + ".match.cookies"
		}
		p.add(field, "allowed only on a bypass rule (set %s.bypass: true): a client chooses its own headers and cookies, so they may take its request past the cache but never choose how a shared entry is stored or served", at)
	}
	if len(m.Headers) > maxConditions {
		p.add(at+".match.headers", "must have at most %d conditions (got %d)", maxConditions, len(m.Headers))
	}
	if len(m.Cookies) > maxConditions {
		p.add(at+".match.cookies", "must have at most %d conditions (got %d)", maxConditions, len(m.Cookies))
	}
	seen := make(map[string]int, len(m.Headers))
	for i, h := range m.Headers {
		f := fmt.Sprintf("%s.match.headers[%d]", at, i)
		lower := strings.ToLower(h.Name)
		switch {
		case !isToken(h.Name) || len(h.Name) > maxCondNameLen:
			p.add(f+".name", "not a valid HTTP header name of at most %d characters (got %q)", maxCondNameLen, h.Name)
		case isHopByHop(lower):
			p.add(f+".name", "a hop-by-hop header describes the connection and never reaches the origin (got %q)", h.Name)
		case lower == "host":
			p.add(f+".name", "the request's host is not a header field to the sidecar: give each host its own tier or rules on paths (got %q)", h.Name)
		default:
			if j, dup := seen[lower]; dup {
				p.add(f+".name", "duplicate of %s.match.headers[%d].name (names are case-insensitive): put both conditions in one regex (got %q)", at, j, h.Name)
			} else {
				seen[lower] = i
			}
		}
		checkCondition(p, f, h.Present, h.Absent, h.Exact, h.Prefix, h.Regex, false)
	}
	clear(seen)
	for i, c := range m.Cookies {
		f := fmt.Sprintf("%s.match.cookies[%d]", at, i)
		switch {
		case !isToken(c.Name) || len(c.Name) > maxCondNameLen:
			p.add(f+".name", "not a valid cookie name of at most %d characters (got %q)", maxCondNameLen, c.Name)
		default:
			if j, dup := seen[c.Name]; dup {
				p.add(f+".name", "duplicate of %s.match.cookies[%d].name: put both conditions in one regex (got %q)", at, j, c.Name)
			} else {
				seen[c.Name] = i
			}
		}
		checkCondition(p, f, c.Present, c.Absent, c.Exact, "", c.Regex, true)
	}
}

// checkCondition checks that exactly one test is set and that it is
// well-formed; at is the condition's path.
func checkCondition(p *problems, at string, present, absent bool, exact, prefix, regex string, cookie bool) {
	var set []string
	if present {
		set = append(set, "present")
	}
	if absent {
		set = append(set, "absent")
	}
	for _, v := range []struct{ field, value string }{{"exact", exact}, {"prefix", prefix}} {
		if v.value == "" {
			continue
		}
		set = append(set, v.field)
		switch {
		case len(v.value) > maxCondValueLen:
			p.add(at+"."+v.field, "must be at most %d bytes (got %d)", maxCondValueLen, len(v.value))
		case cookie && !validCookieValue(v.value):
			p.add(at+"."+v.field, "a cookie value as received: visible ASCII without ';', ',', '\"', '\\', '%%' or spaces, which origins split or decode differently (got %q)", v.value)
		case !cookie && !validFieldValue(v.value):
			p.add(at+"."+v.field, "not a header field value as the sidecar reads it: no control characters, no leading or trailing white space (got %q)", v.value)
		}
	}
	if regex != "" {
		set = append(set, "regex")
		if len(regex) > maxCondRegexLen {
			p.add(at+".regex", "must be at most %d bytes (got %d)", maxCondRegexLen, len(regex))
		} else if _, err := regexp.Compile(regex); err != nil {
			p.add(at+".regex", "not a valid RE2 regular expression: %v", err)
		}
	}
	if len(set) != 1 {
		got := "none"
		if len(set) > 0 {
			got = strings.Join(set, " and ")
		}
		want := "present, absent, exact, prefix, regex"
		if cookie {
			want = "present, absent, exact, regex"
		}
		p.add(at, "exactly one of %s must be set (got %s)", want, got)
	}
}

// validFieldValue reports whether v can be a header field value as
// net/http hands it over: no control characters but tab, and no white
// space at either end (it trims them).
func validFieldValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return false
		}
	}
	return strings.Trim(v, " \t") == v
}

// validCookieValue reports whether v is a cookie value every origin reads
// alike (RFC 6265 cookie-octets without '%' and '\\'): an exact condition
// on a value that some origins decode could never be relied on, since
// such values count as met anyway (condition.cookieHolds).
func validCookieValue(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c <= 0x20 || c >= 0x7f || strings.IndexByte(";,\"\\%", c) >= 0 {
			return false
		}
	}
	return true
}
