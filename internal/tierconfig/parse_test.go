package tierconfig

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefault(t *testing.T) {
	want := Config{
		L1:     L1{MaxSize: 256 * Mi, MaxEntrySize: Mi, Shards: 256},
		Origin: Origin{Timeout: Duration(30 * time.Second), ResponseHeaderTimeout: Duration(time.Minute), IdleTimeout: Duration(time.Minute)},
		Defaults: Defaults{
			HeuristicFraction: 0.1,
			HeuristicMaxTTL:   Duration(24 * time.Hour),
			HitForMissTTL:     Duration(2 * time.Minute),
		},
		Coalescing: Coalescing{Enabled: ptr(true), Timeout: Duration(10 * time.Second)},
	}
	got := Default()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Default() = %+v\nwant %+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("Default() does not validate: %v", err)
	}
	if !reflect.DeepEqual(got.WithDefaults(), got) {
		t.Fatal("WithDefaults is not idempotent on Default()")
	}
}

func TestParseExampleFile(t *testing.T) {
	c, err := Load(filepath.Join("testdata", "example.yaml"))
	if err != nil {
		t.Fatalf("Load(example.yaml): %v", err)
	}
	want := Config{
		L1: L1{MaxSize: 512 * Mi, MaxEntrySize: Mi, Shards: 512},
		L2: L2{
			Addresses:   []string{"redis-sentinel-0.redis:26379", "redis-sentinel-1.redis:26379", "redis-sentinel-2.redis:26379"},
			Mode:        "sentinel",
			MasterName:  "mymaster",
			Username:    "tiercache",
			Password:    "not-a-real-password",
			TLS:         true,
			CACert:      "-----BEGIN CERTIFICATE-----\nMIIBexample\n-----END CERTIFICATE-----\n",
			KeyPrefix:   "tc:shop/catalog:",
			Timeout:     Duration(50 * time.Millisecond),
			WarmStart:   WarmStart{MaxEntries: 2000, MaxBytes: 32 * Mi, Timeout: Duration(3 * time.Second)},
			MaxBodySize: 32 * Mi,
		},
		BodyStore: BodyStore{Threshold: 128 * Ki, MaxObjectSize: 4 * Gi},
		Origin: Origin{Timeout: Duration(15 * time.Second), ResponseHeaderTimeout: Duration(20 * time.Second), IdleTimeout: Duration(2 * time.Minute),
			RequestBuffer: 256 * Ki},
		Defaults: Defaults{
			FallbackTTL:               Duration(time.Minute),
			StaleWhileRevalidate:      Duration(30 * time.Second),
			StaleIfError:              Duration(10 * time.Minute),
			NegativeTTL:               Duration(10 * time.Second),
			HeuristicFraction:         0.05,
			HeuristicMaxTTL:           Duration(12 * time.Hour),
			HitForMissTTL:             Duration(time.Minute),
			IgnoreRequestCacheControl: true,
			TargetedCacheControl: &TargetedCacheControl{
				Fields: []string{"Tiercache-Cache-Control", "CDN-Cache-Control"}, Strip: true,
			},
			UpdateFromHead:          true,
			ForwardClientValidators: true,
			StorePostResponses:      true,
			StaleIfUnreachable:      ptr(Duration(30 * time.Minute)),
			NormalizeAcceptLanguage: true,
			CacheStatus:             ptr(true),
			IgnoreCookies:           []string{"@analytics", "consent_*"},
			StatusTTLs: []StatusTTL{
				{Statuses: []int32{301, 308}, TTL: Duration(24 * time.Hour)},
				{Statuses: []int32{302, 307}, TTL: Duration(5 * time.Minute)},
			},
			ContentCoding: ContentCoding{
				Normalize:     ptr(true),
				OriginAccepts: []string{"br", "gzip"},
				Compress:      ContentCompress{Enabled: ptr(true), MinSize: 2 * Ki, Types: []string{"text/*", "application/json", "image/svg+xml"}},
			},
		},
		Rules: []Rule{
			{Name: "health", Match: Match{Path: "/healthz"}, Bypass: true},
			{
				Name: "static", Match: Match{PathPrefix: "/static/", Hosts: []string{"shop.example.com", "*.cdn.example.com"}},
				TTL: Duration(24 * time.Hour), MaxTTL: Duration(168 * time.Hour),
				StaleWhileRevalidate: ptr(Duration(time.Hour)),
				StaleIfError:         ptr(Duration(24 * time.Hour)),
				CacheKey:             CacheKey{QueryInclude: []string{"v"}},
				StatusTTLs:           []StatusTTL{{Statuses: []int32{404}, TTL: Duration(time.Minute)}},
			},
			{Name: "logged-in", Match: Match{PathPrefix: "/", Cookies: []CookieMatch{{Name: "session", Present: true}}}, Bypass: true},
			{Name: "preview", Match: Match{PathPrefix: "/", Headers: []HeaderMatch{
				{Name: "X-Preview", Exact: "1"},
				{Name: "X-Preview-Token", Regex: "^[0-9a-f]{32}$"},
			}}, Bypass: true},
			{
				Name: "product-api", Match: Match{Regex: "^/api/v[0-9]+/products/"},
				MaxTTL:               Duration(5 * time.Minute),
				StaleWhileRevalidate: ptr(Duration(0)),
				CacheKey: CacheKey{
					QueryExclude: []string{"utm_*", "fbclid", "gclid"},
					SortQuery:    true,
					Headers:      []string{"Accept-Language"},
					Cookies:      []string{"currency"},
				},
			},
		},
		Coalescing: Coalescing{Enabled: ptr(true), Timeout: Duration(5 * time.Second), ClusterWide: ptr(true)},
		Purge:      Purge{Token: "0123456789abcdef0123456789abcdef", HTTPMethod: true},
		RequestHeaders: RequestHeaders{
			Mode:                  RequestHeadersStrict,
			Allow:                 []string{"Accept", "Accept-Encoding", "Accept-Language", "User-Agent", "X-Request-Id"},
			AllowUnderscoredNames: []string{"X_Api_Version"},
		},
		AccessLog: AccessLog{
			Enabled: ptr(true), SamplePercent: 10,
			ExcludePaths: []string{"/healthz", "/static/*"}, QueryParams: []string{"page", "sort"},
			TrustForwardedFor: true,
		},
		SecretVersions: map[string]string{"redis-password": "redis/password@4711"},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("example.yaml parsed to\n%+v\nwant\n%+v", c, want)
	}
	// Every field of the model is set in the example, so that it documents
	// all of them: a zero field here means the example fell behind.
	assertAllFieldsSet(t, reflect.ValueOf(c), "")
}

// assertAllFieldsSet fails for every struct field of v that is zero, except
// booleans whose example value is documented false.
func assertAllFieldsSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			assertAllFieldsSet(t, v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			f := v.Type().Field(i)
			name := joinPath(path, strings.Split(f.Tag.Get("json"), ",")[0])
			if v.Field(i).IsZero() && name != "defaults.allowSetCookie" && name != "l2.warmStart.disabled" &&
				name != "origin.streamRequestBodies" {
				t.Errorf("example.yaml leaves %s unset", name)
			}
			assertAllFieldsSet(t, v.Field(i), name)
		}
	}
}

func TestParse(t *testing.T) {
	withDefaults := func(edit func(*Config)) Config {
		c := Default()
		edit(&c)
		return c
	}
	tests := map[string]struct {
		in   string
		want Config
	}{
		"empty input is the default config": {
			in: "", want: Default(),
		},
		"a document with only comments is the default config": {
			in: "# nothing here\n\n", want: Default(),
		},
		"an empty JSON object is the default config": {
			in: "{}", want: Default(),
		},
		"a partial YAML config gets defaults for the rest": {
			in: "origin:\n  timeout: 5s\ndefaults:\n  staleIfError: 1h\n",
			want: withDefaults(func(c *Config) {
				c.Origin.Timeout = Duration(5 * time.Second)
				c.Defaults.StaleIfError = Duration(time.Hour)
			}),
		},
		"a partial JSON config gets defaults for the rest": {
			in: `{"l1": {"shards": 64}, "rules": [{"name": "api", "match": {"pathPrefix": "/api/"}, "ttl": "10s"}]}`,
			want: withDefaults(func(c *Config) {
				c.L1.Shards = 64
				c.Rules = []Rule{{Name: "api", Match: Match{PathPrefix: "/api/"}, TTL: Duration(10 * time.Second)}}
			}),
		},
		"sizes as plain numbers are bytes": {
			in: "l1:\n  maxSize: 134217728\n  maxEntrySize: 65536\n",
			want: withDefaults(func(c *Config) {
				c.L1.MaxSize = 128 * Mi
				c.L1.MaxEntrySize = 64 * Ki
			}),
		},
		"a small maxSize lowers the default maxEntrySize to maxSize/shards": {
			in: "l1:\n  maxSize: 64Mi\n",
			want: withDefaults(func(c *Config) {
				c.L1.MaxSize = 64 * Mi
				c.L1.MaxEntrySize = 256 * Ki
			}),
		},
		"zero stays zero where zero is the default": {
			in:   "defaults:\n  fallbackTTL: 0\n  negativeTTL: \"0\"\n",
			want: Default(),
		},
		"zero means unset where the default is not zero": {
			in:   "l1:\n  shards: 0\norigin:\n  timeout: 0s\ndefaults:\n  heuristicFraction: 0\n",
			want: Default(),
		},
		"coalescing can be turned off": {
			in:   "coalescing:\n  enabled: false\n",
			want: withDefaults(func(c *Config) { c.Coalescing.Enabled = ptr(false) }),
		},
		"L2 defaults are filled when addresses are set": {
			in: "l2:\n  addresses: [\"redis:6379\"]\n",
			want: withDefaults(func(c *Config) {
				c.L2 = L2{Addresses: []string{"redis:6379"}, Mode: "standalone", Timeout: Duration(50 * time.Millisecond),
					WarmStart: WarmStart{MaxEntries: 10000, MaxBytes: 64 * Mi, Timeout: Duration(5 * time.Second)}}
			}),
		},
		"null values leave fields unset": {
			in:   "l1: null\nrules: null\n",
			want: Default(),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Parse(%q) =\n%+v\nwant\n%+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string // every line must appear, in this order
	}{
		"an unknown top-level field is named": {
			in:   "l3:\n  maxSize: 1Gi\n",
			want: []string{`l3: unknown field`},
		},
		"a secret version that is not a string names its key": {
			in:   `secretVersions: {purge-token: 42}`,
			want: []string{`secretVersions["purge-token"]: must be a string (got number 42)`},
		},
		"a misspelt nested field is named with its path and a suggestion": {
			in:   "l1:\n  maxsize: 1Gi\n",
			want: []string{`l1.maxsize: unknown field (did you mean "maxSize"?)`},
		},
		"a typo inside a rule names the rule's index": {
			in:   "rules:\n- name: a\n  match:\n    regexp: ^/a\n",
			want: []string{`rules[0].match.regexp: unknown field (did you mean "regex"?)`},
		},
		"a misspelt JSON field is an error too": {
			in:   `{"defaults": {"fallbackTtl": "1s", "negativeTTLs": "1s"}}`,
			want: []string{`defaults.fallbackTtl: unknown field (did you mean "fallbackTTL"?)`, `defaults.negativeTTLs: unknown field (did you mean "negativeTTL"?)`},
		},
		"a bad size names its field": {
			in:   "l1:\n  maxSize: 1GB\n",
			want: []string{`l1.maxSize: invalid size "1GB": unknown suffix "GB" (want Ki, Mi, Gi, Ti, k, M, G or T)`},
		},
		"a bad duration names its field": {
			in:   "rules:\n- name: a\n  match: {path: /}\n  ttl: 1 day\n",
			want: []string{`rules[0].ttl: invalid duration "1 day": want a duration such as "30s", "1h30m" or "7d" (units ns, us, ms, s, m, h, d = 24h, w = 7d, y = 365d)`},
		},
		"a unitless duration names its field": {
			in:   "origin:\n  timeout: 30\n",
			want: []string{`origin.timeout: invalid duration 30: a number needs a unit, such as "30s"`},
		},
		"a value of the wrong type names its field": {
			in: "l1:\n  shards: many\nrules: {name: a}\ncoalescing:\n  enabled: sometimes\n",
			want: []string{
				`coalescing.enabled: must be true or false (got string "sometimes")`,
				`l1.shards: must be an integer (got string "many")`,
				`rules: must be a list (got an object)`,
			},
		},
		"a fractional shard count is refused": {
			in:   "l1:\n  shards: 2.5\n",
			want: []string{`l1.shards: must be an integer (got 2.5)`},
		},
		"a list where an object belongs is refused": {
			in:   "l1: [1, 2]\n",
			want: []string{`l1: must be an object (got a list)`},
		},
		"a document that is not an object is refused": {
			in:   "- a\n- b\n",
			want: []string{`config: must be an object (got a list)`},
		},
		"malformed YAML is refused": {
			in:   "l1:\n  maxSize: [\n",
			want: []string{`config is not valid YAML or JSON: `},
		},
		"a key given twice is refused": {
			in:   "l1:\n  shards: 4\n  shards: 8\n",
			want: []string{`config is not valid YAML or JSON: `, `already set in map`},
		},
		"decoding problems are all reported at once": {
			in: "l1:\n  maxSize: -1Mi\n  shard: 4\norigin:\n  timeout: soon\n",
			want: []string{
				`l1.maxSize: invalid size "-1Mi": must not be negative`,
				`l1.shard: unknown field (did you mean "shards"?)`,
				`origin.timeout: invalid duration "soon"`,
			},
		},
		"validation runs after decoding": {
			in:   "l1:\n  shards: 100\n",
			want: []string{`l1.shards: must be a power of two between 1 and 8192 (got 100)`},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%q) succeeded, want errors %q", tt.in, tt.want)
			}
			msg := err.Error()
			rest := msg
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("Parse(%q) error\n%s\nlacks (in order) %q", tt.in, msg, w)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Load(missing) error = %v, want it to name %s", err, missing)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("l1:\n  shards: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "l1.shards:") {
		t.Fatalf("Load(bad) error = %v, want it to name %s and l1.shards", err, bad)
	}
}
