package tierconfig

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// conditionsConfig: a bypass rule per kind of condition, each on its own
// path prefix, then a caching rule for every path.
func conditionsConfig() Config {
	c := Default()
	c.Rules = []Rule{
		{Name: "logged-in", Match: Match{PathPrefix: "/", Cookies: []CookieMatch{{Name: "session", Present: true}}}, Bypass: true},
		{Name: "php-session", Match: Match{PathPrefix: "/php/", Cookies: []CookieMatch{{Name: "sess_id", Present: true}}}, Bypass: true},
		{Name: "dotted", Match: Match{PathPrefix: "/dot/", Cookies: []CookieMatch{{Name: "app.token", Present: true}}}, Bypass: true},
		{Name: "no-consent", Match: Match{PathPrefix: "/consent/", Cookies: []CookieMatch{{Name: "consent", Absent: true}}}, Bypass: true},
		{Name: "beta", Match: Match{PathPrefix: "/beta/", Cookies: []CookieMatch{{Name: "beta", Exact: "1"}}}, Bypass: true},
		{Name: "ab", Match: Match{PathPrefix: "/ab/", Cookies: []CookieMatch{{Name: "ab", Regex: "^(b|c)$"}}}, Bypass: true},
		{Name: "debug", Match: Match{PathPrefix: "/h/present/", Headers: []HeaderMatch{{Name: "x-debug", Present: true}}}, Bypass: true},
		{Name: "internal", Match: Match{PathPrefix: "/h/absent/", Headers: []HeaderMatch{{Name: "X-Edge", Absent: true}}}, Bypass: true},
		{Name: "preview", Match: Match{PathPrefix: "/h/exact/", Headers: []HeaderMatch{{Name: "X-Preview", Exact: "1"}}}, Bypass: true},
		{Name: "canary", Match: Match{PathPrefix: "/h/prefix/", Headers: []HeaderMatch{{Name: "X-Env", Prefix: "canary"}}}, Bypass: true},
		{Name: "bots", Match: Match{PathPrefix: "/h/regex/", Headers: []HeaderMatch{{Name: "User-Agent", Regex: "(?i)bot"}}}, Bypass: true},
		{Name: "both", Match: Match{PathPrefix: "/and/",
			Headers: []HeaderMatch{{Name: "X-Preview", Present: true}},
			Cookies: []CookieMatch{{Name: "editor", Exact: "yes"}}}, Bypass: true},
		{Name: "cached", Match: Match{PathPrefix: "/"}, TTL: Duration(time.Minute)},
	}
	return c
}

func TestMatchWithConditions(t *testing.T) {
	cc, err := Compile(conditionsConfig())
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path   string
		header http.Header
		want   string
	}{
		"a session cookie selects the bypass rule":                      {"/home", http.Header{"Cookie": {"theme=dark; session=abc"}}, "logged-in"},
		"an empty session cookie is present":                            {"/home", http.Header{"Cookie": {"session="}}, "logged-in"},
		"without the session cookie the request goes on to later rules": {"/home", http.Header{"Cookie": {"theme=dark"}}, "cached"},
		"without any cookie the request goes on to later rules":         {"/home", http.Header{}, "cached"},
		"a nil header meets no presence condition":                      {"/home", nil, "cached"},
		"a cookie on a second Cookie line counts":                       {"/home", http.Header{"Cookie": {"a=1", "session=abc"}}, "logged-in"},
		"a cookie whose name ends like the condition's does not count":  {"/home", http.Header{"Cookie": {"xsession=1"}}, "cached"},
		"a cookie whose value is the name does not count":               {"/home", http.Header{"Cookie": {"a=session"}}, "cached"},
		"a header called like the cookie does not count":                {"/home", http.Header{"Session": {"abc"}}, "cached"},
		"the session cookie in another case counts":                     {"/home", http.Header{"Cookie": {"SESSION=abc"}}, "logged-in"},
		"the session cookie percent-encoded counts":                     {"/home", http.Header{"Cookie": {"%73ession=abc"}}, "logged-in"},
		"the session cookie after a comma counts":                       {"/home", http.Header{"Cookie": {"a=1,session=abc"}}, "logged-in"},
		"the session cookie before a comma counts":                      {"/home", http.Header{"Cookie": {"session,a=1"}}, "logged-in"},
		"the session cookie with a space before '=' counts":             {"/home", http.Header{"Cookie": {"session =abc"}}, "logged-in"},

		"a cookie with the condition's name and '_' counts":      {"/php/x", http.Header{"Cookie": {"sess_id=abc"}}, "php-session"},
		"a '.' for the '_' counts, as PHP reads it so":           {"/php/x", http.Header{"Cookie": {"a=1; sess.id=abc"}}, "php-session"},
		"a space for the '_' counts, as PHP reads it so":         {"/php/x", http.Header{"Cookie": {"a=1; sess id=abc"}}, "php-session"},
		"a '+' for the '_' counts, as PHP decodes it to a space": {"/php/x", http.Header{"Cookie": {"sess+id=abc"}}, "php-session"},
		"a lone '[' for the '_' counts, as PHP reads it so":      {"/php/x", http.Header{"Cookie": {"sess[id=abc"}}, "php-session"},
		"a percent-encoded '.' for the '_' counts":               {"/php/x", http.Header{"Cookie": {"sess%2eid=abc"}}, "php-session"},
		"a '.' for the '_' in capitals counts":                   {"/php/x", http.Header{"Cookie": {"SESS.ID=abc"}}, "php-session"},
		"a '-' for the '_' is another cookie":                    {"/php/x", http.Header{"Cookie": {"sess-id=abc"}}, "cached"},
		"a '.' for the '_' in a longer name is another cookie":   {"/php/x", http.Header{"Cookie": {"sess.ids=abc"}}, "cached"},
		"a '_' for the condition's '.' counts":                   {"/dot/x", http.Header{"Cookie": {"app_token=abc"}}, "dotted"},
		"a '-' for the condition's '.' is another cookie":        {"/dot/x", http.Header{"Cookie": {"app-token=abc"}}, "cached"},

		"an absent consent cookie selects its rule":              {"/consent/x", http.Header{}, "no-consent"},
		"a consent cookie skips its rule":                        {"/consent/x", http.Header{"Cookie": {"consent=yes"}}, "cached"},
		"a consent cookie in another case still meets absence":   {"/consent/x", http.Header{"Cookie": {"Consent=yes"}}, "no-consent"},
		"a consent cookie named twice still meets absence":       {"/consent/x", http.Header{"Cookie": {"consent=yes; consent=no"}}, "no-consent"},
		"a cookie value equal to the condition's selects it":     {"/beta/x", http.Header{"Cookie": {"beta=1"}}, "beta"},
		"another cookie value does not":                          {"/beta/x", http.Header{"Cookie": {"beta=10"}}, "cached"},
		"an absent cookie meets no value condition":              {"/beta/x", http.Header{"Cookie": {"alpha=1"}}, "cached"},
		"a percent-encoded cookie value meets a value condition": {"/beta/x", http.Header{"Cookie": {"beta=%31"}}, "beta"},
		"a quoted cookie value meets a value condition":          {"/beta/x", http.Header{"Cookie": {`beta="1"`}}, "beta"},
		"a cookie sent twice meets a value condition":            {"/beta/x", http.Header{"Cookie": {"beta=0; beta=1"}}, "beta"},
		"a cookie value the regex matches selects it":            {"/ab/x", http.Header{"Cookie": {"ab=c"}}, "ab"},
		"a cookie value the regex does not match does not":       {"/ab/x", http.Header{"Cookie": {"ab=a"}}, "cached"},

		"a header present selects its rule, its name case-insensitive": {"/h/present/x", http.Header{"X-Debug": {""}}, "debug"},
		"without the header the request goes on":                       {"/h/present/x", http.Header{"X-Other": {"1"}}, "cached"},
		"the header spelt with an underscore counts as present":        {"/h/present/x", http.Header{"X_debug": {"1"}}, "debug"},
		"the header spelt with a dot counts as present":                {"/h/present/x", http.Header{"X.debug": {"1"}}, "debug"},
		"the header spelt with another character is another header":    {"/h/present/x", http.Header{"X+debug": {"1"}}, "cached"},
		"an absent header selects its rule":                            {"/h/absent/x", http.Header{}, "internal"},
		"a present header skips an absence rule":                       {"/h/absent/x", http.Header{"X-Edge": {"1"}}, "cached"},
		"an exact header value selects its rule":                       {"/h/exact/x", http.Header{"X-Preview": {"1"}}, "preview"},
		"an exact match is case-sensitive and whole":                   {"/h/exact/x", http.Header{"X-Preview": {"10"}}, "cached"},
		"a header on two lines meets a value condition":                {"/h/exact/x", http.Header{"X-Preview": {"0", "1"}}, "preview"},
		"another spelling beside the header meets a value condition":   {"/h/exact/x", http.Header{"X-Preview": {"0"}, "X_preview": {"1"}}, "preview"},
		"only another spelling meets a value condition":                {"/h/exact/x", http.Header{"X_preview": {"1"}}, "preview"},
		"a dotted spelling beside the header meets a value condition":  {"/h/exact/x", http.Header{"X-Preview": {"0"}, "X.preview": {"1"}}, "preview"},
		"a header value with the prefix selects its rule":              {"/h/prefix/x", http.Header{"X-Env": {"canary-7"}}, "canary"},
		"a header value without the prefix does not":                   {"/h/prefix/x", http.Header{"X-Env": {"prod"}}, "cached"},
		"a header value the regex matches selects its rule":            {"/h/regex/x", http.Header{"User-Agent": {"Googlebot/2.1"}}, "bots"},
		"a header value the regex does not match does not":             {"/h/regex/x", http.Header{"User-Agent": {"Mozilla/5.0"}}, "cached"},

		"a rule holds when all its conditions do":         {"/and/x", http.Header{"X-Preview": {"1"}, "Cookie": {"editor=yes"}}, "both"},
		"a rule fails when one header condition does not": {"/and/x", http.Header{"Cookie": {"editor=yes"}}, "cached"},
		"a rule fails when one cookie condition does not": {"/and/x", http.Header{"X-Preview": {"1"}, "Cookie": {"editor=no"}}, "cached"},
		"the path condition must hold too":                {"/h/present", http.Header{"X-Debug": {"1"}}, "cached"},
		"conditions see the cleaned path":                 {"/x/../h//present/y", http.Header{"X-Debug": {"1"}}, "debug"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := cc.Match("", tt.path, tt.header).Name; got != tt.want {
				t.Fatalf("Match(%q, %q) = %s, want %s", tt.path, tt.header, got, tt.want)
			}
		})
	}
}

func TestMatchStoredIgnoresConditionedRules(t *testing.T) {
	cc, err := Compile(conditionsConfig())
	if err != nil {
		t.Fatal(err)
	}
	// Every conditioned rule comes before "cached" and bypasses: whatever
	// a request sent, its answer was stored under "cached".
	for _, path := range []string{"/home", "/php/x", "/dot/x", "/consent/x", "/h/absent/x", "/and/x"} {
		if got := cc.MatchStored("", path).Name; got != "cached" {
			t.Errorf("MatchStored(%q) = %s, want cached", path, got)
		}
	}
	c := conditionsConfig()
	c.Rules = append([]Rule{{Name: "health", Match: Match{Path: "/healthz"}, Bypass: true}}, c.Rules[:len(c.Rules)-1]...)
	cc, err = Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	if got := cc.MatchStored("", "/healthz").Name; got != "health" {
		t.Errorf("MatchStored(/healthz) = %s, want the unconditioned health rule", got)
	}
	if got := cc.MatchStored("", "/consent/x"); got != cc.Default {
		t.Errorf("MatchStored(/consent/x) = %s, want default", got.Name)
	}
}

func TestMatchWithConditionsDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops regexp matchers at random, so regex matching allocates")
	}
	cc, err := Compile(conditionsConfig())
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{
		"Cookie":     {"theme=dark; consent=yes; beta=0; ab=a; editor=yes; _ga=1", "lang=fr; sess.id=1; app_token=x"},
		"User-Agent": {"Mozilla/5.0"}, "X-Env": {"prod"}, "X-Preview": {"1"}, "Accept": {"*/*"},
	}
	for _, path := range []string{"/home", "/php/x", "/dot/x", "/consent/x", "/beta/x", "/ab/x", "/h/present/x", "/h/absent/x", "/h/exact/x", "/h/prefix/x", "/h/regex/x", "/and/x"} {
		if n := testing.AllocsPerRun(200, func() { cc.Match("", path, h) }); n != 0 {
			t.Errorf("Match(%q) allocates %v times", path, n)
		}
	}
}

func TestCheckConditionsExplainsEachCondition(t *testing.T) {
	cc, err := Compile(conditionsConfig())
	if err != nil {
		t.Fatal(err)
	}
	var both *CompiledRule
	for _, r := range cc.Rules() {
		if r.Name == "both" {
			both = r
		}
	}
	got := both.CheckConditions(http.Header{"X_preview": {"1"}, "Cookie": {"editor=no"}})
	want := []ConditionCheck{
		{Field: "match.headers[0]", Met: true, Ambiguous: true},
		{Field: "match.cookies[0]", Met: false},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("CheckConditions = %+v, want %+v", got, want)
	}
	if !both.HasConditions() || !both.MatchesPath("/and/x") || both.MatchesPath("/other") {
		t.Fatal("HasConditions or MatchesPath wrong for the rule both")
	}
	if cc.Default.CheckConditions(nil) != nil || cc.Default.HasConditions() {
		t.Fatal("the default rule has conditions")
	}
}

func TestConditionsValidation(t *testing.T) {
	bypass := func(m Match) func(*Config) {
		return func(c *Config) {
			m.PathPrefix = "/"
			c.Rules = append(c.Rules, Rule{Name: "cond", Match: m, Bypass: true})
		}
	}
	hm := func(h ...HeaderMatch) Match { return Match{Headers: h} }
	cm := func(k ...CookieMatch) Match { return Match{Cookies: k} }
	const at = "rules[3].match."
	tests := map[string]struct {
		edit func(*Config)
		want string // "" = valid
	}{
		"a bypass rule with a cookie condition is valid": {bypass(cm(CookieMatch{Name: "session", Present: true})), ""},
		"a bypass rule with every kind of test is valid": {bypass(Match{
			Headers: []HeaderMatch{{Name: "A", Present: true}, {Name: "B", Absent: true}, {Name: "C", Exact: "x y"}, {Name: "D", Prefix: "p"}, {Name: "E", Regex: "^v[0-9]$"}},
			Cookies: []CookieMatch{{Name: "a", Present: true}, {Name: "b", Absent: true}, {Name: "c", Exact: "x"}, {Name: "d", Regex: "."}},
		}), ""},
		"eight header conditions are allowed": {bypass(hm(
			HeaderMatch{Name: "H1", Present: true}, HeaderMatch{Name: "H2", Present: true}, HeaderMatch{Name: "H3", Present: true}, HeaderMatch{Name: "H4", Present: true},
			HeaderMatch{Name: "H5", Present: true}, HeaderMatch{Name: "H6", Present: true}, HeaderMatch{Name: "H7", Present: true}, HeaderMatch{Name: "H8", Present: true})), ""},
		"a regex of 256 bytes is allowed": {bypass(cm(CookieMatch{Name: "a", Regex: strings.Repeat("a", 256)})), ""},

		"a cookie condition on a caching rule is refused": {func(c *Config) {
			c.Rules[1].Match.Cookies = []CookieMatch{{Name: "session", Present: true}}
		}, "rules[1].match.cookies: allowed only on a bypass rule (set rules[1].bypass: true)"},
		"a header condition on a caching rule is refused, even when the key holds the header": {func(c *Config) {
			c.Rules[2].Match.Headers = []HeaderMatch{{Name: "Accept-Language", Exact: "fr"}}
		}, "rules[2].match.headers: allowed only on a bypass rule"},
		"nine header conditions are refused": {bypass(hm(
			HeaderMatch{Name: "H1", Present: true}, HeaderMatch{Name: "H2", Present: true}, HeaderMatch{Name: "H3", Present: true}, HeaderMatch{Name: "H4", Present: true},
			HeaderMatch{Name: "H5", Present: true}, HeaderMatch{Name: "H6", Present: true}, HeaderMatch{Name: "H7", Present: true}, HeaderMatch{Name: "H8", Present: true},
			HeaderMatch{Name: "H9", Present: true})), at + "headers: must have at most 8 conditions (got 9)"},
		"nine cookie conditions are refused": {bypass(cm(
			CookieMatch{Name: "c1", Present: true}, CookieMatch{Name: "c2", Present: true}, CookieMatch{Name: "c3", Present: true}, CookieMatch{Name: "c4", Present: true},
			CookieMatch{Name: "c5", Present: true}, CookieMatch{Name: "c6", Present: true}, CookieMatch{Name: "c7", Present: true}, CookieMatch{Name: "c8", Present: true},
			CookieMatch{Name: "c9", Present: true})), at + "cookies: must have at most 8 conditions (got 9)"},
		"a header name with a space is refused": {bypass(hm(HeaderMatch{Name: "X Debug", Present: true})),
			at + `headers[0].name: not a valid HTTP header name of at most 256 characters (got "X Debug")`},
		"an empty header name is refused": {bypass(hm(HeaderMatch{Present: true})), at + "headers[0].name: not a valid HTTP header name"},
		"a hop-by-hop header is refused": {bypass(hm(HeaderMatch{Name: "connection", Present: true})),
			at + "headers[0].name: a hop-by-hop header describes the connection"},
		"Host is refused": {bypass(hm(HeaderMatch{Name: "host", Exact: "a.example"})), at + "headers[0].name: the request's host is not a header field"},
		"a header named twice in another case is refused": {bypass(hm(HeaderMatch{Name: "X-A", Present: true}, HeaderMatch{Name: "x-a", Exact: "1"})),
			at + `headers[1].name: duplicate of rules[3].match.headers[0].name (names are case-insensitive)`},
		"a cookie named twice is refused": {bypass(cm(CookieMatch{Name: "a", Present: true}, CookieMatch{Name: "a", Exact: "1"})),
			at + "cookies[1].name: duplicate of rules[3].match.cookies[0].name"},
		"cookie names in other cases are different cookies": {bypass(cm(CookieMatch{Name: "a", Present: true}, CookieMatch{Name: "A", Present: true})), ""},
		"a cookie name with '=' is refused":                 {bypass(cm(CookieMatch{Name: "a=b", Present: true})), at + `cookies[0].name: not a valid cookie name of at most 256 characters (got "a=b")`},
		"a header condition with no test is refused": {bypass(hm(HeaderMatch{Name: "X-A"})),
			at + "headers[0]: exactly one of present, absent, exact, prefix, regex must be set (got none)"},
		"a header condition with two tests is refused": {bypass(hm(HeaderMatch{Name: "X-A", Present: true, Exact: "1"})),
			at + "headers[0]: exactly one of present, absent, exact, prefix, regex must be set (got present and exact)"},
		"a cookie condition with present and absent is refused": {bypass(cm(CookieMatch{Name: "a", Present: true, Absent: true})),
			at + "cookies[0]: exactly one of present, absent, exact, regex must be set (got present and absent)"},
		"a regex that does not compile is refused": {bypass(hm(HeaderMatch{Name: "X-A", Regex: "(("})), at + "headers[0].regex: not a valid RE2 regular expression"},
		"a regex over 256 bytes is refused": {bypass(cm(CookieMatch{Name: "a", Regex: strings.Repeat("a", 257)})),
			at + "cookies[0].regex: must be at most 256 bytes (got 257)"},
		"an exact value over 1024 bytes is refused": {bypass(hm(HeaderMatch{Name: "X-A", Exact: strings.Repeat("a", 1025)})),
			at + "headers[0].exact: must be at most 1024 bytes (got 1025)"},
		"a header value with a line break is refused": {bypass(hm(HeaderMatch{Name: "X-A", Prefix: "a\r\nX-B: 1"})),
			at + "headers[0].prefix: not a header field value as the sidecar reads it"},
		"a header value with trailing space is refused": {bypass(hm(HeaderMatch{Name: "X-A", Exact: "a "})),
			at + "headers[0].exact: not a header field value as the sidecar reads it"},
		"a cookie value with ';' is refused": {bypass(cm(CookieMatch{Name: "a", Exact: "1;b=2"})),
			at + `cookies[0].exact: a cookie value as received`},
		"a percent-encoded cookie value is refused": {bypass(cm(CookieMatch{Name: "a", Exact: "%31"})),
			at + `cookies[0].exact: a cookie value as received`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want valid", err)
			case tt.want == "":
				if _, err := Compile(c); err != nil {
					t.Fatalf("Compile() = %v", err)
				}
			case err == nil:
				t.Fatalf("Validate() = nil, want %q", tt.want)
			case !strings.Contains(err.Error(), tt.want):
				t.Fatalf("Validate() = %v\nwant it to contain %q", err, tt.want)
			}
		})
	}
}

func TestParseConditions(t *testing.T) {
	c, err := Parse([]byte(`
rules:
  - name: logged-in
    match: {pathPrefix: /, cookies: [{name: session, present: true}], headers: [{name: X-Debug, regex: "^1$"}]}
    bypass: true
`))
	if err != nil {
		t.Fatal(err)
	}
	m := c.Rules[0].Match
	if len(m.Cookies) != 1 || m.Cookies[0] != (CookieMatch{Name: "session", Present: true}) ||
		len(m.Headers) != 1 || m.Headers[0] != (HeaderMatch{Name: "X-Debug", Regex: "^1$"}) {
		t.Fatalf("parsed match %+v", m)
	}
	for in, want := range map[string]string{
		"a misspelt test":                   `{"rules": [{"name": "a", "bypass": true, "match": {"pathPrefix": "/", "cookies": [{"name": "s", "presnt": true}]}}]}`,
		"a prefix test on a cookie":         `{"rules": [{"name": "a", "bypass": true, "match": {"pathPrefix": "/", "cookies": [{"name": "s", "prefix": "x"}]}}]}`,
		"a condition that is not an object": `{"rules": [{"name": "a", "bypass": true, "match": {"pathPrefix": "/", "headers": ["X-Debug"]}}]}`,
	} {
		_, err := Parse([]byte(want))
		msg := map[string]string{
			"a misspelt test":                   `rules[0].match.cookies[0].presnt: unknown field (did you mean "present"?)`,
			"a prefix test on a cookie":         `rules[0].match.cookies[0].prefix: unknown field`,
			"a condition that is not an object": `rules[0].match.headers[0]: must be an object (got string "X-Debug")`,
		}[in]
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: Parse = %v, want %q", in, err, msg)
		}
	}
}

// A tier without conditions pushes the config it pushed before they
// existed: an older sidecar refuses a field it does not know.
func TestConditionsStayOffTheWireWhenUnset(t *testing.T) {
	js, err := json.Marshal(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), `"headers":[{`) || strings.Contains(string(js), `"cookies":[{`) {
		t.Fatalf("the config without conditions names them:\n%s", js)
	}
}

// benchHeader is a browser's request header with cookies but no session.
var benchHeader = http.Header{
	"User-Agent": {"Mozilla/5.0 (X11; Linux x86_64)"}, "Accept": {"text/html,*/*;q=0.8"}, "Accept-Language": {"fr,en;q=0.5"},
	"Cookie": {"_ga=GA1.2.1234567890.1234567890; theme=dark; lang=fr; consent=yes"},
}

// BenchmarkMatchPathRules: a request that passes through three path rules
// (exact, prefix, regex) to the default rule.
func BenchmarkMatchPathRules(b *testing.B) {
	cc, err := Compile(validConfig())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if cc.Match("", "/bench/item", benchHeader) != cc.Default {
			b.Fatal("a rule matched")
		}
	}
}

// BenchmarkMatchCookieCondition: a request without a session cookie passes
// a session bypass rule for every path, then the three path rules.
func BenchmarkMatchCookieCondition(b *testing.B) {
	c := validConfig()
	c.Rules = append([]Rule{{Name: "logged-in", Match: Match{PathPrefix: "/", Cookies: []CookieMatch{{Name: "session", Present: true}}}, Bypass: true}}, c.Rules...)
	cc, err := Compile(c)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if cc.Match("", "/bench/item", benchHeader) != cc.Default {
			b.Fatal("a rule matched")
		}
	}
}
