package cachekey

import "testing"

func TestSchemeOnlyTrustsExactValues(t *testing.T) {
	cases := map[string]struct {
		proto string
		tls   bool
		want  string
	}{
		"https from the ingress is kept":           {"https", false, "https"},
		"HTTP in capitals is accepted":             {"HTTP", true, "http"},
		"a junk value falls back to the transport": {"gopher", false, "http"},
		"a junk value over TLS means https":        {"javascript", true, "https"},
		"no header over plain TCP means http":      {"", false, "http"},
	}
	for name, c := range cases {
		if got := Scheme(c.proto, c.tls); got != c.want {
			t.Errorf("%s: Scheme(%q, %v) = %q, want %q", name, c.proto, c.tls, got, c.want)
		}
	}
}

func TestHostNormalization(t *testing.T) {
	cases := map[string]struct{ in, scheme, want string }{
		"case is folded":                      {"Example.COM", "http", "example.com"},
		"the default http port is dropped":    {"example.com:80", "http", "example.com"},
		"the default https port is dropped":   {"example.com:443", "https", "example.com"},
		"a non-default port is kept":          {"example.com:8080", "http", "example.com:8080"},
		"port 443 over http is not a default": {"example.com:443", "http", "example.com:443"},
		"an empty host stays empty":           {"", "http", ""},
		"a trailing dot is dropped":           {"Example.com.", "http", "example.com"},
		"a trailing dot before a port":        {"example.com.:8080", "http", "example.com:8080"},
		"a trailing dot and a default port":   {"example.com.:443", "https", "example.com"},
		"an IPv6 literal keeps its colons":    {"[::1]", "http", "[::1]"},
		"an IPv6 literal with a port":         {"[::1]:80", "http", "[::1]"},
		"a lone dot is left alone":            {".", "http", "."},
	}
	for name, c := range cases {
		if got := Host(c.in, c.scheme); got != c.want {
			t.Errorf("%s: Host(%q) = %q, want %q", name, c.in, got, c.want)
		}
	}
}

func TestKeysOfDifferentPartsNeverCollide(t *testing.T) {
	a := string(AppendPrimary(nil, "http", "a.example", "/x?y=1"))
	b := string(AppendPrimary(nil, "https", "a.example", "/x?y=1"))
	c := string(AppendPrimary(nil, "http", "a.example", "/x?y=2"))
	if a == b || a == c || b == c {
		t.Fatalf("keys collide: %q %q %q", a, b, c)
	}
	v1 := string(AppendVariant([]byte(a), 1))
	v2 := string(AppendVariant([]byte(a), 2))
	if v1 == v2 || v1 == a {
		t.Fatalf("variant keys collide: %q %q", v1, v2)
	}
	if want := "GET http://a.example/x?y=1\x00v0000000000000001\x00"; v1 != want {
		t.Fatalf("variant key = %q, want %q", v1, want)
	}
}

func TestHostDoesNotAllocateWhenAlreadyNormal(t *testing.T) {
	allocs := testing.AllocsPerRun(100, func() { _ = Host("example.com:8080", "http") })
	if allocs != 0 {
		t.Fatalf("Host allocated %v times", allocs)
	}
}

func TestPrimaryOfAKey(t *testing.T) {
	prim := string(AppendPrimary(nil, "https", "a.example", "/x?y=1"))
	variant := string(AppendVariant([]byte(prim), 0xabc))
	cases := map[string]struct{ key, want string }{
		"a primary key is its own primary key":                  {prim, prim},
		"a variant key's primary key is what precedes its tag":  {variant + "gzip", prim},
		"a variant key with rule extras keeps only the primary": {variant + "\x00c:session=1\x00gzip", prim},
		"an empty key is its own primary key":                   {"", ""},
	}
	for name, c := range cases {
		if got := Primary(c.key); got != c.want {
			t.Errorf("%s: Primary(%q) = %q, want %q", name, c.key, got, c.want)
		}
	}
}
