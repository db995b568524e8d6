package httpcache_test

import (
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestCodingOf(t *testing.T) {
	tests := map[string]struct {
		ce   []string
		want httpcache.Coding
	}{
		"no Content-Encoding is identity":           {nil, httpcache.CodingIdentity},
		"identity is identity":                      {[]string{"identity"}, httpcache.CodingIdentity},
		"gzip is gzip, whatever its case":           {[]string{"GZip"}, httpcache.CodingGzip},
		"x-gzip is gzip":                            {[]string{"x-gzip"}, httpcache.CodingGzip},
		"br is br":                                  {[]string{" br "}, httpcache.CodingBr},
		"zstd is zstd":                              {[]string{"zstd"}, httpcache.CodingZstd},
		"deflate is a coding the cache cannot read": {[]string{"deflate"}, httpcache.CodingOther},
		"two codings applied in turn are other":     {[]string{"gzip, br"}, httpcache.CodingOther},
		"two lines with one coding each are other":  {[]string{"gzip", "gzip"}, httpcache.CodingOther},
		"an unknown token is other":                 {[]string{"compress-9"}, httpcache.CodingOther},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := httpcache.CodingOf(tc.ce); got != tc.want {
				t.Fatalf("CodingOf(%q) = %v, want %v", tc.ce, got, tc.want)
			}
		})
	}
}

func TestAcceptable(t *testing.T) {
	const (
		chrome  = "gzip, deflate, br, zstd"
		safari  = "gzip, deflate, br"
		firefox = "zstd, br, gzip, deflate"
	)
	tests := []struct {
		name string
		ae   []string // nil: no Accept-Encoding field
		c    httpcache.Coding
		ce   string
		want bool
	}{
		{"no Accept-Encoding accepts identity", nil, httpcache.CodingIdentity, "", true},
		{"no Accept-Encoding does not accept gzip (the cache's choice)", nil, httpcache.CodingGzip, "gzip", false},
		{"an empty Accept-Encoding accepts identity only", []string{""}, httpcache.CodingGzip, "gzip", false},
		{"an empty Accept-Encoding accepts identity", []string{""}, httpcache.CodingIdentity, "", true},
		{"Chrome accepts br", []string{chrome}, httpcache.CodingBr, "br", true},
		{"Chrome accepts zstd", []string{chrome}, httpcache.CodingZstd, "zstd", true},
		{"Safari does not accept zstd", []string{safari}, httpcache.CodingZstd, "zstd", false},
		{"Safari accepts gzip", []string{safari}, httpcache.CodingGzip, "gzip", true},
		{"Firefox's order does not matter", []string{firefox}, httpcache.CodingGzip, "gzip", true},
		{"a listed coding with q=0 is refused", []string{"gzip;q=0, br"}, httpcache.CodingGzip, "gzip", false},
		{"q=0.000 is zero", []string{"gzip; q=0.000"}, httpcache.CodingGzip, "gzip", false},
		{"q=0.001 is not zero", []string{"gzip;q=0.001"}, httpcache.CodingGzip, "gzip", true},
		{"a malformed weight counts as zero", []string{"gzip;q=high"}, httpcache.CodingGzip, "gzip", false},
		{"a weight above 1 counts as zero", []string{"gzip;q=1.5"}, httpcache.CodingGzip, "gzip", false},
		{"Q is case-insensitive", []string{"gzip;Q=0"}, httpcache.CodingGzip, "gzip", false},
		{"star accepts an unlisted coding", []string{"*"}, httpcache.CodingBr, "br", true},
		{"star;q=0 refuses an unlisted coding", []string{"gzip, *;q=0"}, httpcache.CodingBr, "br", false},
		{"a listed coding wins over star;q=0", []string{"*;q=0, br"}, httpcache.CodingBr, "br", true},
		{"identity is acceptable when unlisted", []string{"gzip"}, httpcache.CodingIdentity, "", true},
		{"identity;q=0 refuses identity", []string{"gzip, identity;q=0"}, httpcache.CodingIdentity, "", false},
		{"*;q=0 refuses identity when identity is unlisted", []string{"gzip, *;q=0"}, httpcache.CodingIdentity, "", false},
		{"an entry for identity wins over *;q=0", []string{"*;q=0, identity"}, httpcache.CodingIdentity, "", true},
		{"x-gzip in the request accepts gzip", []string{"x-gzip"}, httpcache.CodingGzip, "gzip", true},
		{"an unknown coding is accepted when named", []string{"compress-9, gzip"}, httpcache.CodingOther, "compress-9", true},
		{"an unknown coding is refused when not named", []string{"gzip, br"}, httpcache.CodingOther, "compress-9", false},
		{"several lines are one list", []string{"gzip;q=0", "br"}, httpcache.CodingBr, "br", true},
		{"unknown tokens in the request are ignored", []string{"snappy, lz4;q=1"}, httpcache.CodingGzip, "gzip", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hdr()
			for _, v := range tc.ae {
				h.Add("Accept-Encoding", v)
			}
			if tc.ae != nil && len(h["Accept-Encoding"]) == 0 {
				h["Accept-Encoding"] = []string{""}
			}
			if got := httpcache.Acceptable(h, tc.c, tc.ce); got != tc.want {
				t.Fatalf("Acceptable(%q, %v) = %v, want %v", tc.ae, tc.c, got, tc.want)
			}
		})
	}
}

func TestAcceptableDoesNotAllocate(t *testing.T) {
	h := hdr("Accept-Encoding", "gzip, deflate, br, zstd;q=0.9")
	if n := testing.AllocsPerRun(100, func() { httpcache.Acceptable(h, httpcache.CodingBr, "br") }); n != 0 {
		t.Fatalf("Acceptable allocates %v times", n)
	}
}

func TestDerivedETag(t *testing.T) {
	tests := map[string]struct{ in, want string }{
		"a strong tag gets the suffix": {`"abc"`, `"abc-gzip"`},
		"a weak tag stays weak":        {`W/"abc"`, `W/"abc-gzip"`},
		"no tag derives none":          {``, ``},
		"an invalid tag derives none":  {`abc`, ``},
		"an empty opaque tag gets one": {`""`, `"-gzip"`},
		"trailing junk is not an etag": {`"a" x`, ``},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := httpcache.DerivedETag(tc.in, "gzip"); got != tc.want {
				t.Fatalf("DerivedETag(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestVaryWith(t *testing.T) {
	tests := map[string]struct {
		vary  []string
		want  string
		added bool
	}{
		"no Vary becomes the name":                 {nil, "Accept-Encoding", true},
		"a Vary without it gains it":               {[]string{"Cookie"}, "Cookie, Accept-Encoding", true},
		"a Vary with it in another case is kept":   {[]string{"cookie, accept-encoding"}, "cookie, accept-encoding", false},
		"a Vary over several lines is one list":    {[]string{"Cookie", "Accept-Encoding"}, "Cookie, Accept-Encoding", false},
		"star already covers it":                   {[]string{"*"}, "*", false},
		"empty lines are dropped when it is added": {[]string{"", "Origin"}, "Origin, Accept-Encoding", true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, added := httpcache.VaryWith(tc.vary, "Accept-Encoding")
			if got != tc.want || added != tc.added {
				t.Fatalf("VaryWith(%q) = %q, %v; want %q, %v", tc.vary, got, added, tc.want, tc.added)
			}
		})
	}
}
