package tierconfig

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tiercache/tiercache/internal/originview"
	"github.com/tiercache/tiercache/internal/store/l1"
)

// Validation limits.
const (
	maxDuration = Duration(8760 * time.Hour)
	// maxStaleIfUnreachable bounds defaults.staleIfUnreachable: L1's life
	// window (a day) is the longest any entry lives on a replica.
	maxStaleIfUnreachable = Duration(l1.LifeWindow)
	maxOriginTimeout      = Duration(10 * time.Minute)
	maxOriginIdle         = Duration(time.Hour)
	maxRequestBuffer      = 64 * Mi
	maxCoalesceWait       = Duration(5 * time.Minute)
	maxRules              = 64
	maxRuleName           = 63
	maxRegexLen           = 1024
	maxAllowHeaders       = 64
	minPurgeToken         = 16
	maxSecretFiles        = 16
	maxSecretVersion      = 512
	defaultRuleName       = "default"
	minBodyThreshold      = 1 * Ki
	maxL2BodySize         = 512 * Mi
)

// FieldError is one validation or decoding problem: the JSON path of the
// field ("rules[2].match.regex") and what is wrong with it. Validate and
// Parse join them with errors.Join; FieldErrors takes them apart again, for
// example to map them onto a Kubernetes admission response.
type FieldError struct {
	Field   string
	Message string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Message }

// FieldErrors returns the FieldErrors inside err, in order, looking through
// errors.Join and %w wrapping.
func FieldErrors(err error) []*FieldError {
	var out []*FieldError
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *FieldError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return out
}

// problems collects FieldErrors.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, &FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
}

// Validate checks every field of c as it is (it does not fill defaults:
// call WithDefaults first for a partial config, as Parse and Compile do)
// and returns every problem joined, each a *FieldError naming its JSON
// path, e.g. "l1.maxEntrySize: must be <= l1.maxSize/l1.shards = 1Mi (got
// 2Mi)" or "rules[2].match: exactly one of path, pathPrefix, regex must be
// set (got none)". It returns nil for a valid config.
func (c Config) Validate() error {
	var p problems
	c.L1.validate(&p)
	if len(c.L2.Addresses) > 0 {
		c.L2.validate(&p)
	}
	c.validateBodyStore(&p)
	c.Origin.validate(&p)
	c.Defaults.validate(&p)
	validateRules(&p, c.Rules)
	c.validateIgnoreCookies(&p)
	c.Coalescing.validate(&p)
	c.Purge.validate(&p)
	c.RequestHeaders.validate(&p)
	c.AccessLog.validate(&p)
	validateSecretVersions(&p, c.SecretVersions)
	return errors.Join(p...)
}

// validate reports the problems l1.Config.Validate finds, which holds
// L1's limits (the shard count, bigcache's bounds per shard, the smallest
// size): one check for the sidecar's store and for the config.
func (l L1) validate(p *problems) {
	for _, e := range l1FieldErrors(l.CacheConfig().Validate()) {
		p.add(e.Field, "%s", e.Message)
	}
}

// l1FieldErrors returns the *l1.FieldErrors joined in err, in order.
func l1FieldErrors(err error) []*l1.FieldError {
	var out []*l1.FieldError
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if fe, ok := e.(*l1.FieldError); ok {
				out = append(out, fe)
			}
		}
	}
	return out
}

func (l L2) validate(p *problems) {
	switch l.Mode {
	case "", L2Standalone:
		if len(l.Addresses) != 1 {
			p.add("l2.addresses", "standalone mode takes exactly one address (got %d)", len(l.Addresses))
		}
	case L2Sentinel, L2Cluster:
	default:
		p.add("l2.mode", "must be one of %s, %s, %s (got %q)", L2Standalone, L2Sentinel, L2Cluster, l.Mode)
	}
	switch {
	case l.Mode == L2Sentinel && l.MasterName == "":
		p.add("l2.masterName", "required when l2.mode is %s", L2Sentinel)
	case l.Mode != L2Sentinel && l.MasterName != "":
		p.add("l2.masterName", "allowed only when l2.mode is %s (got %q)", L2Sentinel, l.MasterName)
	}
	for i, a := range l.Addresses {
		if !validHostPort(a) {
			p.add(fmt.Sprintf("l2.addresses[%d]", i), "must be host:port with a non-empty host and a numeric port in 1-65535 (got %q)", a)
		}
	}
	if l.Timeout == 0 {
		p.add("l2.timeout", "must be > 0 (got %s)", l.Timeout)
	} else {
		checkDuration(p, "l2.timeout", l.Timeout)
	}
	if strings.IndexFunc(l.KeyPrefix, unicode.IsSpace) >= 0 {
		p.add("l2.keyPrefix", "must not contain whitespace (got %q)", l.KeyPrefix)
	}
	w := l.WarmStart
	if w.MaxEntries < 0 || w.MaxEntries > 1000000 {
		p.add("l2.warmStart.maxEntries", "must be between 0 and 1000000 (got %d)", w.MaxEntries)
	}
	if w.MaxBytes < 0 {
		p.add("l2.warmStart.maxBytes", "must be >= 0 (got %s)", w.MaxBytes)
	}
	if w.Timeout < 0 || w.Timeout > Duration(time.Minute) {
		p.add("l2.warmStart.timeout", "must be between 0 and 1m (got %s)", w.Timeout)
	}
	switch {
	case l.MaxBodySize < 0:
		p.add("l2.maxBodySize", "must not be negative (got %s)", l.MaxBodySize)
	case l.MaxBodySize > maxL2BodySize:
		p.add("l2.maxBodySize", "must be <= %s: larger bodies stay local to a replica (got %s)", maxL2BodySize, l.MaxBodySize)
	}
}

// validateBodyStore checks the set fields and how the effective threshold
// and maximum relate; zero fields are their defaults.
func (c Config) validateBodyStore(p *problems) {
	b := c.BodyStore
	thresholdOK, maxOK := true, true
	switch {
	case b.Threshold < 0:
		p.add("bodyStore.threshold", "must not be negative (got %s)", b.Threshold)
		thresholdOK = false
	case b.Threshold > 0 && b.Threshold < minBodyThreshold:
		p.add("bodyStore.threshold", "must be >= %s (got %s)", minBodyThreshold, b.Threshold)
		thresholdOK = false
	case b.Threshold > 0 && c.L1.MaxEntrySize > 0 && b.Threshold > c.L1.MaxEntrySize:
		p.add("bodyStore.threshold", "must be <= l1.maxEntrySize = %s: bodies between the two would be cached neither inline nor as files (got %s)", c.L1.MaxEntrySize, b.Threshold)
		thresholdOK = false
	}
	switch {
	case b.MaxObjectSize < 0:
		p.add("bodyStore.maxObjectSize", "must not be negative (got %s)", b.MaxObjectSize)
		maxOK = false
	case b.MaxObjectSize > MaxBodyObjectSize:
		p.add("bodyStore.maxObjectSize", "must be <= %s (got %s)", MaxBodyObjectSize, b.MaxObjectSize)
		maxOK = false
	}
	if thresholdOK && maxOK && c.BodyThreshold() >= c.BodyMaxObjectSize() {
		if b.Threshold > 0 {
			p.add("bodyStore.threshold", "must be < bodyStore.maxObjectSize = %s (got %s)", c.BodyMaxObjectSize(), b.Threshold)
		} else {
			p.add("bodyStore.maxObjectSize", "must be > bodyStore.threshold = %s (got %s)", c.BodyThreshold(), b.MaxObjectSize)
		}
	}
}

func validHostPort(a string) bool {
	host, port, err := net.SplitHostPort(a)
	if err != nil || host == "" || port == "" {
		return false
	}
	for i := 0; i < len(port); i++ {
		if !isDigit(port[i]) {
			return false
		}
	}
	n, err := strconv.Atoi(port)
	return err == nil && n >= 1 && n <= 65535
}

func (o Origin) validate(p *problems) {
	checkOriginTimeout(p, "origin.timeout", o.Timeout, maxOriginTimeout, "10m")
	checkOriginTimeout(p, "origin.responseHeaderTimeout", o.ResponseHeaderTimeout, maxOriginTimeout, "10m")
	checkOriginTimeout(p, "origin.idleTimeout", o.IdleTimeout, maxOriginIdle, "1h")
	if o.RequestBuffer < 0 || o.RequestBuffer > maxRequestBuffer {
		p.add("origin.requestBuffer", "must be between 1 and 64Mi (got %s)", o.RequestBuffer)
	}
}

func checkOriginTimeout(p *problems, field string, d, limit Duration, limitText string) {
	switch {
	case d <= 0:
		p.add(field, "must be > 0 (got %s)", d)
	case d > limit:
		p.add(field, "must be <= %s (got %s)", limitText, d)
	}
}

func (d Defaults) validate(p *problems) {
	checkDuration(p, "defaults.fallbackTTL", d.FallbackTTL)
	checkDuration(p, "defaults.staleWhileRevalidate", d.StaleWhileRevalidate)
	checkDuration(p, "defaults.staleIfError", d.StaleIfError)
	checkDuration(p, "defaults.negativeTTL", d.NegativeTTL)
	if f := d.HeuristicFraction; !(f >= 0 && f <= 1) { // also catches NaN
		p.add("defaults.heuristicFraction", "must be between 0 and 1 (got %s)", strconv.FormatFloat(f, 'g', -1, 64))
	}
	checkDuration(p, "defaults.heuristicMaxTTL", d.HeuristicMaxTTL)
	checkDuration(p, "defaults.hitForMissTTL", d.HitForMissTTL)
	d.TargetedCacheControl.validate(p)
	validateStatusTTLs(p, "defaults.statusTTLs", d.StatusTTLs)
	d.ContentCoding.validate(p)
	if w := d.StaleIfUnreachable; w != nil {
		switch {
		case *w < 0:
			p.add("defaults.staleIfUnreachable", "must not be negative (got %s)", *w)
		case *w > maxStaleIfUnreachable:
			// Every stored response is kept that long past its freshness,
			// and L1 keeps nothing longer than a day anyway.
			p.add("defaults.staleIfUnreachable", "must be <= 24h (got %s)", *w)
		}
	}
}

// checkDuration applies the limits every duration shares.
func checkDuration(p *problems, field string, d Duration) {
	switch {
	case d < 0:
		p.add(field, "must not be negative (got %s)", d)
	case d > maxDuration:
		p.add(field, "must be <= 8760h (got %s)", d)
	}
}

func (c Coalescing) validate(p *problems) {
	if !c.IsEnabled() {
		checkDuration(p, "coalescing.timeout", c.Timeout)
		return
	}
	switch {
	case c.Timeout <= 0:
		p.add("coalescing.timeout", "must be > 0 when coalescing is enabled (got %s)", c.Timeout)
	case c.Timeout > maxCoalesceWait:
		p.add("coalescing.timeout", "must be <= 5m (got %s)", c.Timeout)
	}
}

func (pu Purge) validate(p *problems) {
	if pu.Token == "" {
		return
	}
	// The token is a secret: messages describe it, never quote it.
	if strings.IndexFunc(pu.Token, unicode.IsSpace) >= 0 {
		p.add("purge.token", "must not contain whitespace")
	}
	if utf8.RuneCountInString(pu.Token) < minPurgeToken {
		p.add("purge.token", "must be at least %d characters (its length is not said: it is a secret)", minPurgeToken)
	}
}

func (rh RequestHeaders) validate(p *problems) {
	switch rh.Mode {
	case "", RequestHeadersStandard, RequestHeadersStrict:
	default:
		p.add("requestHeaders.mode", "must be %s or %s (got %q)", RequestHeadersStandard, RequestHeadersStrict, rh.Mode)
	}
	if len(rh.Allow) > 0 && rh.Mode != RequestHeadersStrict {
		p.add("requestHeaders.allow", "is used only when requestHeaders.mode is %s (got mode %q)", RequestHeadersStrict, rh.Mode)
	}
	if len(rh.Allow) > maxAllowHeaders {
		p.add("requestHeaders.allow", "must have at most %d headers (got %d)", maxAllowHeaders, len(rh.Allow))
	}
	for i, h := range rh.Allow {
		field := fmt.Sprintf("requestHeaders.allow[%d]", i)
		switch {
		case !isToken(h):
			p.add(field, "not a valid HTTP header name (got %q)", h)
		case isHopByHop(strings.ToLower(h)):
			p.add(field, "a hop-by-hop header never reaches the origin (got %q)", h)
		case !originview.Dashed(h):
			p.add(field, "a name spelt with '_' or '.' is another header's name to many gateways; list it in requestHeaders.allowUnderscoredNames, which keys it (got %q)", h)
		}
	}
	if len(rh.AllowUnderscoredNames) > maxAllowHeaders {
		p.add("requestHeaders.allowUnderscoredNames", "must have at most %d headers (got %d)", maxAllowHeaders, len(rh.AllowUnderscoredNames))
	}
	for i, h := range rh.AllowUnderscoredNames {
		field := fmt.Sprintf("requestHeaders.allowUnderscoredNames[%d]", i)
		switch {
		case !isToken(h):
			p.add(field, "not a valid HTTP header name (got %q)", h)
		case originview.Dashed(h):
			p.add(field, "names spelt with letters, digits and '-' only are forwarded anyway; list names with '_' or '.' here (got %q)", h)
		}
	}
}

func validateRules(p *problems, rules []Rule) {
	if len(rules) > maxRules {
		p.add("rules", "must have at most %d rules (got %d)", maxRules, len(rules))
	}
	seen := make(map[string]int, len(rules))
	for i, r := range rules {
		at := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			p.add(at+".name", "must not be empty")
		case !validRuleName(r.Name):
			p.add(at+".name", "must be at most %d lowercase letters, digits and '-', starting and ending with a letter or digit (got %q)", maxRuleName, r.Name)
		case r.Name == defaultRuleName:
			p.add(at+".name", "%q is reserved for requests that match no rule", defaultRuleName)
		default:
			if j, dup := seen[r.Name]; dup {
				p.add(at+".name", "duplicate of rules[%d].name (got %q)", j, r.Name)
			} else {
				seen[r.Name] = i
			}
		}
		r.Match.validate(p, at+".match")
		validateConditions(p, at, r)
		checkDuration(p, at+".ttl", r.TTL)
		checkDuration(p, at+".maxTTL", r.MaxTTL)
		if r.TTL > 0 && r.MaxTTL > 0 && r.TTL > r.MaxTTL {
			p.add(at+".ttl", "must be <= %s.maxTTL = %s (got %s)", at, r.MaxTTL, r.TTL)
		}
		if r.StaleWhileRevalidate != nil {
			checkDuration(p, at+".staleWhileRevalidate", *r.StaleWhileRevalidate)
		}
		if r.StaleIfError != nil {
			checkDuration(p, at+".staleIfError", *r.StaleIfError)
		}
		r.CacheKey.validate(p, at+".cacheKey")
		validateStatusTTLs(p, at+".statusTTLs", r.StatusTTLs)
	}
}

// validRuleName: a DNS label (RFC 1123), so names work as metric labels
// and Kubernetes names alike.
func validRuleName(s string) bool {
	if len(s) > maxRuleName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := 'a' <= c && c <= 'z' || isDigit(c)
		if !alnum && (c != '-' || i == 0 || i == len(s)-1) {
			return false
		}
	}
	return true
}

func (m Match) validate(p *problems, at string) {
	var set []string
	if m.Path != "" {
		set = append(set, "path")
		if !strings.HasPrefix(m.Path, "/") {
			p.add(at+".path", "must start with \"/\" (got %q)", m.Path)
		}
	}
	if m.PathPrefix != "" {
		set = append(set, "pathPrefix")
		if !strings.HasPrefix(m.PathPrefix, "/") {
			p.add(at+".pathPrefix", "must start with \"/\" (got %q)", m.PathPrefix)
		}
	}
	if m.Regex != "" {
		set = append(set, "regex")
		if len(m.Regex) > maxRegexLen {
			p.add(at+".regex", "must be at most %d bytes (got %d)", maxRegexLen, len(m.Regex))
		} else if _, err := regexp.Compile(m.Regex); err != nil {
			p.add(at+".regex", "not a valid RE2 regular expression: %v", err)
		}
	}
	if len(set) != 1 {
		got := "none"
		if len(set) > 0 {
			got = strings.Join(set, " and ")
		}
		p.add(at, "exactly one of path, pathPrefix, regex must be set (got %s)", got)
	}
	validateHosts(p, at+".hosts", m.Hosts)
}

func (k CacheKey) validate(p *problems, at string) {
	if len(k.QueryInclude) > 0 && len(k.QueryExclude) > 0 {
		p.add(at, "queryInclude and queryExclude cannot both be set")
	}
	checkPatterns(p, at+".queryInclude", k.QueryInclude)
	checkPatterns(p, at+".queryExclude", k.QueryExclude)
	for i, h := range k.Headers {
		field := fmt.Sprintf("%s.headers[%d]", at, i)
		switch {
		case !isToken(h):
			p.add(field, "not a valid HTTP header name (got %q)", h)
		case isHopByHop(strings.ToLower(h)):
			p.add(field, "a hop-by-hop header cannot be part of the cache key (got %q)", h)
		}
	}
	for i, c := range k.Cookies {
		if !isToken(c) {
			p.add(fmt.Sprintf("%s.cookies[%d]", at, i), "not a valid cookie name (got %q)", c)
		}
	}
}

func checkPatterns(p *problems, at string, patterns []string) {
	for i, s := range patterns {
		field := fmt.Sprintf("%s[%d]", at, i)
		switch {
		case s == "":
			p.add(field, "must not be empty")
		case strings.Contains(s[:len(s)-1], "*"):
			p.add(field, "'*' is allowed only as the last character (got %q)", s)
		}
	}
}

// isHopByHop reports whether the lowercase field name describes one
// connection rather than the request (RFC 9110 §7.6.1 plus the legacy
// fields proxies still strip).
func isHopByHop(name string) bool {
	switch name {
	case "connection", "keep-alive", "proxy-connection", "proxy-authenticate",
		"proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// isToken reports whether s is an RFC 9110 token (field and cookie names).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validateSecretVersions bounds the map the operator fills: keys are file
// names (no path), values non-empty and short. What they say is not
// checked: the sidecar does not use them.
func validateSecretVersions(p *problems, v map[string]string) {
	if len(v) > maxSecretFiles {
		p.add("secretVersions", "must have at most %d entries (got %d)", maxSecretFiles, len(v))
		return
	}
	for _, k := range slices.Sorted(maps.Keys(v)) {
		at := "secretVersions[" + strconv.Quote(k) + "]"
		switch {
		case k == "" || k == "." || k == ".." || strings.ContainsAny(k, "/\\\x00") || len(k) > 253:
			p.add(at, "the key must be a file name (got %q)", k)
		case v[k] == "" || len(v[k]) > maxSecretVersion:
			p.add(at, "must be 1 to %d bytes (got %d)", maxSecretVersion, len(v[k]))
		}
	}
}
