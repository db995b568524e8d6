package originview

import "testing"

func TestCleanPath(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"a clean path is unchanged":                   {"/a/b/c", "/a/b/c"},
		"a trailing slash is kept":                    {"/a/b/", "/a/b/"},
		"the root is the root":                        {"/", "/"},
		"an empty path stays empty":                   {"", ""},
		"dots inside a segment are not dot-segments":  {"/a/..b/c../.d", "/a/..b/c../.d"},
		"a dot-dot removes the segment before it":     {"/static/../account", "/account"},
		"a dot-dot at the root stays at the root":     {"/../account", "/account"},
		"many dot-dots stop at the root":              {"/a/../../../b", "/b"},
		"a single dot is removed":                     {"/a/./b", "/a/b"},
		"a final dot-dot names a directory":           {"/a/b/..", "/a/"},
		"a final dot names a directory":               {"/a/.", "/a/"},
		"climbing out of everything leaves the root":  {"/a/..", "/"},
		"doubled slashes are merged":                  {"//a///b", "/a/b"},
		"doubled slashes merge before dot-dot":        {"/a//../b", "/b"},
		"a backslash separates segments":              {"/static\\..\\account", "/account"},
		"a dot-dot with path parameters is a dot-dot": {"/static/..;x=1/account", "/account"},
		"a dot with path parameters is a dot":         {"/a/.;/b", "/a/b"},
		"a path parameter on a name is kept":          {"/account;.css/../x", "/x"},
		"a decoded %2F is a slash like any other":     {"/static/../account/x.css", "/account/x.css"},
		"a relative path stays relative":              {"a/../b", "b"},
		"path parameters are removed from a name":     {"/account;x.css", "/account"},
		"path parameters go from every segment":       {"/a;v=1/b;jsessionid=2/", "/a/b/"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CleanPath(tt.in); got != tt.want {
				t.Fatalf("CleanPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCleanPathDoesNotAllocateForACleanPath(t *testing.T) {
	for _, p := range []string{"/", "/static/app.js", "/a.b/..c/.d/", "/api/v1/items?x"} {
		if n := testing.AllocsPerRun(200, func() { _ = CleanPath(p) }); n != 0 {
			t.Errorf("CleanPath(%q) allocates %v times", p, n)
		}
	}
}

func TestReadings(t *testing.T) {
	tests := map[string]struct {
		in   string
		want []string // among the readings
		n    int      // how many, 0: not checked
	}{
		"a canonical path is its one reading":        {"/static/app.css", []string{"/static/app.css"}, 1},
		"an encoded slash is read raw and decoded":   {"/account/..%2fstatic/x.css", []string{"/account/..%2fstatic/x.css", "/account/../static/x.css", "/static/x.css"}, 0},
		"an encoded backslash counts once decoded":   {"/a/..%5cstatic/x", []string{"/a/..\\static/x", "/static/x"}, 0},
		"double encoding is decoded twice":           {"/static/%252e%252e/account", []string{"/static/%2e%2e/account", "/static/../account", "/account"}, 0},
		"a final dot is read with and without slash": {"/static/.", []string{"/static/", "/static"}, 0},
		"servlets remove parameters before decoding": {"/a%3b/../b;x/", []string{"/b/"}, 0},
		"a parameter segment at the end is a slash":  {"/static/;x", []string{"/static/"}, 0},
		"a space is decoded and cleaned alike":       {"/static/a%20b.css", []string{"/static/a%20b.css", "/static/a b.css"}, 2},
		"an invalid escape does not stop decoding":   {"/static/x%25zz/..%252f..%252faccount/y", []string{"/static/x%zz/../../account/y", "/account/y"}, 0},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ps := Readings(tt.in)
			if ps.At(0) != tt.in {
				t.Fatalf("reading 0 = %q, want the path as received", ps.At(0))
			}
			var got []string
			for i := 0; i < ps.Len(); i++ {
				got = append(got, ps.At(i))
			}
			for _, w := range tt.want {
				if !ps.Any(func(p string) bool { return p == w }) {
					t.Errorf("readings %q lack %q", got, w)
				}
			}
			if tt.n != 0 && ps.Len() != tt.n {
				t.Errorf("readings %q: %d, want %d", got, ps.Len(), tt.n)
			}
		})
	}
}

func TestReadingsOfACanonicalPathDoNotAllocate(t *testing.T) {
	for _, p := range []string{"/", "/static/app.js", "/a.b/..c/.d/"} {
		if n := testing.AllocsPerRun(200, func() { _ = Readings(p) }); n != 0 {
			t.Errorf("Readings(%q) allocates %v times", p, n)
		}
	}
}

func TestHasPrefixCoversEveryReading(t *testing.T) {
	tests := map[string]struct {
		path, prefix string
		want         bool
	}{
		"a plain prefix":                     {"/static/x", "/static/", true},
		"another prefix":                     {"/api/x", "/static/", false},
		"a decoded and cleaned reading":      {"/a/..%2fstatic/x", "/static/", true},
		"a reading with the prefix anywhere": {"/static/..%2faccount", "/account", true},
		"no reading under it":                {"/a/%2e/b", "/static/", false},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := HasPrefix(tt.path, tt.prefix); got != tt.want {
				t.Fatalf("HasPrefix(%q, %q) = %v, want %v", tt.path, tt.prefix, got, tt.want)
			}
		})
	}
}

func TestHeaderNames(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		same bool
	}{
		{"X-Tenant", "X_Tenant", true},
		{"X-Tenant", "x.tenant", true},
		{"Accept-Language", "ACCEPT_LANGUAGE", true},
		{"X-Tenant", "X-Tenants", false},
		{"X-Tenant", "X-Tenan_", false},
	} {
		if got := SameName(tt.a, tt.b); got != tt.same {
			t.Errorf("SameName(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.same)
		}
	}
	for name, dashed := range map[string]bool{"X-Tenant": true, "Accept": true, "X_Tenant": false, "X.Tenant": false, "X~T": false} {
		if got := Dashed(name); got != dashed {
			t.Errorf("Dashed(%q) = %v, want %v", name, got, dashed)
		}
	}
}
