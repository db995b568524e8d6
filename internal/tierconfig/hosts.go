package tierconfig

import (
	"strconv"
	"strings"
)

// Rules per host (Match.Hosts). The host a rule is matched against is the
// request's host as the cache keys it and as the origin receives it
// (outbound sends the keyed host): net/http's Request.Host, which is the
// authority of an absolute-form target ("GET http://a.example/ HTTP/1.1")
// and the Host field otherwise, so a Host field that disagrees with the
// target selects nothing the origin would not see. The port and a
// trailing dot are not compared, and names compare case-insensitively.

// maxMatchHosts bounds match.hosts (the CRD's MaxItems).
const maxMatchHosts = 32

// hostMatcher is a compiled match.hosts: exact names and the suffixes
// (".example.com") of "*.example.com"; empty matches every host.
type hostMatcher struct {
	exact, suffixes []string
}

func compileHosts(hosts []string) hostMatcher {
	var m hostMatcher
	for _, h := range hosts {
		h = strings.ToLower(h)
		if rest, ok := strings.CutPrefix(h, "*"); ok {
			m.suffixes = append(m.suffixes, rest)
		} else {
			m.exact = append(m.exact, h)
		}
	}
	return m
}

func (m *hostMatcher) any() bool { return len(m.exact)+len(m.suffixes) == 0 }

// matches reports whether host (a request's Host: name, optional port)
// is one of m's. It does not allocate.
func (m *hostMatcher) matches(host string) bool {
	if m.any() {
		return true
	}
	name := hostName(host)
	for _, e := range m.exact {
		if strings.EqualFold(name, e) {
			return true
		}
	}
	for _, s := range m.suffixes {
		// "*.example.com" is any name below example.com, at any depth,
		// not example.com itself (nginx's server_name "*.example.com").
		if len(name) > len(s) && strings.EqualFold(name[len(name)-len(s):], s) {
			return true
		}
	}
	return false
}

// hostName is host without its port and trailing dot. An IPv6 literal
// keeps its brackets.
func hostName(host string) string {
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i >= 0 {
			return host[:i+1]
		}
		return host
	}
	if i := strings.LastIndexByte(host, ':'); i >= 0 {
		host = host[:i]
	}
	return strings.TrimSuffix(host, ".")
}

// validateHosts checks match.hosts at field: each a host name (letters,
// digits, '-' in dot-separated labels of at most 63, at most 253 in all)
// or "*." and one, without port or trailing dot, each once.
func validateHosts(p *problems, field string, hosts []string) {
	if len(hosts) > maxMatchHosts {
		p.add(field, "must have at most %d hosts (got %d)", maxMatchHosts, len(hosts))
	}
	for i, h := range hosts {
		at := field + "[" + strconv.Itoa(i) + "]"
		if !validHostPattern(h) {
			p.add(at, "must be a host name (\"shop.example.com\") or \"*.\" and one (\"*.example.com\"), without port (got %q)", h)
			continue
		}
		for j := range i {
			if strings.EqualFold(hosts[j], h) {
				p.add(at, "duplicate of %s[%d] (got %q)", field, j, h)
				break
			}
		}
	}
}

func validHostPattern(h string) bool {
	name := strings.TrimPrefix(h, "*.")
	if name == "" || len(name) > 253 {
		return false
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for k := 0; k < len(label); k++ {
			c := label[k]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) || c == '-') {
				return false
			}
		}
	}
	return true
}

// MatchesHost reports whether the rule's host condition holds for host
// (always, without one).
func (r *CompiledRule) MatchesHost(host string) bool { return r.hosts.matches(host) }
