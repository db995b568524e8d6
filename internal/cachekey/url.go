package cachekey

import (
	"net/url"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// PrimaryKeys returns the primary keys of a resource under both schemes,
// shaped by the tier's rules, as the proxy stores them. Rules that add
// request headers or cookies to the key have no single key per URL; for
// those it returns nil and the caller must match entries by host and
// target instead (Target).
func PrimaryKeys(cfg *tierconfig.Compiled, host, escapedPath, rawQuery string) []string {
	rule := cfg.Match(unescapeOr(escapedPath))
	if rule.HasKeyExtras {
		return nil
	}
	tgt := Target(rule, escapedPath, rawQuery)
	keys := make([]string, 0, 2)
	for _, scheme := range [...]string{"http", "https"} {
		keys = append(keys, string(AppendPrimary(nil, scheme, Host(host, scheme), tgt)))
	}
	return keys
}

// Target returns path?query as the proxy keys it under rule.
func Target(rule *tierconfig.CompiledRule, escapedPath, rawQuery string) string {
	b := []byte(escapedPath)
	if rawQuery != "" {
		q := len(b)
		b = append(b, '?')
		b = rule.AppendQuery(b, rawQuery)
		if len(b) == q+1 {
			b = b[:q]
		}
	}
	return string(b)
}

func unescapeOr(p string) string {
	if u, err := url.PathUnescape(p); err == nil {
		return u
	}
	return p
}
