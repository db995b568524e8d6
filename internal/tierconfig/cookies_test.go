package tierconfig

import (
	"net/http"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"_ga", "_ga", true},
		{"_ga", "_gat", false},
		{"_ga", "_GA", false},
		{"_ga_*", "_ga_ABC123", true},
		{"_ga_*", "_ga_", true},
		{"_ga_*", "_ga", false},
		{"_gat*", "_gat", true},
		{"*_mixpanel", "mp_123_mixpanel", true},
		{"mp_*_mixpanel", "mp_123_mixpanel", true},
		{"mp_*_mixpanel", "mp_123_mixpanelx", false},
		{"a*b*c", "aXbYbZc", true},
		{"a*b*c", "aXbYbZ", false},
		{"*", "anything", true},
	} {
		if got := globMatch(tc.pattern, tc.name); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func compileIgnoring(t *testing.T, yaml string) *Compiled {
	t.Helper()
	c, err := Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

func TestStripIgnoredCookies(t *testing.T) {
	cc := compileIgnoring(t, `
defaults: {ignoreCookies: ["@analytics", "trk"]}
rules:
  - {name: keyed, match: {pathPrefix: /k}, cacheKey: {cookies: [_ga_keep]}}
  - {name: sess, match: {pathPrefix: /s, cookies: [{name: _hjsession, present: true}]}, bypass: true}
`)
	for name, tc := range map[string]struct {
		lines   []string
		want    []string // nil: no Cookie field left
		removed bool
	}{
		"nothing ignored leaves the field as sent":     {[]string{" a=1;;b=2 "}, []string{" a=1;;b=2 "}, false},
		"an ignored cookie goes, the rest is one line": {[]string{"_ga=1; a=1", "b=2; _gid=3"}, []string{"a=1; b=2"}, true},
		"only ignored cookies drop the field":          {[]string{"_ga=1", "_fbp=2;trk=3"}, nil, true},
		"empty pairs are dropped once one is removed":  {[]string{";; _ga=1 ;\t; a=1;"}, []string{"a=1"}, true},
		"a quoted value is one pair":                   {[]string{`_ga="x"; a="y"`}, []string{`a="y"`}, true},
		"a comma does not split a removed pair":        {[]string{"_ga=1,session=2; a=1"}, []string{"a=1"}, true},
		"a keyed name under a glob is kept":            {[]string{"_ga_keep=1; _ga_X=2"}, []string{"_ga_keep=1"}, true},
		"a bypass condition's name is kept, any case":  {[]string{"_HJSession=1; _hjid=2"}, []string{"_HJSession=1"}, true},
		"exact names are case-sensitive":               {[]string{"_GA=1; TRK=2"}, []string{"_GA=1; TRK=2"}, false},
		"a name with spaces before '=' is trimmed":     {[]string{"_ga =1; a=1"}, []string{"a=1"}, true},
	} {
		t.Run(name, func(t *testing.T) {
			h := http.Header{"Cookie": tc.lines}
			removed := cc.StripIgnoredCookies(h)
			if removed != tc.removed || strings.Join(h["Cookie"], "|") != strings.Join(tc.want, "|") || (tc.want == nil) != (h["Cookie"] == nil) {
				t.Fatalf("got %q (removed %v), want %q (removed %v)", h["Cookie"], removed, tc.want, tc.removed)
			}
		})
	}
}

func TestATierWithoutIgnoredCookiesLeavesTheField(t *testing.T) {
	cc := compileIgnoring(t, "{}")
	h := http.Header{"Cookie": {"_ga=1"}}
	if cc.StripIgnoredCookies(h) || h.Get("Cookie") != "_ga=1" {
		t.Fatalf("a tier without ignoreCookies changed the field: %q", h["Cookie"])
	}
}

func TestIgnoredCookiesAreValidated(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"a keyed cookie cannot be ignored": {`
defaults: {ignoreCookies: [lang]}
rules: [{name: r, match: {pathPrefix: /}, cacheKey: {cookies: [lang]}}]`,
			`defaults.ignoreCookies[0]: "lang" is also rules[0].cacheKey.cookies[0] (r): a cookie cannot be both ignored and keyed`},
		"a bypass condition's cookie cannot be ignored": {`
defaults: {ignoreCookies: [x, Session]}
rules: [{name: r, match: {pathPrefix: /, cookies: [{name: session, present: true}]}, bypass: true}]`,
			`defaults.ignoreCookies[1]: "Session" is also rules[0].match.cookies[0].name (r)`},
		"not a cookie name": {`defaults: {ignoreCookies: ["a b"]}`, `defaults.ignoreCookies[0]: not a cookie name, a glob with '*' or "@analytics" (got "a b")`},
		"an unknown preset": {`defaults: {ignoreCookies: ["@ads"]}`, `defaults.ignoreCookies[0]: not a cookie name`},
		"an empty entry":    {`defaults: {ignoreCookies: [""]}`, `defaults.ignoreCookies[0]: not a cookie name`},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err == nil {
				err = c.WithDefaults().Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// A glob or the preset may cover a keyed name: it is exempt.
	compileIgnoring(t, `
defaults: {ignoreCookies: ["@analytics", "lang*"]}
rules: [{name: r, match: {pathPrefix: /}, cacheKey: {cookies: [lang, _ga]}}]`)
}
