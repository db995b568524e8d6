package kubectlplugin

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/operator/render"
	"github.com/tiercache/tiercache/internal/originview"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

func (r *runner) explainCommand() *cobra.Command {
	var headers []string
	var output *string
	cmd := &cobra.Command{
		Use:   "explain TIER URL",
		Short: "Which rule a URL falls under, what its cache key is made of, which lifetimes apply",
		Long: `explain renders the CacheTier's spec as its sidecars get it and runs the sidecar's
own rule matching and key building on a GET of URL:

  - the rules in order and the one that matches (first match wins; "default" when
    none does), on the decoded path cleaned as the sidecar cleans it, and the
    header and cookie conditions of bypass rules on the request's -H headers,
    each met or not;
  - whether the request bypasses the cache;
  - the cache key: scheme, host, the path as received, the query as the rule shapes
    it (parameters kept or dropped, sorted), the request headers and cookies the
    rule adds; the response's Vary then selects a variant;
  - the lifetimes: the rule's ttl and maxTTL, stale windows, and the tier's fallback,
    negative and heuristic lifetimes for responses without explicit freshness.

URL is absolute (https://shop.example/a?b=c) or origin-form (/a?b=c; give the host
with -H 'Host: ...'). -H adds request headers (cookies as -H 'Cookie: a=b').`,
		Example: `  kubectl tiercache explain web -n shop 'https://shop.example/static/app.css?v=3&utm_source=x'
  kubectl tiercache explain web -n shop /api/cart -H 'Cookie: session=abc' -H 'Accept-Language: fr'`,
		Args: exactArgs("TIER", "URL"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(*output); err != nil {
				return err
			}
			req, err := explainRequest(args[1], headers)
			if err != nil {
				return err
			}
			k, err := r.cluster()
			if err != nil {
				return err
			}
			tier, err := k.tier(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			e, err := explainTier(tier, req)
			if err != nil {
				return err
			}
			e.URL = args[1]
			return printExplanation(r.streams.Out, e, *output)
		},
	}
	cmd.Flags().StringArrayVarP(&headers, "header", "H", nil, `a request header, "Name: value"; repeatable`)
	output = outputFlag(cmd)
	return cmd
}

// explainRequest builds the GET request explain reasons about, as the
// sidecar would receive it.
func explainRequest(raw string, headers []string) (*http.Request, error) {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return nil, usagef("URL: %v", err)
	case u.Scheme == "" && u.Host == "" && strings.HasPrefix(raw, "/"):
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, usagef("URL: must be absolute (https://host/path?query) or origin-form (/path?query) (got %q)", raw)
	case u.Host == "":
		return nil, usagef("URL: absolute URL without a host (got %q)", raw)
	}
	if u.Path == "" {
		u.Path = "/"
	}
	u.Fragment, u.RawFragment = "", ""
	req := &http.Request{Method: http.MethodGet, URL: u, Host: u.Host, Header: http.Header{}}
	for _, h := range headers {
		name, value, ok := strings.Cut(h, ":")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || !validHeaderName(name) {
			return nil, usagef(`--header: must be "Name: value" with a header name of letters, digits and !#$%%&'*+-.^_|~ (got %q)`, h)
		}
		if strings.ContainsAny(value, "\r\n\x00") {
			return nil, usagef("--header %s: the value holds a line break or NUL", name)
		}
		if strings.EqualFold(name, "Host") {
			// As net/http's server does: Host is the request's, not a
			// header.
			req.Host = value
			continue
		}
		req.Header.Add(name, value)
	}
	return req, nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return true
}

// explanation is the output of explain.
type explanation struct {
	Tier string `json:"tier"`
	URL  string `json:"url"`
	// MatchedPath is the path the rules see: decoded and cleaned
	// (originview.CleanPath).
	MatchedPath string `json:"matchedPath"`
	// Rules are the tier's rules in order, with whether each matches.
	Rules []ruleCheck `json:"rules"`
	// Rule is the rule that applies: the first match, or "default".
	Rule      string    `json:"rule"`
	Bypass    bool      `json:"bypass"`
	Why       string    `json:"bypassReason,omitempty"`
	Key       keyShape  `json:"key"`
	Lifetimes lifetimes `json:"lifetimes"`
	// Notes are what else bears on this request's caching.
	Notes []string `json:"notes,omitempty"`
}

type ruleCheck struct {
	Name string `json:"name"`
	// Match describes the path condition, PathMatches whether it holds.
	Match       string `json:"match"`
	PathMatches bool   `json:"pathMatches"`
	// Conditions are the rule's header and cookie conditions (bypass
	// rules only), evaluated on the request.
	Conditions []conditionCheck `json:"conditions,omitempty"`
	// Matches: the path condition and every other condition hold.
	Matches bool `json:"matches"`
}

// conditionCheck is one header or cookie condition of a rule.
type conditionCheck struct {
	// Field is its place in the spec: "match.cookies[0]".
	Field string `json:"field"`
	// Condition says what it tests: "cookie session present".
	Condition string `json:"condition"`
	Met       bool   `json:"met"`
	// Ambiguous: met because origins may read the request's field or
	// cookie differently from the sidecar.
	Ambiguous bool `json:"ambiguous,omitempty"`
}

// keyShape is what the cache key of the request is made of.
type keyShape struct {
	// Primary is the primary key as the sidecar stores it.
	Primary string `json:"primary"`
	Scheme  string `json:"scheme"`
	// Host is the normalized host; empty for an origin-form URL without
	// -H Host.
	Host string `json:"host"`
	// Path is keyed as received (not cleaned).
	Path string `json:"path"`
	// Query is the query as received, KeyedQuery as the key holds it.
	Query      string   `json:"query,omitempty"`
	KeyedQuery string   `json:"keyedQuery,omitempty"`
	Include    []string `json:"queryInclude,omitempty"`
	Exclude    []string `json:"queryExclude,omitempty"`
	Sorted     bool     `json:"sortQuery,omitempty"`
	// Headers and Cookies are the request's values of the ones the rule
	// adds to the key (they select a variant behind the primary key).
	Headers []keyPart `json:"headers,omitempty"`
	Cookies []keyPart `json:"cookies,omitempty"`
}

type keyPart struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Absent bool   `json:"absent,omitempty"`
}

// lifetimes are the rule's caching policy (httpcache.Policy). Durations
// are Go duration strings; empty means not set.
type lifetimes struct {
	TTL                  string `json:"ttl,omitempty"`
	TTLWithCredentials   bool   `json:"ttlWithCredentials,omitempty"`
	MaxTTL               string `json:"maxTTL,omitempty"`
	StaleWhileRevalidate string `json:"staleWhileRevalidate,omitempty"`
	StaleIfError         string `json:"staleIfError,omitempty"`
	FallbackTTL          string `json:"fallbackTTL,omitempty"`
	NegativeTTL          string `json:"negativeTTL,omitempty"`
	// StatusTTLs are the lifetimes by status (the rule's, else the
	// tier's): status code → duration.
	StatusTTLs       map[string]string `json:"statusTTLs,omitempty"`
	HeuristicPercent float64           `json:"heuristicPercent,omitempty"`
	HeuristicMaxTTL  string            `json:"heuristicMaxTTL,omitempty"`
	AllowSetCookie   bool              `json:"allowSetCookie,omitempty"`
	// TargetedFields are the targeted cache-control fields (RFC 9213)
	// that decide instead of Cache-Control when a response carries one,
	// as the tier names them (the policy holds them canonicalized).
	TargetedFields []string `json:"targetedFields,omitempty"`
	// From says where ttl, maxTTL and the stale windows come from: the
	// rule or the tier's defaults.
	From map[string]string `json:"from,omitempty"`
}

// explainTier explains req under the tier's spec, rendered as its sidecars
// get it (render.Redacted: no Secret is read) and compiled by the
// sidecar's own code.
func explainTier(tier *v1alpha1.CacheTier, req *http.Request) (*explanation, error) {
	cfg, err := render.Redacted(tier)
	if err != nil {
		var msgs []string
		for _, fe := range render.FieldErrors(err) {
			msgs = append(msgs, fe.Error())
		}
		return nil, fmt.Errorf("CacheTier %s/%s does not render to a config its sidecars accept (they keep their last valid one): %s",
			tier.Namespace, tier.Name, strings.Join(msgs, "; "))
	}
	e, err := explain(cfg, req)
	if err != nil {
		return nil, err
	}
	e.Tier = tier.Namespace + "/" + tier.Name
	return e, nil
}

// explain runs the sidecar's matching and key building on req under cfg:
// what proxy.serveCacheable and its key buffer do before the lookup.
func explain(cfg tierconfig.Config, req *http.Request) (*explanation, error) {
	c, err := tierconfig.Compile(cfg)
	if err != nil {
		return nil, err
	}
	e := &explanation{MatchedPath: originview.CleanPath(req.URL.Path)}
	for i, cr := range c.Rules() {
		// Each rule's conditions on their own; the first rule whose
		// conditions all hold is the one Match picks.
		r := c.Config.Rules[i]
		check := ruleCheck{Name: r.Name, Match: describeMatch(r.Match), PathMatches: cr.MatchesPath(req.URL.Path)}
		check.Matches = check.PathMatches && cr.MatchesHost(req.Host)
		descs := describeConditions(r.Match)
		for j, cc := range cr.CheckConditions(req.Header) {
			check.Conditions = append(check.Conditions, conditionCheck{Field: cc.Field, Condition: descs[j], Met: cc.Met, Ambiguous: cc.Ambiguous})
			check.Matches = check.Matches && cc.Met
		}
		e.Rules = append(e.Rules, check)
	}
	rule, agreed := c.MatchRequest(req.Host, req.URL.EscapedPath(), req.Header)
	e.Rule = rule.Name
	var conf *tierconfig.Rule
	for i := range c.Config.Rules {
		if c.Config.Rules[i].Name == rule.Name {
			conf = &c.Config.Rules[i]
		}
	}

	k := &e.Key
	k.Scheme = cachekey.Scheme(req.Header.Get("X-Forwarded-Proto"), req.URL.Scheme == "https")
	if req.Header.Get("X-Forwarded-Proto") == "" && req.URL.Scheme == "https" {
		e.Notes = append(e.Notes, "the scheme is https only if the sidecar gets X-Forwarded-Proto: https (an ingress that terminates TLS sets it); without it the key has http")
	}
	if req.Host != "" {
		k.Host = cachekey.Host(req.Host, k.Scheme)
	}
	k.Path = req.URL.EscapedPath()
	k.Query = req.URL.RawQuery
	target := string(cachekey.AppendTarget(nil, &rule.Key, k.Path, k.Query))
	if _, q, ok := strings.Cut(target, "?"); ok {
		k.KeyedQuery = q
	}
	host := k.Host
	if host == "" {
		host = "<host>"
		e.Notes = append(e.Notes, "an origin-form URL: the key holds the request's Host (give it with -H 'Host: ...')")
	}
	k.Primary = string(cachekey.AppendPrimary(nil, k.Scheme, host, target))
	if conf != nil {
		k.Include, k.Exclude, k.Sorted = conf.CacheKey.QueryInclude, conf.CacheKey.QueryExclude, conf.CacheKey.SortQuery
	}
	k.Headers, k.Cookies = keyExtras(rule.Key.AppendExtras(nil, req))

	switch {
	case !agreed:
		ps := originview.Readings(req.URL.EscapedPath())
		var rs []string
		for i := 0; i < ps.Len(); i++ {
			rs = append(rs, fmt.Sprintf("%q: %s", ps.At(i), c.MatchReading(req.Host, ps.At(i), req.Header).Name))
		}
		e.Bypass, e.Why = true, fmt.Sprintf("origins read this path in ways that select different rules (%s): passed to the origin uncached", strings.Join(rs, ", "))
	case rule.Bypass && rule.HasConditions():
		var held []string
		for _, r := range e.Rules {
			if r.Name != rule.Name {
				continue
			}
			for _, cc := range r.Conditions {
				held = append(held, cc.Condition)
			}
		}
		e.Bypass, e.Why = true, fmt.Sprintf("rule %s bypasses the cache for this request (%s): it goes to the origin, uncached", rule.Name, strings.Join(held, " and "))
	case rule.Bypass:
		e.Bypass, e.Why = true, fmt.Sprintf("rule %s bypasses the cache: requests go to the origin, uncached", rule.Name)
	case rule.Key.HasExtras() && rule.Key.AmbiguousCookies(req):
		e.Bypass, e.Why = true, "the Cookie header names a keyed cookie so that origins may read another value than the key holds (twice, in another case, percent-encoded or after a comma): passed to the origin uncached"
	}

	p := rule.Policy
	e.Lifetimes = lifetimes{
		TTL: dur(p.ForceTTL), TTLWithCredentials: p.ForceTTLWithCredentials, MaxTTL: dur(p.MaxTTL),
		StaleWhileRevalidate: dur(p.StaleWhileRevalidate), StaleIfError: dur(p.StaleIfError),
		FallbackTTL: dur(p.FallbackTTL), NegativeTTL: dur(p.NegativeTTL),
		HeuristicPercent: p.HeuristicFraction * 100, HeuristicMaxTTL: dur(p.HeuristicMax),
		AllowSetCookie: p.AllowSetCookie, TargetedFields: c.Config.Defaults.TargetedFields(),
		From: map[string]string{"staleWhileRevalidate": "tier", "staleIfError": "tier"},
	}
	for code, d := range p.StatusTTLs {
		if e.Lifetimes.StatusTTLs == nil {
			e.Lifetimes.StatusTTLs = map[string]string{}
		}
		e.Lifetimes.StatusTTLs[strconv.Itoa(code)] = d.String()
	}
	if conf != nil {
		if conf.StaleWhileRevalidate != nil {
			e.Lifetimes.From["staleWhileRevalidate"] = "rule"
		}
		if conf.StaleIfError != nil {
			e.Lifetimes.From["staleIfError"] = "rule"
		}
	}
	// The tier's ignored cookies are removed before the credentials check
	// on a request the cache looks up (defaults.ignoreCookies).
	kept := req.Header
	if !e.Bypass {
		kept = req.Header.Clone()
		if c.StripIgnoredCookies(kept) {
			e.Notes = append(e.Notes, fmt.Sprintf("the tier ignores some of this request's cookies (defaults.ignoreCookies): the origin receives Cookie %q", kept.Get("Cookie")))
		}
	}
	if p.ForceTTL > 0 && !p.ForceTTLWithCredentials && (kept.Get("Authorization") != "" || kept.Get("Cookie") != "") {
		e.Notes = append(e.Notes, fmt.Sprintf("this request carries Authorization or Cookie: rule %s's ttl does not apply to it (ttlWithCredentials is off), the origin's headers decide", rule.Name))
	}
	if req.Header.Get("Authorization") != "" {
		e.Notes = append(e.Notes, "with Authorization a response is stored only when the origin allows it (public, s-maxage or must-revalidate; RFC 9111 §3.5)")
	}
	e.Notes = append(e.Notes, "the origin's Vary names request headers whose values then also select the stored variant; Vary: * is never served from the cache")
	return e, nil
}

// keyExtras reads back the parts cachekey.Shape.AppendExtras
// writes: "\x00h:<name>=<values>" per header, "\x00c:<name>=<value>" or
// "\x00c:<name>\x01" (absent) per cookie.
func keyExtras(b []byte) (headers, cookies []keyPart) {
	for part := range strings.SplitSeq(string(b), "\x00") {
		kind, rest, ok := strings.Cut(part, ":")
		if !ok {
			continue
		}
		var kp keyPart
		if name, absent := strings.CutSuffix(rest, "\x01"); absent && kind == "c" {
			kp = keyPart{Name: name, Absent: true}
		} else {
			kp.Name, kp.Value, _ = strings.Cut(rest, "=")
		}
		switch kind {
		case "h":
			headers = append(headers, kp)
		case "c":
			cookies = append(cookies, kp)
		}
	}
	return headers, cookies
}

// describeConditions describes m's header and cookie conditions, headers
// first, in the order tierconfig.CompiledRule.CheckConditions reports
// them.
func describeConditions(m tierconfig.Match) []string {
	var out []string
	test := func(present, absent bool, exact, prefix, regex string) string {
		switch {
		case present:
			return "present"
		case absent:
			return "absent"
		case exact != "":
			return fmt.Sprintf("exact %q", exact)
		case prefix != "":
			return fmt.Sprintf("prefix %q", prefix)
		}
		return "regex " + regex
	}
	for _, h := range m.Headers {
		out = append(out, "header "+h.Name+" "+test(h.Present, h.Absent, h.Exact, h.Prefix, h.Regex))
	}
	for _, c := range m.Cookies {
		out = append(out, "cookie "+c.Name+" "+test(c.Present, c.Absent, c.Exact, "", c.Regex))
	}
	return out
}

func describeMatch(m tierconfig.Match) string {
	var s string
	switch {
	case m.Path != "":
		s = "path " + m.Path
	case m.PathPrefix != "":
		s = "pathPrefix " + m.PathPrefix
	default:
		s = "regex " + m.Regex
	}
	if len(m.Hosts) > 0 {
		s += " on hosts " + strings.Join(m.Hosts, ", ")
	}
	return s
}

func dur(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func printExplanation(out io.Writer, e *explanation, output string) error {
	if output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(e)
	}
	p := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }
	p("CacheTier %s, GET %s", e.Tier, e.URL)
	p("")
	p("Rules (first match wins), on the path %s:", e.MatchedPath)
	if len(e.Rules) == 0 {
		p("  (the tier has none)")
	}
	first := true
	for i, r := range e.Rules {
		mark := "no match"
		if r.Matches {
			mark = "matches"
			if !first {
				mark = "matches, but an earlier rule wins"
			}
			first = false
		}
		if !r.Matches && r.PathMatches {
			mark = "path matches, a condition does not"
		}
		p("  rules[%d] %-20s %-30s %s", i, r.Name, r.Match, mark)
		for _, c := range r.Conditions {
			state := "not met"
			switch {
			case c.Ambiguous:
				state = "met: origins may read it differently, so it counts"
			case c.Met:
				state = "met"
			}
			p("           and %-45s %s", c.Condition, state)
		}
	}
	p("Rule:    %s", e.Rule)
	if e.Bypass {
		p("Bypass:  yes: %s", e.Why)
	} else {
		p("Bypass:  no")
	}
	k := e.Key
	p("")
	p("Key:     %s", k.Primary)
	p("  scheme   %s", k.Scheme)
	p("  host     %s", orDash(k.Host))
	p("  path     %s (as received)", k.Path)
	switch {
	case k.Query == "":
		p("  query    none")
	case len(k.Include) == 0 && len(k.Exclude) == 0 && !k.Sorted:
		p("  query    %s (as received)", k.Query)
	default:
		var how []string
		if len(k.Include) > 0 {
			how = append(how, "keeps only "+strings.Join(k.Include, ", "))
		}
		if len(k.Exclude) > 0 {
			how = append(how, "drops "+strings.Join(k.Exclude, ", "))
		}
		if k.Sorted {
			how = append(how, "sorted by name")
		}
		p("  query    %s → %q (%s)", k.Query, k.KeyedQuery, strings.Join(how, "; "))
	}
	for _, h := range k.Headers {
		p("  header   %s: %q", h.Name, h.Value)
	}
	for _, c := range k.Cookies {
		if c.Absent {
			p("  cookie   %s: absent", c.Name)
		} else {
			p("  cookie   %s: %q", c.Name, c.Value)
		}
	}
	l := e.Lifetimes
	p("")
	p("Lifetimes:")
	ttl := orDash(l.TTL)
	if l.TTL != "" {
		ttl += " (replaces the origin's freshness"
		if l.TTLWithCredentials {
			ttl += ", also for requests with Authorization or Cookie)"
		} else {
			ttl += "; not for requests with Authorization or Cookie)"
		}
	}
	p("  ttl                   %s", ttl)
	p("  maxTTL                %s", orDash(l.MaxTTL))
	p("  staleWhileRevalidate  %s (%s)", orDash(l.StaleWhileRevalidate), l.From["staleWhileRevalidate"])
	p("  staleIfError          %s (%s)", orDash(l.StaleIfError), l.From["staleIfError"])
	p("  fallbackTTL           %s (tier)", orDash(l.FallbackTTL))
	p("  negativeTTL           %s (tier, 404 and 410)", orDash(l.NegativeTTL))
	if len(l.StatusTTLs) > 0 {
		codes := slices.Sorted(maps.Keys(l.StatusTTLs))
		var parts []string
		for _, c := range codes {
			parts = append(parts, c+" "+l.StatusTTLs[c])
		}
		p("  statusTTLs            %s (without explicit freshness; before negativeTTL and fallbackTTL)", strings.Join(parts, ", "))
	}
	p("  heuristic             %g%% of the age since Last-Modified, at most %s (tier)", l.HeuristicPercent, orDash(l.HeuristicMaxTTL))
	if len(l.TargetedFields) > 0 {
		p("  targeted fields       %s (the first a response carries decides instead of Cache-Control and Expires)", strings.Join(l.TargetedFields, ", "))
	} else {
		p("  targeted fields       none (Cache-Control and Expires decide)")
	}
	if l.AllowSetCookie {
		p("  allowSetCookie        true (responses with Set-Cookie are stored, without it)")
	}
	if len(e.Notes) > 0 {
		p("")
		p("Notes:")
		for _, n := range e.Notes {
			p("  - %s", n)
		}
	}
	return nil
}
