package tierconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestCompileCodingDefaults(t *testing.T) {
	c := compileCoding(ContentCoding{})
	if !c.Normalize || c.Ask != "br, gzip" || !c.Compress || c.MinSize != 1024 {
		t.Fatalf("defaults: %+v", c)
	}
	for ct, want := range map[string]bool{
		"text/html; charset=utf-8": true,
		"Text/CSS":                 true,
		"application/json":         true,
		"image/svg+xml":            true,
		"image/png":                false,
		"application/octet-stream": false,
		"":                         false,
		"application/jsonx":        false,
	} {
		if got := c.Compressible(ct); got != want {
			t.Errorf("Compressible(%q) = %v, want %v", ct, got, want)
		}
	}
	off := false
	if c := compileCoding(ContentCoding{Normalize: &off}); c.Normalize || c.Compress {
		t.Fatalf("normalize off still normalizes or compresses: %+v", c)
	}
	if c := compileCoding(ContentCoding{OriginAccepts: []string{}}); c.Ask != "identity" {
		t.Fatalf("an empty list asks %q", c.Ask)
	}
	if c := compileCoding(ContentCoding{OriginAccepts: []string{"ZSTD", "gzip"}}); c.Ask != "zstd, gzip" {
		t.Fatalf("asks %q", c.Ask)
	}
}

func TestValidateContentCoding(t *testing.T) {
	tests := map[string]struct {
		cc   ContentCoding
		want string // "" valid
	}{
		"the defaults are valid":                  {ContentCoding{}, ""},
		"deflate is not a coding to ask for":      {ContentCoding{OriginAccepts: []string{"deflate"}}, "originAccepts[0]"},
		"a coding listed twice is refused":        {ContentCoding{OriginAccepts: []string{"gzip", "GZIP"}}, "originAccepts[1]"},
		"a negative minSize is refused":           {ContentCoding{Compress: ContentCompress{MinSize: -1}}, "compress.minSize"},
		"a media type with parameters is refused": {ContentCoding{Compress: ContentCompress{Types: []string{"text/html; charset=utf-8"}}}, "compress.types[0]"},
		"a word is not a media type":              {ContentCoding{Compress: ContentCompress{Types: []string{"html"}}}, "compress.types[0]"},
		"type/* is a media type":                  {ContentCoding{Compress: ContentCompress{Types: []string{"text/*"}}}, ""},
		"*/* covers every type":                   {ContentCoding{Compress: ContentCompress{Types: []string{"*/*"}}}, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var p problems
			tc.cc.validate(&p)
			got := ""
			for _, e := range p {
				got += e.Error()
			}
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("problems %q, want one at %q", got, tc.want)
			}
		})
	}
}

// A tier that does not set contentCoding pushes the same JSON as before
// the setting existed (an older sidecar refuses fields it does not know);
// one that does carries it.
func TestContentCodingTravelsOnlyWhenSet(t *testing.T) {
	c, err := Parse([]byte("defaults: {fallbackTTL: 1m}"))
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "contentCoding") {
		t.Fatalf("an unset contentCoding travels: %s", js)
	}
	c, err = Parse([]byte("defaults: {contentCoding: {originAccepts: []}}"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ = json.Marshal(c)
	if !strings.Contains(string(js), `"contentCoding":{"originAccepts":[]}`) {
		t.Fatalf("an empty originAccepts does not travel as set: %s", js)
	}
	if cc, err := Compile(c); err != nil || cc.Coding.Ask != "identity" {
		t.Fatalf("compiled: %v, %+v", err, cc)
	}
}
