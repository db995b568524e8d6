package tierconfig

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// validConfig is a complete, valid config with one rule of each kind,
// for tests to break one thing at a time.
func validConfig() Config {
	c := Default()
	c.Rules = []Rule{
		{Name: "health", Match: Match{Path: "/healthz"}, Bypass: true},
		{Name: "static", Match: Match{PathPrefix: "/static/"}, TTL: Duration(time.Hour), MaxTTL: Duration(2 * time.Hour)},
		{Name: "api", Match: Match{Regex: `^/api/v\d+/`}, CacheKey: CacheKey{
			QueryExclude: []string{"utm_*"}, SortQuery: true,
			Headers: []string{"Accept-Language"}, Cookies: []string{"currency"},
		}},
	}
	return c
}

func withL2(mode string, addrs ...string) func(*Config) {
	return func(c *Config) {
		c.L2 = L2{Addresses: addrs, Mode: mode, Timeout: Duration(50 * time.Millisecond)}
		if mode == L2Sentinel {
			c.L2.MasterName = "mymaster"
		}
	}
}

func TestValidConfigsPass(t *testing.T) {
	tests := map[string]func(*Config){
		"the test base config is valid":               func(*Config) {},
		"a standalone L2 with one address is valid":   withL2(L2Standalone, "redis:6379"),
		"an empty L2 mode means standalone":           withL2("", "10.0.0.1:6379"),
		"a sentinel L2 with a master name is valid":   withL2(L2Sentinel, "s0:26379", "s1:26379"),
		"a cluster L2 with many addresses is valid":   withL2(L2Cluster, "r0:6379", "r1:6379", "[::1]:6379"),
		"L2 fields are not checked without addresses": func(c *Config) { c.L2 = L2{Mode: "bogus", KeyPrefix: "a b"} },
		"maxEntrySize may equal maxSize/shards":       func(c *Config) { c.L1 = L1{MaxSize: Mi, Shards: 1, MaxEntrySize: Mi} },
		"8192 shards are allowed":                     func(c *Config) { c.L1 = L1{MaxSize: Gi, Shards: 8192, MaxEntrySize: 128 * Ki} },
		"heuristicFraction may be 1":                  func(c *Config) { c.Defaults.HeuristicFraction = 1 },
		"staleIfUnreachable may be 0":                 func(c *Config) { c.Defaults.StaleIfUnreachable = ptr(Duration(0)) },
		"staleIfUnreachable may be 24h":               func(c *Config) { c.Defaults.StaleIfUnreachable = ptr(Duration(24 * time.Hour)) },
		"a duration of exactly 8760h is allowed":      func(c *Config) { c.Defaults.StaleIfError = Duration(8760 * time.Hour) },
		"a disabled coalescer needs no timeout":       func(c *Config) { c.Coalescing = Coalescing{Enabled: ptr(false)} },
		"ttl equal to maxTTL is allowed":              func(c *Config) { c.Rules[1].TTL = c.Rules[1].MaxTTL },
		"a lone * keeps every parameter":              func(c *Config) { c.Rules[2].CacheKey.QueryExclude = []string{"*"} },
		"a 16-character purge token is enough":        func(c *Config) { c.Purge.Token = "0123456789abcdef" },
		"secret versions keyed by file names are allowed": func(c *Config) {
			c.SecretVersions = map[string]string{"redis-ca.crt": "ca/ca.crt@7", "invalidation-key": "shop-tiercache/invalidation-key@8"}
		},
		"64 rules are allowed":                     func(c *Config) { c.Rules = manyRules(64) },
		"a 63-character rule name is allowed":      func(c *Config) { c.Rules[0].Name = strings.Repeat("a", 63) },
		"a regex of exactly 1024 bytes is allowed": func(c *Config) { c.Rules[2].Match.Regex = "^/" + strings.Repeat("a", 1022) },
		"strict request headers with the default allowlist are valid": func(c *Config) {
			c.RequestHeaders = RequestHeaders{Mode: RequestHeadersStrict}
		},
		"strict request headers with an allowlist are valid": func(c *Config) {
			c.RequestHeaders = RequestHeaders{Mode: RequestHeadersStrict, Allow: []string{"accept", "Cookie"}}
		},
		"standard request headers are valid":       func(c *Config) { c.RequestHeaders.Mode = RequestHeadersStandard },
		"a ttl may apply to credentialed requests": func(c *Config) { c.Rules[1].TTLWithCredentials = true },
		"a 1Ki body threshold is allowed":          func(c *Config) { c.BodyStore.Threshold = Ki },
		"a body threshold may equal l1.maxEntrySize": func(c *Config) {
			c.BodyStore.Threshold = c.L1.MaxEntrySize
		},
		"a 1Ti maximum body object is allowed": func(c *Config) { c.BodyStore.MaxObjectSize = Ti },
		"a maximum body object just above the threshold is allowed": func(c *Config) {
			c.BodyStore = BodyStore{Threshold: 64 * Ki, MaxObjectSize: 64*Ki + 1}
		},
		"a tiny L1 caps the default threshold, so the defaults stay valid": func(c *Config) {
			c.L1 = L1{MaxSize: Mi, Shards: 256, MaxEntrySize: 4 * Ki}
			c.BodyStore.MaxObjectSize = 8 * Ki
		},
		"an L2 max body size of 512Mi is allowed": func(c *Config) {
			withL2(L2Standalone, "redis:6379")(c)
			c.L2.MaxBodySize = 512 * Mi
		},
		"an L2 max body size below the threshold keeps every file body local": func(c *Config) {
			withL2(L2Standalone, "redis:6379")(c)
			c.L2.MaxBodySize = 1
		},
	}
	for name, edit := range tests {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			edit(&c)
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
		})
	}
}

func manyRules(n int) []Rule {
	rules := make([]Rule, n)
	for i := range rules {
		rules[i] = Rule{Name: fmt.Sprintf("r%d", i), Match: Match{Path: fmt.Sprintf("/%d", i)}}
	}
	return rules
}

func TestValidateRefuses(t *testing.T) {
	tests := map[string]struct {
		edit func(*Config)
		want string
	}{
		"an L1 smaller than 1Mi is refused": {
			func(c *Config) { c.L1 = L1{MaxSize: 512 * Ki, Shards: 1, MaxEntrySize: Ki} },
			`l1.maxSize: must be >= 1Mi (got 512Ki)`,
		},
		"a shard count that is not a power of two is refused": {
			func(c *Config) { c.L1.Shards = 100 },
			`l1.shards: must be a power of two between 1 and 8192 (got 100)`,
		},
		"zero shards are refused": {
			func(c *Config) { c.L1.Shards = 0 },
			`l1.shards: must be a power of two between 1 and 8192 (got 0)`,
		},
		"more than 8192 shards are refused": {
			func(c *Config) { c.L1.Shards = 16384 },
			`l1.shards: must be a power of two between 1 and 8192 (got 16384)`,
		},
		"a negative shard count is refused": {
			func(c *Config) { c.L1.Shards = -256 },
			`l1.shards: must be a power of two between 1 and 8192 (got -256)`,
		},
		"shards smaller than bigcache's 4Ki minimum are refused": {
			func(c *Config) { c.L1 = L1{MaxSize: 16 * Mi, Shards: 8192, MaxEntrySize: Ki} },
			`l1.shards: l1.maxSize/l1.shards = 2Ki per shard is below the 4Ki minimum; use fewer shards (got 8192)`,
		},
		"shards larger than bigcache's 4Gi maximum are refused": {
			func(c *Config) { c.L1 = L1{MaxSize: 8 * Gi, Shards: 1, MaxEntrySize: Mi} },
			`l1.shards: l1.maxSize/l1.shards = 8Gi per shard is not below the 4Gi maximum; use more shards (got 1)`,
		},
		"a shard of exactly 4Gi is refused, as L1 could not be built from it": {
			func(c *Config) { c.L1 = L1{MaxSize: 4 * Gi, Shards: 1, MaxEntrySize: Mi} },
			`l1.shards: l1.maxSize/l1.shards = 4Gi per shard is not below the 4Gi maximum; use more shards (got 1)`,
		},
		"a zero maxEntrySize is refused": {
			func(c *Config) { c.L1.MaxEntrySize = 0 },
			`l1.maxEntrySize: must be > 0 (got 0)`,
		},
		"a maxEntrySize above maxSize/shards is refused, naming the limit": {
			func(c *Config) { c.L1.MaxEntrySize = 2 * Mi },
			`l1.maxEntrySize: must be <= l1.maxSize/l1.shards = 1Mi (got 2Mi)`,
		},
		"a body threshold below 1Ki is refused": {
			func(c *Config) { c.BodyStore.Threshold = 512 },
			`bodyStore.threshold: must be >= 1Ki (got 512)`,
		},
		"a negative body threshold is refused": {
			func(c *Config) { c.BodyStore.Threshold = -1 },
			`bodyStore.threshold: must not be negative (got -1)`,
		},
		"a body threshold above l1.maxEntrySize is refused, naming both": {
			func(c *Config) { c.BodyStore.Threshold = 2 * Mi },
			`bodyStore.threshold: must be <= l1.maxEntrySize = 1Mi: bodies between the two would be cached neither inline nor as files (got 2Mi)`,
		},
		"a body threshold equal to the maximum object is refused": {
			func(c *Config) { c.BodyStore = BodyStore{Threshold: 64 * Ki, MaxObjectSize: 64 * Ki} },
			`bodyStore.threshold: must be < bodyStore.maxObjectSize = 64Ki (got 64Ki)`,
		},
		"a maximum object below the default threshold is refused": {
			func(c *Config) { c.BodyStore.MaxObjectSize = 32 * Ki },
			`bodyStore.maxObjectSize: must be > bodyStore.threshold = 64Ki (got 32Ki)`,
		},
		"a maximum body object above 1Ti is refused": {
			func(c *Config) { c.BodyStore.MaxObjectSize = 2 * Ti },
			`bodyStore.maxObjectSize: must be <= 1Ti (got 2Ti)`,
		},
		"a negative maximum body object is refused": {
			func(c *Config) { c.BodyStore.MaxObjectSize = -5 },
			`bodyStore.maxObjectSize: must not be negative (got -5)`,
		},
		"an L2 max body size above 512Mi is refused": {
			func(c *Config) {
				withL2(L2Standalone, "redis:6379")(c)
				c.L2.MaxBodySize = 513 * Mi
			},
			`l2.maxBodySize: must be <= 512Mi: larger bodies stay local to a replica (got 513Mi)`,
		},
		"a negative L2 max body size is refused": {
			func(c *Config) {
				withL2(L2Standalone, "redis:6379")(c)
				c.L2.MaxBodySize = -1
			},
			`l2.maxBodySize: must not be negative (got -1)`,
		},
		"an origin timeout of zero is refused": {
			func(c *Config) { c.Origin.Timeout = 0 },
			`origin.timeout: must be > 0 (got 0s)`,
		},
		"an origin timeout over 10m is refused": {
			func(c *Config) { c.Origin.Timeout = Duration(11 * time.Minute) },
			`origin.timeout: must be <= 10m (got 11m0s)`,
		},
		"a zero response header timeout is refused": {
			func(c *Config) { c.Origin.ResponseHeaderTimeout = 0 },
			`origin.responseHeaderTimeout: must be > 0 (got 0s)`,
		},
		"a response header timeout over 10m is refused": {
			func(c *Config) { c.Origin.ResponseHeaderTimeout = Duration(11 * time.Minute) },
			`origin.responseHeaderTimeout: must be <= 10m (got 11m0s)`,
		},
		"a negative idle timeout is refused": {
			func(c *Config) { c.Origin.IdleTimeout = Duration(-time.Second) },
			`origin.idleTimeout: must be > 0 (got -1s)`,
		},
		"an idle timeout over an hour is refused": {
			func(c *Config) { c.Origin.IdleTimeout = Duration(61 * time.Minute) },
			`origin.idleTimeout: must be <= 1h (got 1h1m0s)`,
		},
		"a request buffer over 64Mi is refused": {
			func(c *Config) { c.Origin.RequestBuffer = 65 * Mi },
			`origin.requestBuffer: must be between 1 and 64Mi (got 65Mi)`,
		},
		"a negative request buffer is refused": {
			func(c *Config) { c.Origin.RequestBuffer = -1 },
			`origin.requestBuffer: must be between 1 and 64Mi (got -1)`,
		},
		"a negative default duration is refused": {
			func(c *Config) { c.Defaults.FallbackTTL = Duration(-time.Second) },
			`defaults.fallbackTTL: must not be negative (got -1s)`,
		},
		"a default duration over a year is refused": {
			func(c *Config) { c.Defaults.StaleWhileRevalidate = Duration(8761 * time.Hour) },
			`defaults.staleWhileRevalidate: must be <= 8760h (got 8761h0m0s)`,
		},
		"a negative staleIfError is refused": {
			func(c *Config) { c.Defaults.StaleIfError = Duration(-time.Minute) },
			`defaults.staleIfError: must not be negative (got -1m0s)`,
		},
		"a negative negativeTTL is refused": {
			func(c *Config) { c.Defaults.NegativeTTL = Duration(-time.Minute) },
			`defaults.negativeTTL: must not be negative (got -1m0s)`,
		},
		"a negative heuristicMaxTTL is refused": {
			func(c *Config) { c.Defaults.HeuristicMaxTTL = Duration(-time.Hour) },
			`defaults.heuristicMaxTTL: must not be negative (got -1h0m0s)`,
		},
		"a hitForMissTTL over a year is refused": {
			func(c *Config) { c.Defaults.HitForMissTTL = Duration(10000 * time.Hour) },
			`defaults.hitForMissTTL: must be <= 8760h (got 10000h0m0s)`,
		},
		"a negative staleIfUnreachable is refused": {
			func(c *Config) { c.Defaults.StaleIfUnreachable = ptr(Duration(-time.Second)) },
			`defaults.staleIfUnreachable: must not be negative (got -1s)`,
		},
		"a staleIfUnreachable over a day is refused": {
			func(c *Config) { c.Defaults.StaleIfUnreachable = ptr(Duration(25 * time.Hour)) },
			`defaults.staleIfUnreachable: must be <= 24h (got 25h0m0s)`,
		},
		"a heuristicFraction above 1 is refused": {
			func(c *Config) { c.Defaults.HeuristicFraction = 1.5 },
			`defaults.heuristicFraction: must be between 0 and 1 (got 1.5)`,
		},
		"a negative heuristicFraction is refused": {
			func(c *Config) { c.Defaults.HeuristicFraction = -0.1 },
			`defaults.heuristicFraction: must be between 0 and 1 (got -0.1)`,
		},
		"a NaN heuristicFraction is refused": {
			func(c *Config) { c.Defaults.HeuristicFraction = math.NaN() },
			`defaults.heuristicFraction: must be between 0 and 1 (got NaN)`,
		},
		"an enabled coalescer needs a timeout": {
			func(c *Config) { c.Coalescing.Timeout = 0 },
			`coalescing.timeout: must be > 0 when coalescing is enabled (got 0s)`,
		},
		"a coalescing timeout over 5m is refused": {
			func(c *Config) { c.Coalescing.Timeout = Duration(6 * time.Minute) },
			`coalescing.timeout: must be <= 5m (got 6m0s)`,
		},
		"a disabled coalescer still refuses a negative timeout": {
			func(c *Config) { c.Coalescing = Coalescing{Enabled: ptr(false), Timeout: Duration(-time.Second)} },
			`coalescing.timeout: must not be negative (got -1s)`,
		},
		"more than 64 rules are refused": {
			func(c *Config) { c.Rules = manyRules(65) },
			`rules: must have at most 64 rules (got 65)`,
		},
		"a rule without a name is refused": {
			func(c *Config) { c.Rules[1].Name = "" },
			`rules[1].name: must not be empty`,
		},
		"two rules with one name are refused": {
			func(c *Config) { c.Rules[2].Name = "health" },
			`rules[2].name: duplicate of rules[0].name (got "health")`,
		},
		"an upper-case rule name is refused": {
			func(c *Config) { c.Rules[0].Name = "Health" },
			`rules[0].name: must be at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit (got "Health")`,
		},
		"a rule name with an underscore is refused": {
			func(c *Config) { c.Rules[0].Name = "my_rule" },
			`rules[0].name: must be at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit (got "my_rule")`,
		},
		"a rule name ending in a dash is refused": {
			func(c *Config) { c.Rules[0].Name = "rule-" },
			`rules[0].name: must be at most 63 lowercase letters`,
		},
		"a rule name longer than 63 characters is refused": {
			func(c *Config) { c.Rules[0].Name = strings.Repeat("a", 64) },
			`rules[0].name: must be at most 63 lowercase letters`,
		},
		"a rule named default is refused": {
			func(c *Config) { c.Rules[0].Name = "default" },
			`rules[0].name: "default" is reserved for requests that match no rule`,
		},
		"a rule matching nothing is refused": {
			func(c *Config) { c.Rules[2].Match = Match{} },
			`rules[2].match: exactly one of path, pathPrefix, regex must be set (got none)`,
		},
		"a rule with two matchers is refused": {
			func(c *Config) { c.Rules[0].Match.Regex = "^/x" },
			`rules[0].match: exactly one of path, pathPrefix, regex must be set (got path and regex)`,
		},
		"a path without a leading slash is refused": {
			func(c *Config) { c.Rules[0].Match.Path = "healthz" },
			`rules[0].match.path: must start with "/" (got "healthz")`,
		},
		"a path prefix without a leading slash is refused": {
			func(c *Config) { c.Rules[1].Match.PathPrefix = "static/" },
			`rules[1].match.pathPrefix: must start with "/" (got "static/")`,
		},
		"a regex that does not compile is refused": {
			func(c *Config) { c.Rules[2].Match.Regex = "^/api/(v1" },
			"rules[2].match.regex: not a valid RE2 regular expression: error parsing regexp: missing closing ): `^/api/(v1`",
		},
		"a Perl-only regex is refused": {
			func(c *Config) { c.Rules[2].Match.Regex = `^/(?!admin)` },
			"rules[2].match.regex: not a valid RE2 regular expression: error parsing regexp: invalid or unsupported Perl syntax: `(?!`",
		},
		"a regex longer than 1024 bytes is refused": {
			func(c *Config) { c.Rules[2].Match.Regex = "^/" + strings.Repeat("a", 1023) },
			`rules[2].match.regex: must be at most 1024 bytes (got 1025)`,
		},
		"a ttl above maxTTL is refused": {
			func(c *Config) { c.Rules[1].TTL = Duration(3 * time.Hour) },
			`rules[1].ttl: must be <= rules[1].maxTTL = 2h0m0s (got 3h0m0s)`,
		},
		"a negative rule ttl is refused": {
			func(c *Config) { c.Rules[1].TTL = Duration(-time.Second) },
			`rules[1].ttl: must not be negative (got -1s)`,
		},
		"a rule maxTTL over a year is refused": {
			func(c *Config) { c.Rules[1].MaxTTL = Duration(9000 * time.Hour) },
			`rules[1].maxTTL: must be <= 8760h (got 9000h0m0s)`,
		},
		"a negative rule staleWhileRevalidate is refused": {
			func(c *Config) { c.Rules[1].StaleWhileRevalidate = ptr(Duration(-time.Second)) },
			`rules[1].staleWhileRevalidate: must not be negative (got -1s)`,
		},
		"a rule staleIfError over a year is refused": {
			func(c *Config) { c.Rules[1].StaleIfError = ptr(Duration(9000 * time.Hour)) },
			`rules[1].staleIfError: must be <= 8760h (got 9000h0m0s)`,
		},
		"queryInclude and queryExclude together are refused": {
			func(c *Config) { c.Rules[2].CacheKey.QueryInclude = []string{"id"} },
			`rules[2].cacheKey: queryInclude and queryExclude cannot both be set`,
		},
		"an empty query pattern is refused": {
			func(c *Config) { c.Rules[2].CacheKey.QueryExclude = []string{"utm_*", ""} },
			`rules[2].cacheKey.queryExclude[1]: must not be empty`,
		},
		"a star before the end of a query pattern is refused": {
			func(c *Config) { c.Rules[2].CacheKey = CacheKey{QueryInclude: []string{"*_id"}} },
			`rules[2].cacheKey.queryInclude[0]: '*' is allowed only as the last character (got "*_id")`,
		},
		"a header name with a space is refused": {
			func(c *Config) { c.Rules[2].CacheKey.Headers = []string{"Accept Language"} },
			`rules[2].cacheKey.headers[0]: not a valid HTTP header name (got "Accept Language")`,
		},
		"an empty header name is refused": {
			func(c *Config) { c.Rules[2].CacheKey.Headers = []string{"X-A", ""} },
			`rules[2].cacheKey.headers[1]: not a valid HTTP header name (got "")`,
		},
		"a hop-by-hop header is refused": {
			func(c *Config) { c.Rules[2].CacheKey.Headers = []string{"connection"} },
			`rules[2].cacheKey.headers[0]: a hop-by-hop header cannot be part of the cache key (got "connection")`,
		},
		"Transfer-Encoding is hop-by-hop": {
			func(c *Config) { c.Rules[2].CacheKey.Headers = []string{"Transfer-Encoding"} },
			`rules[2].cacheKey.headers[0]: a hop-by-hop header cannot be part of the cache key (got "Transfer-Encoding")`,
		},
		"a cookie name with a separator is refused": {
			func(c *Config) { c.Rules[2].CacheKey.Cookies = []string{"a=b"} },
			`rules[2].cacheKey.cookies[0]: not a valid cookie name (got "a=b")`,
		},
		"an unknown L2 mode is refused": {
			withL2("replicated", "redis:6379"),
			`l2.mode: must be one of standalone, sentinel, cluster (got "replicated")`,
		},
		"sentinel mode needs a master name": {
			func(c *Config) { withL2(L2Sentinel, "s:26379")(c); c.L2.MasterName = "" },
			`l2.masterName: required when l2.mode is sentinel`,
		},
		"a master name outside sentinel mode is refused": {
			func(c *Config) { withL2(L2Cluster, "r:6379")(c); c.L2.MasterName = "mymaster" },
			`l2.masterName: allowed only when l2.mode is sentinel (got "mymaster")`,
		},
		"an address without a port is refused": {
			withL2(L2Cluster, "r0:6379", "redis"),
			`l2.addresses[1]: must be host:port with a non-empty host and a numeric port in 1-65535 (got "redis")`,
		},
		"a named port is refused": {
			withL2(L2Standalone, "redis:redis"),
			`l2.addresses[0]: must be host:port with a non-empty host and a numeric port in 1-65535 (got "redis:redis")`,
		},
		"a port out of range is refused": {
			withL2(L2Standalone, "redis:65536"),
			`l2.addresses[0]: must be host:port with a non-empty host and a numeric port in 1-65535 (got "redis:65536")`,
		},
		"an address without a host is refused": {
			withL2(L2Standalone, ":6379"),
			`l2.addresses[0]: must be host:port with a non-empty host and a numeric port in 1-65535 (got ":6379")`,
		},
		"standalone mode with two addresses is refused": {
			withL2(L2Standalone, "a:6379", "b:6379"),
			`l2.addresses: standalone mode takes exactly one address (got 2)`,
		},
		"an L2 timeout of zero is refused": {
			func(c *Config) { withL2(L2Standalone, "redis:6379")(c); c.L2.Timeout = 0 },
			`l2.timeout: must be > 0 (got 0s)`,
		},
		"a negative L2 timeout is refused": {
			func(c *Config) { withL2(L2Standalone, "redis:6379")(c); c.L2.Timeout = Duration(-time.Millisecond) },
			`l2.timeout: must not be negative (got -1ms)`,
		},
		"an L2 key prefix with whitespace is refused": {
			func(c *Config) { withL2(L2Standalone, "redis:6379")(c); c.L2.KeyPrefix = "tc: x" },
			`l2.keyPrefix: must not contain whitespace (got "tc: x")`,
		},
		"a short purge token is refused without echoing it": {
			func(c *Config) { c.Purge.Token = "hunter2" },
			`purge.token: must be at least 16 characters (its length is not said: it is a secret)`,
		},
		"a secret version keyed by a path is refused": {
			func(c *Config) { c.SecretVersions = map[string]string{"../purge-token": "p/t@1"} },
			`secretVersions["../purge-token"]: the key must be a file name (got "../purge-token")`,
		},
		"an empty secret version is refused": {
			func(c *Config) { c.SecretVersions = map[string]string{"purge-token": ""} },
			`secretVersions["purge-token"]: must be 1 to 512 bytes (got 0)`,
		},
		"a purge token with whitespace is refused": {
			func(c *Config) { c.Purge.Token = "0123456789 abcdef" },
			`purge.token: must not contain whitespace`,
		},
		"an unknown request header mode is refused": {
			func(c *Config) { c.RequestHeaders.Mode = "paranoid" },
			`requestHeaders.mode: must be standard or strict (got "paranoid")`,
		},
		"an allowlist without strict mode is refused": {
			func(c *Config) { c.RequestHeaders.Allow = []string{"Accept"} },
			`requestHeaders.allow: is used only when requestHeaders.mode is strict (got mode "")`,
		},
		"an allowed header that is not a header name is refused": {
			func(c *Config) {
				c.RequestHeaders = RequestHeaders{Mode: RequestHeadersStrict, Allow: []string{"Accept", "X Y"}}
			},
			`requestHeaders.allow[1]: not a valid HTTP header name (got "X Y")`,
		},
		"an allowed hop-by-hop header is refused": {
			func(c *Config) {
				c.RequestHeaders = RequestHeaders{Mode: RequestHeadersStrict, Allow: []string{"Upgrade"}}
			},
			`requestHeaders.allow[0]: a hop-by-hop header never reaches the origin (got "Upgrade")`,
		},
		"more than 64 allowed headers are refused": {
			func(c *Config) {
				c.RequestHeaders = RequestHeaders{Mode: RequestHeadersStrict, Allow: make([]string, 65)}
				for i := range c.RequestHeaders.Allow {
					c.RequestHeaders.Allow[i] = fmt.Sprintf("X-H%d", i)
				}
			},
			`requestHeaders.allow: must have at most 64 headers (got 65)`,
		},
		"an allowed name spelt with '_' points to allowUnderscoredNames": {
			func(c *Config) {
				c.RequestHeaders = RequestHeaders{Mode: RequestHeadersStrict, Allow: []string{"X_Tenant"}}
			},
			`requestHeaders.allow[0]: a name spelt with '_' or '.' is another header's name to many gateways; list it in requestHeaders.allowUnderscoredNames, which keys it (got "X_Tenant")`,
		},
		"a dashed name among the underscored names is refused": {
			func(c *Config) { c.RequestHeaders.AllowUnderscoredNames = []string{"X-Api-Version"} },
			`requestHeaders.allowUnderscoredNames[0]: names spelt with letters, digits and '-' only are forwarded anyway; list names with '_' or '.' here (got "X-Api-Version")`,
		},
		"an underscored name that is not a header name is refused": {
			func(c *Config) { c.RequestHeaders.AllowUnderscoredNames = []string{"X_A B"} },
			`requestHeaders.allowUnderscoredNames[0]: not a valid HTTP header name (got "X_A B")`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatalf("Validate succeeded, want error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate error\n%v\nlacks %q", err, tt.want)
			}
			for _, fe := range FieldErrors(err) {
				if strings.Contains(fe.Error(), "hunter2") {
					t.Fatalf("error %q echoes the purge token", fe)
				}
			}
		})
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	c := validConfig()
	c.L1.Shards = 3
	c.Origin.Timeout = 0
	c.Defaults.HeuristicFraction = 2
	c.Rules[0].Name = ""
	c.Rules[2].Match.Regex = "("
	c.Purge.Token = "short"
	err := c.Validate()
	want := []string{
		"l1.shards: must be a power of two between 1 and 8192 (got 3)",
		"origin.timeout: must be > 0 (got 0s)",
		"defaults.heuristicFraction: must be between 0 and 1 (got 2)",
		"rules[0].name: must not be empty",
		"rules[2].match.regex: not a valid RE2 regular expression: error parsing regexp: missing closing ): `(`",
		"purge.token: must be at least 16 characters (its length is not said: it is a secret)",
	}
	if got := strings.Split(err.Error(), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Validate errors:\n%v\nwant:\n%s", err, strings.Join(want, "\n"))
	}
	fes := FieldErrors(fmt.Errorf("wrapped: %w", err))
	if len(fes) != len(want) {
		t.Fatalf("FieldErrors found %d errors, want %d", len(fes), len(want))
	}
	if fes[3].Field != "rules[0].name" || fes[3].Message != "must not be empty" {
		t.Fatalf("FieldErrors[3] = %+v", fes[3])
	}
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "l1.shards" {
		t.Fatalf("errors.As found %+v, want the l1.shards error", fe)
	}
}
