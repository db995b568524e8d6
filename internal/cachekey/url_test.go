package cachekey_test

import (
	"testing"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// ruleTarget is what a purge keys a URL under: the rule its responses
// were stored under, and its target as that rule keys it.
func ruleTarget(cfg *tierconfig.Compiled, escapedPath, rawQuery string) (*tierconfig.CompiledRule, string) {
	rule := cfg.StoredRule("", escapedPath)
	return rule, string(cachekey.AppendTarget(nil, &rule.Key, escapedPath, rawQuery))
}

func TestPurgeTargetsMatchRulesLikeTheProxy(t *testing.T) {
	c := tierconfig.Default()
	c.Rules = []tierconfig.Rule{{Name: "static", Match: tierconfig.Match{PathPrefix: "/static/"}, CacheKey: tierconfig.CacheKey{QueryExclude: []string{"utm_*"}}}}
	cfg, err := tierconfig.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct{ path, query, rule, target string }{
		"a static path falls under the static rule":          {"/static/a.css", "utm_x=1&v=2", "static", "/static/a.css?v=2"},
		"an encoded slash climbing out is not static":        {"/static/..%2faccount", "utm_x=1", "default", "/static/..%2faccount?utm_x=1"},
		"an encoded dot-dot climbing out is not static":      {"/static/%2e%2e/account", "", "default", "/static/%2e%2e/account"},
		"a climb that stays inside is static, keyed as sent": {"/static/x/../a.css", "", "static", "/static/x/../a.css"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			rule, tgt := ruleTarget(cfg, tt.path, tt.query)
			if rule.Name != tt.rule || tgt != tt.target {
				t.Fatalf("RuleTarget(%q, %q) = %s, %q; want %s, %q", tt.path, tt.query, rule.Name, tgt, tt.rule, tt.target)
			}
		})
	}
}

// A bypass rule with a cookie condition stores nothing: the entries of a
// URL it covers were stored under the next rule, and a purge keys them so,
// also when a request without cookies would meet the condition (absent).
func TestPurgeTargetsPassOverConditionedRules(t *testing.T) {
	c := tierconfig.Default()
	c.Rules = []tierconfig.Rule{
		{Name: "logged-in", Match: tierconfig.Match{PathPrefix: "/", Cookies: []tierconfig.CookieMatch{{Name: "session", Present: true}}}, Bypass: true},
		{Name: "no-consent", Match: tierconfig.Match{PathPrefix: "/", Cookies: []tierconfig.CookieMatch{{Name: "consent", Absent: true}}}, Bypass: true},
		{Name: "static", Match: tierconfig.Match{PathPrefix: "/static/"}, CacheKey: tierconfig.CacheKey{QueryExclude: []string{"utm_*"}}},
	}
	cfg, err := tierconfig.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	rule, tgt := ruleTarget(cfg, "/static/a.css", "utm_x=1&v=2")
	if rule.Name != "static" || tgt != "/static/a.css?v=2" {
		t.Fatalf("RuleTarget = %s, %q; want static, /static/a.css?v=2", rule.Name, tgt)
	}
	keys := cachekey.PrimaryKeys(&cfg.StoredRule("shop.example", "/static/a.css").Key, "shop.example", "/static/a.css", "v=2&utm_x=1")
	if len(keys) != 2 || keys[0] != "GET http://shop.example/static/a.css?v=2" {
		t.Fatalf("PrimaryKeys = %q", keys)
	}
}
