package cachekey

import (
	"net/url"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// PrimaryKeys returns the primary keys of a resource under both schemes,
// shaped by the tier's rules, as the proxy stores them. Every stored
// variant of the resource (by Vary, or by the request headers and cookies
// its rule keys on) is reached through a marker under one of these keys,
// so deleting them retires all of its variants.
func PrimaryKeys(cfg *tierconfig.Compiled, host, escapedPath, rawQuery string) []string {
	_, tgt := RuleTarget(cfg, escapedPath, rawQuery)
	keys := make([]string, 0, 2)
	for _, scheme := range [...]string{"http", "https"} {
		keys = append(keys, string(AppendPrimary(nil, scheme, Host(host, scheme), tgt)))
	}
	return keys
}

// RuleTarget returns the rule a URL's stored responses were stored under
// and its target (path?query) as the proxy keys it. Like the proxy, it
// matches rules on the decoded, cleaned path (tierconfig.CleanPath) and
// keys the path as received. Rules with header or cookie conditions are
// passed over (Compiled.MatchStored): they bypass the cache, so whatever a
// request sent, what it stored was stored under a rule of the path alone.
func RuleTarget(cfg *tierconfig.Compiled, escapedPath, rawQuery string) (*tierconfig.CompiledRule, string) {
	path := escapedPath
	if u, err := url.PathUnescape(escapedPath); err == nil {
		path = u
	}
	rule := cfg.MatchStored(path)
	return rule, string(AppendTarget(nil, rule, escapedPath, rawQuery))
}

// AppendTarget appends path?query as keyed under rule: the path as
// received, and the query shaped by the rule (no '?' when the rule drops
// every parameter).
func AppendTarget(dst []byte, rule *tierconfig.CompiledRule, escapedPath, rawQuery string) []byte {
	dst = append(dst, escapedPath...)
	if rawQuery != "" {
		q := len(dst)
		dst = append(dst, '?')
		dst = rule.AppendQuery(dst, rawQuery)
		if len(dst) == q+1 {
			dst = dst[:q]
		}
	}
	return dst
}
