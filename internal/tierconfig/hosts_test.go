package tierconfig

import (
	"strings"
	"testing"
)

func TestRulesMatchTheirHosts(t *testing.T) {
	cc := compileIgnoring(t, `
rules:
  - {name: shop, match: {pathPrefix: /, hosts: [shop.example.com, Shop.Example.NET]}, ttl: 1m}
  - {name: tenants, match: {pathPrefix: /, hosts: ["*.tenants.example.com"]}, ttl: 2m}
  - {name: static, match: {pathPrefix: /static/}, ttl: 1h}
`)
	for host, want := range map[string]string{
		"shop.example.com":         "shop",
		"SHOP.example.com":         "shop",
		"shop.example.com:8080":    "shop",
		"shop.example.com.":        "shop",
		"shop.example.com.:443":    "shop",
		"shop.example.net":         "shop",
		"a.tenants.example.com":    "tenants",
		"a.b.tenants.example.com":  "tenants",
		"A.Tenants.Example.Com:80": "tenants",
		"tenants.example.com":      "static", // "*." is below the name, not the name
		"xtenants.example.com":     "static",
		"shop.example.com.evil":    "static",
		"evilshop.example.com":     "static",
		"":                         "static",
		"[::1]:8080":               "static",
	} {
		if got := cc.Match(host, "/static/a.css", nil).Name; got != want {
			t.Errorf("host %q: rule %s, want %s", host, got, want)
		}
		if got := cc.StoredRule(host, "/static/a.css").Name; got != want {
			t.Errorf("host %q: stored under %s, want %s", host, got, want)
		}
	}
	if got := cc.Match("other.example", "/page", nil); got != cc.Default {
		t.Errorf("another host off /static/: %s, want the default rule", got.Name)
	}
}

func TestMatchHostsAreValidated(t *testing.T) {
	for name, tc := range map[string]struct{ hosts, want string }{
		"a port":                {`["shop.example.com:8080"]`, `rules[0].match.hosts[0]: must be a host name ("shop.example.com") or "*." and one ("*.example.com"), without port (got "shop.example.com:8080")`},
		"a wildcard inside":     {`["shop.*.example.com"]`, "rules[0].match.hosts[0]: must be a host name"},
		"a bare wildcard":       {`["*"]`, "rules[0].match.hosts[0]: must be a host name"},
		"a trailing dot":        {`["example.com."]`, "rules[0].match.hosts[0]: must be a host name"},
		"an empty label":        {`["a..b"]`, "rules[0].match.hosts[0]: must be a host name"},
		"a label with a dash":   {`["-a.example"]`, "rules[0].match.hosts[0]: must be a host name"},
		"a duplicate, any case": {`[a.example, A.Example]`, `rules[0].match.hosts[1]: duplicate of rules[0].match.hosts[0] (got "A.Example")`},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(`rules: [{name: r, match: {pathPrefix: /, hosts: ` + tc.hosts + `}}]`))
			if err == nil {
				err = c.WithDefaults().Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestMatchingAHostDoesNotAllocate(t *testing.T) {
	cc := compileIgnoring(t, `rules: [{name: r, match: {pathPrefix: /, hosts: ["*.example.com", a.example]}}]`)
	if n := testing.AllocsPerRun(200, func() { cc.Match("Www.Example.com:8080", "/x", nil) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}
