package tierconfig

import (
	"net/http"
	"net/textproto"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/originview"
)

// Compiled is a validated config ready for the request path: rules
// compiled, per-rule caching policy precomputed. It is immutable and safe
// for concurrent use. Settings that are not per rule (HitForMissTTL,
// coalescing, timeouts, L2) are read from Config.
type Compiled struct {
	// Config is the config with defaults filled in; Hash is its Hash().
	Config Config
	Hash   string
	// Default is the rule applied when no rule matches (no key shaping,
	// tier defaults).
	Default *CompiledRule
	// StrictHeaders is true when fills forward only StrictAllow (plus keyed
	// headers); StrictAllow holds canonical names.
	StrictHeaders bool
	StrictAllow   []string
	// StripTargeted holds the canonical names of the targeted
	// cache-control fields removed from every response to a client
	// (defaults.targetedCacheControl.strip); nil when nothing is removed.
	StripTargeted []string
	// CacheStatus: responses carry Cache-Status (defaults.cacheStatus).
	CacheStatus bool
	rules       []*CompiledRule
	// Coding is defaults.contentCoding (coding.go).
	Coding CodingCompiled
	// ignoreCookies: defaults.ignoreCookies (StripIgnoredCookies).
	ignoreCookies cookieIgnore
}

// CacheStatusName is the cache's name in its Cache-Status members (RFC
// 9211).
const CacheStatusName = "tiercache"

// CompiledRule is one rule ready for the request path.
type CompiledRule struct {
	Name   string
	Bypass bool
	// Policy is the httpcache policy for responses under this rule.
	Policy httpcache.Policy
	// Key is how the rule shapes its requests' cache keys (cacheKey).
	Key cachekey.Shape
	// HitStatus builds the Cache-Status members of this rule's hits
	// (detail = Name) without allocating for each.
	HitStatus *httpcache.HitMembers

	match matcher
	hosts hostMatcher // match.hosts; empty: every host
	conds []condition // header and cookie conditions; bypass rules only
}

// matcher is a compiled Match.
type matcher struct {
	kind    matchKind
	literal string         // path or prefix
	re      *regexp.Regexp // regex
}

type matchKind uint8

const (
	matchNone matchKind = iota // the default rule: matched by Match's fallback only
	matchPath
	matchPrefix
	matchRegex
)

func (m *matcher) matches(path string) bool {
	switch m.kind {
	case matchPath:
		return path == m.literal
	case matchPrefix:
		return strings.HasPrefix(path, m.literal)
	case matchRegex:
		return m.re.MatchString(path)
	}
	return false
}

// Compile fills defaults into c, validates it and compiles it.
func Compile(c Config) (*Compiled, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	d := c.Defaults
	base := httpcache.Policy{
		AllowSetCookie:       d.AllowSetCookie,
		FallbackTTL:          d.FallbackTTL.Std(),
		NegativeTTL:          d.NegativeTTL.Std(),
		HeuristicFraction:    d.HeuristicFraction,
		HeuristicMax:         d.HeuristicMaxTTL.Std(),
		StaleWhileRevalidate: d.StaleWhileRevalidate.Std(),
		StaleIfError:         d.StaleIfError.Std(),
		TargetedFields:       canonicalTargeted(d),
		StorePOST:            d.StorePostResponses,
		StaleIfUnreachable:   d.StaleIfUnreachableWindow(),
		Vary:                 httpcache.VaryOptions{NormalizeAcceptLanguage: d.NormalizeAcceptLanguage},
		StatusTTLs:           statusLifetimes(d.StatusTTLs),
	}
	out := &Compiled{
		Config:  c,
		Hash:    c.Hash(),
		Default: &CompiledRule{Name: defaultRuleName, Policy: base, HitStatus: httpcache.NewHitMembers(CacheStatusName, defaultRuleName)},
		rules:   make([]*CompiledRule, 0, len(c.Rules)),
	}
	out.CacheStatus = d.CacheStatusOn()
	out.Coding = compileCoding(d.ContentCoding)
	out.ignoreCookies = compileCookieIgnore(c)
	if d.StripTargeted() {
		out.StripTargeted = base.TargetedFields
	}
	if c.RequestHeaders.Mode == RequestHeadersStrict {
		out.StrictHeaders = true
		for _, h := range c.RequestHeaders.Allow {
			out.StrictAllow = append(out.StrictAllow, textproto.CanonicalMIMEHeaderKey(h))
		}
	}
	underscored := c.RequestHeaders.AllowUnderscoredNames
	if len(underscored) > 0 {
		// The names a tier lets through spelt with '_' or '.' are keyed
		// under every rule: the origin may read them, and the sidecar
		// cannot tell which dashed header each one is to it.
		out.Default.Key = cachekey.NewShape(nil, nil, false, underscored, nil)
	}
	for _, r := range c.Rules {
		cr, err := compileRule(r, base, underscored)
		if err != nil { // Validate compiled the regex already
			return nil, err
		}
		out.rules = append(out.rules, cr)
	}
	return out, nil
}

func compileRule(r Rule, base httpcache.Policy, underscored []string) (*CompiledRule, error) {
	p := base
	p.ForceTTL = r.TTL.Std()
	p.ForceTTLWithCredentials = r.TTLWithCredentials
	p.MaxTTL = r.MaxTTL.Std()
	if r.StaleWhileRevalidate != nil {
		p.StaleWhileRevalidate = r.StaleWhileRevalidate.Std()
	}
	if r.StaleIfError != nil {
		p.StaleIfError = r.StaleIfError.Std()
	}
	if len(r.StatusTTLs) > 0 {
		p.StatusTTLs = statusLifetimes(r.StatusTTLs)
	}
	cr := &CompiledRule{Name: r.Name, Bypass: r.Bypass, Policy: p, HitStatus: httpcache.NewHitMembers(CacheStatusName, r.Name),
		hosts: compileHosts(r.Match.Hosts)}
	switch {
	case r.Match.Path != "":
		cr.match = matcher{kind: matchPath, literal: r.Match.Path}
	case r.Match.PathPrefix != "":
		cr.match = matcher{kind: matchPrefix, literal: r.Match.PathPrefix}
	default:
		re, err := regexp.Compile(r.Match.Regex)
		if err != nil {
			return nil, err
		}
		cr.match = matcher{kind: matchRegex, re: re}
	}
	conds, err := compileConditions(r.Match)
	if err != nil {
		return nil, err
	}
	cr.conds = conds
	k := r.CacheKey
	headers := k.Headers
	for _, h := range underscored {
		if !slices.ContainsFunc(headers, func(k string) bool { return strings.EqualFold(k, h) }) {
			headers = append(slices.Clip(headers), h)
		}
	}
	cr.Key = cachekey.NewShape(k.QueryInclude, k.QueryExclude, k.SortQuery, headers, k.Cookies)
	return cr, nil
}

// Match returns the first rule that matches the request: its host
// condition holds for host (the request's Host, hosts.go), its path
// condition for path and, on a bypass rule, its header and cookie
// conditions for the request header h; c.Default when none does.
// path is one reading of the request's path, which Match cleans
// (originview.CleanPath) before matching. h is the request's header as
// the origin will receive it (nil for none). It does not allocate for a
// path that needs no cleaning. The request path uses MatchRequest, which
// consults every reading of the path as received.
func (c *Compiled) Match(host, path string, h http.Header) *CompiledRule {
	if len(c.rules) == 0 {
		return c.Default
	}
	return c.MatchReading(host, originview.CleanPath(path), h)
}

// MatchRequest returns the rule a request selects, given its host
// (net/http's Request.Host: what the key holds), its path as the
// origin receives it (escapedPath: net/url's URL.EscapedPath) and its
// header as the origin will receive it, and whether every reading of that
// path (originview.Readings: raw, decoded, cleaned, decoded twice)
// selects that same rule. When they disagree, some origin routes the
// request to a resource other than the one the rule was written for: the
// request must neither be served from nor stored into the cache, and the
// rule returned (the decoded, cleaned reading's) only names it in metrics
// and logs.
// A path with one reading costs one scan and no allocation.
func (c *Compiled) MatchRequest(host, escapedPath string, h http.Header) (rule *CompiledRule, agreed bool) {
	if len(c.rules) == 0 {
		return c.Default, true
	}
	if originview.Canonical(escapedPath) {
		return c.MatchReading(host, escapedPath, h), true
	}
	ps := originview.Readings(escapedPath)
	rule = c.MatchReading(host, ps.At(0), h)
	for i := 1; i < ps.Len(); i++ {
		if c.MatchReading(host, ps.At(i), h) != rule {
			// Named after the decoded, cleaned reading, as most origins
			// read a path (/%61pi/cart counts under the rule for /api/).
			decoded := escapedPath
			if u, err := url.PathUnescape(escapedPath); err == nil {
				decoded = u
			}
			return c.Match(host, decoded, h), false
		}
	}
	return rule, true
}

// MatchReading returns the first rule that matches host, path, one
// reading of a request path taken as it is (not cleaned), and h.
func (c *Compiled) MatchReading(host, path string, h http.Header) *CompiledRule {
	for _, r := range c.rules {
		if r.match.matches(path) && r.hosts.matches(host) && (len(r.conds) == 0 || holdAll(r.conds, h)) {
			return r
		}
	}
	return c.Default
}

// MatchStored returns the rule under which the responses stored for host
// and path were stored, whatever the requests that filled them sent: the
// first rule without header or cookie conditions whose host and path
// conditions hold, or
// c.Default. Rules with such conditions bypass the cache, so they never
// store: a request either meets them and stores nothing, or goes on to the
// rules after them. Purges use it to find a URL's entries by the URL
// alone.
func (c *Compiled) MatchStored(host, path string) *CompiledRule {
	if len(c.rules) == 0 {
		return c.Default
	}
	path = originview.CleanPath(path)
	for _, r := range c.rules {
		if len(r.conds) == 0 && r.match.matches(path) && r.hosts.matches(host) {
			return r
		}
	}
	return c.Default
}

// StoredRule returns the rule a URL's stored responses were stored
// under, given its host and its path as received (escapedPath): like the proxy, it
// matches rules on the decoded, cleaned path (originview.CleanPath), and passes over
// rules with header or cookie conditions (MatchStored). Purges key the
// URL under its Key.
func (c *Compiled) StoredRule(host, escapedPath string) *CompiledRule {
	path := escapedPath
	if u, err := url.PathUnescape(escapedPath); err == nil {
		path = u
	}
	return c.MatchStored(host, path)
}

// Rules returns the compiled rules in match order (not including Default).
func (c *Compiled) Rules() []*CompiledRule {
	return append([]*CompiledRule(nil), c.rules...)
}
