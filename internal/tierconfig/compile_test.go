package tierconfig

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestCompileDefaultRule(t *testing.T) {
	c, err := Compile(Config{})
	if err != nil {
		t.Fatalf("Compile(Config{}): %v", err)
	}
	if c.Hash != Default().Hash() || c.Config.Hash() != c.Hash {
		t.Fatal("Compile(Config{}) did not fill defaults before hashing")
	}
	want := httpcache.Policy{HeuristicFraction: 0.1, HeuristicMax: 24 * time.Hour, TargetedFields: []string{"Cdn-Cache-Control"},
		StaleIfUnreachable: 10 * time.Minute}
	d := c.Default
	if d.Name != "default" || d.Bypass || d.Key.ShapesQuery() || d.Key.HasExtras() || !reflect.DeepEqual(d.Policy, want) {
		t.Fatalf("Default rule = %+v, want name default, tier policy %+v and no key shaping", d, want)
	}
	if got := c.Match("", "/anything", nil); got != d {
		t.Fatalf("Match with no rules = %q, want the default rule", got.Name)
	}
}

func TestCompileRefusesInvalidConfigs(t *testing.T) {
	c := validConfig()
	c.Rules[2].Match.Regex = "(("
	_, err := Compile(c)
	if err == nil || !strings.Contains(err.Error(), "rules[2].match.regex:") {
		t.Fatalf("Compile error = %v, want one naming rules[2].match.regex", err)
	}
}

func TestCompilePolicies(t *testing.T) {
	c := Default()
	c.Defaults = Defaults{
		FallbackTTL: Duration(time.Minute), StaleWhileRevalidate: Duration(30 * time.Second),
		StaleIfError: Duration(time.Hour), NegativeTTL: Duration(5 * time.Second),
		HeuristicFraction: 0.2, HeuristicMaxTTL: Duration(6 * time.Hour), AllowSetCookie: true,
	}
	c.Rules = []Rule{
		{Name: "forced", Match: Match{PathPrefix: "/a/"}, TTL: Duration(10 * time.Minute), MaxTTL: Duration(time.Hour),
			StaleWhileRevalidate: ptr(Duration(0)), StaleIfError: ptr(Duration(2 * time.Hour))},
		{Name: "inherits", Match: Match{PathPrefix: "/b/"}, Bypass: true},
	}
	cc, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	tier := httpcache.Policy{
		AllowSetCookie: true, FallbackTTL: time.Minute, NegativeTTL: 5 * time.Second,
		HeuristicFraction: 0.2, HeuristicMax: 6 * time.Hour,
		StaleWhileRevalidate: 30 * time.Second, StaleIfError: time.Hour,
		TargetedFields:     []string{"Cdn-Cache-Control"},
		StaleIfUnreachable: 10 * time.Minute,
	}
	tests := map[string]struct {
		path       string
		wantName   string
		wantBypass bool
		want       httpcache.Policy
	}{
		"rule ttl forces and maxTTL caps, and rule stale windows override the tier's (even with 0)": {
			path: "/a/x", wantName: "forced",
			want: func() httpcache.Policy {
				p := tier
				p.ForceTTL, p.MaxTTL = 10*time.Minute, time.Hour
				p.StaleWhileRevalidate, p.StaleIfError = 0, 2*time.Hour
				return p
			}(),
		},
		"a rule without overrides gets the tier policy": {path: "/b/x", wantName: "inherits", wantBypass: true, want: tier},
		"an unmatched path gets the tier policy":        {path: "/c", wantName: "default", want: tier},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := cc.Match("", tt.path, nil)
			if r.Name != tt.wantName || r.Bypass != tt.wantBypass || !reflect.DeepEqual(r.Policy, tt.want) {
				t.Fatalf("Match(%q) = %+v\nwant name %q bypass %v policy %+v", tt.path, r, tt.wantName, tt.wantBypass, tt.want)
			}
		})
	}
}

func TestMatch(t *testing.T) {
	c := Default()
	c.Rules = []Rule{
		{Name: "exact", Match: Match{Path: "/api/special"}},
		{Name: "api", Match: Match{PathPrefix: "/api/"}},
		{Name: "never-reached", Match: Match{Path: "/api/other"}},
		{Name: "images", Match: Match{Regex: `\.(png|jpe?g)$`}},
		{Name: "anchored", Match: Match{Regex: `^/v[0-9]+/`}},
	}
	cc, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct{ path, want string }{
		"an exact path matches its rule":                     {"/api/special", "exact"},
		"an exact path does not match a longer path":         {"/api/special/x", "api"},
		"a prefix matches paths under it":                    {"/api/users", "api"},
		"the first match wins over a later exact match":      {"/api/other", "api"},
		"a prefix does not match the path without its slash": {"/api", "default"},
		"an unanchored regex matches anywhere":               {"/img/a.jpeg", "images"},
		"a rule earlier in the list wins over a regex":       {"/api/logo.png", "api"},
		"an anchored regex matches at the start":             {"/v2/items", "anchored"},
		"an anchored regex does not match elsewhere":         {"/x/v2/items", "default"},
		"no matching rule gives the default":                 {"/", "default"},
		"an empty path gives the default":                    {"", "default"},
		"dot-segments are removed before matching":           {"/static/../api/users", "api"},
		"a dot-segment cannot climb above the root":          {"/../../api/users", "api"},
		"a dot-dot with path parameters is a dot-dot":        {"/img/..;/api/special", "exact"},
		"a single dot is removed":                            {"/api/./special", "exact"},
		"doubled slashes are merged":                         {"//api//special", "exact"},
		"a backslash counts as a slash":                      {"/img\\..\\api\\special", "exact"},
		"an image suffix after a climb is still an image":    {"/api/../img/a.png", "images"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := cc.Match("", tt.path, nil).Name; got != tt.want {
				t.Fatalf("Match(%q) = %q, want %q", tt.path, got, tt.want)
			}
		})
	}
	if names := ruleNames(cc.Rules()); names != "exact,api,never-reached,images,anchored" {
		t.Fatalf("Rules() = %s", names)
	}
}

func ruleNames(rules []*CompiledRule) string {
	var names []string
	for _, r := range rules {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}

func TestMatchDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("under -race sync.Pool drops regexp matchers at random, so regex matching allocates")
	}
	cc, err := Compile(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/static/app.js", "/api/v1/items", "/nothing/matches/this", "/a.b/..c/.d/", "/"} {
		if n := testing.AllocsPerRun(200, func() { cc.Match("", path, nil) }); n != 0 {
			t.Errorf("Match(%q) allocates %v times", path, n)
		}
		// The request path's match: a path with one reading costs no more.
		if n := testing.AllocsPerRun(200, func() { cc.MatchRequest("", path, nil) }); n != 0 {
			t.Errorf("MatchRequest(%q) allocates %v times", path, n)
		}
	}
}

func TestMatchRequestNeedsEveryReadingOfThePathToAgree(t *testing.T) {
	cc, err := Compile(Config{Rules: []Rule{
		{Name: "static", Match: Match{PathPrefix: "/static/"}, TTL: Duration(time.Hour)},
		{Name: "account", Match: Match{PathPrefix: "/account/"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path string
		// rule: when the readings disagree, the decoded, cleaned
		// reading's, which only names the request.
		rule   string
		agreed bool
	}{
		"a canonical path":                        {"/static/a.css", "static", true},
		"an escape every reading keeps under it":  {"/static/a%20b.css", "static", true},
		"a dot-segment that stays under it":       {"/static/a/../b.css", "static", true},
		"an encoded slash climbing into it":       {"/account/..%2fstatic/x.css", "static", false},
		"an encoded backslash climbing into it":   {"/account/..%5cstatic/x.css", "static", false},
		"encoded dots climbing out of it":         {"/static/%2e%2e/account/x", "account", false},
		"double-encoded dots climbing out of it":  {"/static/%252e%252e/account/x", "static", false},
		"a doubled slash only cleaning removes":   {"//static/x.css", "static", false},
		"path parameters only servlets remove":    {"/account;/../static/x.css", "static", false},
		"a final dot some read without its slash": {"/static/.", "static", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r, agreed := cc.MatchRequest("", tt.path, nil)
			if r.Name != tt.rule || agreed != tt.agreed {
				t.Fatalf("MatchRequest(%q) = %s, %v; want %s, %v", tt.path, r.Name, agreed, tt.rule, tt.agreed)
			}
		})
	}
}

func TestCompiledFlags(t *testing.T) {
	cc, err := Compile(validConfig())
	if err != nil {
		t.Fatal(err)
	}
	for name, tt := range map[string]struct {
		path              string
		shapes, hasExtras bool
	}{
		"a rule without a cache key shapes nothing":             {"/healthz", false, false},
		"a rule with query, header and cookie lists shapes all": {"/api/v1/x", true, true},
	} {
		t.Run(name, func(t *testing.T) {
			r := cc.Match("", tt.path, nil)
			if r.Key.ShapesQuery() != tt.shapes || r.Key.HasExtras() != tt.hasExtras {
				t.Fatalf("%s: ShapesQuery=%v HasKeyExtras=%v", r.Name, r.Key.ShapesQuery(), r.Key.HasExtras())
			}
		})
	}
}

func TestCompiledIsNotChangedThroughTheCallersConfig(t *testing.T) {
	c := validConfig()
	cc, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	hash := cc.Config.Hash()
	c.Rules[2].CacheKey.QueryExclude[0] = "changed"
	c.Rules[0].Name = "changed"
	*c.Coalescing.Enabled = false
	if cc.Config.Hash() != hash || cc.Hash != hash {
		t.Fatal("changing the caller's config changed the compiled one")
	}
}

func TestCoalescingSwitches(t *testing.T) {
	l2 := L2{Addresses: []string{"redis:6379"}}
	tests := map[string]struct {
		c                    Config
		enabled, clusterWide bool
	}{
		"unset coalescing is on, and local without L2":  {Config{}, true, false},
		"with L2 coalescing is cluster-wide by default": {Config{L2: l2}, true, true},
		"clusterWide false keeps it local even with L2": {Config{L2: l2, Coalescing: Coalescing{ClusterWide: ptr(false)}}, true, false},
		"clusterWide true without L2 stays local":       {Config{Coalescing: Coalescing{ClusterWide: ptr(true)}}, true, false},
		"disabled coalescing is never cluster-wide":     {Config{L2: l2, Coalescing: Coalescing{Enabled: ptr(false), ClusterWide: ptr(true)}}, false, false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.c.Coalescing.IsEnabled(); got != tt.enabled {
				t.Errorf("IsEnabled() = %v, want %v", got, tt.enabled)
			}
			if got := tt.c.CoalesceClusterWide(); got != tt.clusterWide {
				t.Errorf("CoalesceClusterWide() = %v, want %v", got, tt.clusterWide)
			}
		})
	}
}

func TestCompileStaleIfUnreachableAndVary(t *testing.T) {
	tests := map[string]struct {
		d    Defaults
		want httpcache.Policy
	}{
		"unset staleIfUnreachable is 10m":   {Defaults{}, httpcache.Policy{StaleIfUnreachable: 10 * time.Minute}},
		"staleIfUnreachable 0 turns it off": {Defaults{StaleIfUnreachable: ptr(Duration(0))}, httpcache.Policy{}},
		"a set staleIfUnreachable is used":  {Defaults{StaleIfUnreachable: ptr(Duration(time.Hour))}, httpcache.Policy{StaleIfUnreachable: time.Hour}},
		"normalizeAcceptLanguage reaches the Vary options": {Defaults{NormalizeAcceptLanguage: true},
			httpcache.Policy{StaleIfUnreachable: 10 * time.Minute, Vary: httpcache.VaryOptions{NormalizeAcceptLanguage: true}}},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := Default()
			c.Defaults.StaleIfUnreachable, c.Defaults.NormalizeAcceptLanguage = tt.d.StaleIfUnreachable, tt.d.NormalizeAcceptLanguage
			cc, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			got := cc.Default.Policy
			if got.StaleIfUnreachable != tt.want.StaleIfUnreachable || got.Vary != tt.want.Vary {
				t.Errorf("policy window %v, vary %+v; want %v, %+v", got.StaleIfUnreachable, got.Vary, tt.want.StaleIfUnreachable, tt.want.Vary)
			}
		})
	}
}

// A tier that sets neither new default pushes the JSON it pushed before
// they existed (an older sidecar refuses a field it does not know); set,
// they travel, and staleIfUnreachable: 0 stays distinct from unset.
func TestUnsetStaleIfUnreachableAndNormalizeStayOffTheWire(t *testing.T) {
	js, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"staleIfUnreachable"`, `"normalizeAcceptLanguage"`} {
		if strings.Contains(string(js), name) {
			t.Errorf("the default config names %s:\n%s", name, js)
		}
	}
	c := Default()
	c.Defaults.StaleIfUnreachable, c.Defaults.NormalizeAcceptLanguage = ptr(Duration(0)), true
	js, err = json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"staleIfUnreachable":"0s"`) || !strings.Contains(string(js), `"normalizeAcceptLanguage":true`) {
		t.Fatalf("set fields missing from the wire form:\n%s", js)
	}
	back, err := Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	if back.Defaults.StaleIfUnreachable == nil || *back.Defaults.StaleIfUnreachable != 0 ||
		back.Defaults.StaleIfUnreachableWindow() != 0 || !back.Defaults.NormalizeAcceptLanguage || back.Hash() != c.Hash() {
		t.Fatalf("round trip changed the defaults: %+v", back.Defaults)
	}
}
