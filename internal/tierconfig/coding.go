package tierconfig

import (
	"fmt"
	"mime"
	"slices"
	"strings"
)

// ContentCoding is how the tier's sidecars handle content codings on the
// requests a caching rule matches (defaults.contentCoding): they ask the
// origin with the tier's own Accept-Encoding, keep one copy per URL and
// serve it as stored or decoded, as each client accepts
// (docs/caching.md#content-codings).
type ContentCoding struct {
	// Normalize replaces the Accept-Encoding of every fill with
	// OriginAccepts and takes Accept-Encoding out of the variant key.
	// Unset: true.
	Normalize *bool `json:"normalize,omitempty"`
	// OriginAccepts are the codings fills ask the origin for, most
	// preferred first, among br, gzip and zstd; identity is always
	// acceptable. Unset: [br, gzip]. An empty list asks for identity.
	OriginAccepts []string `json:"originAccepts,omitzero"`
	// Compress compresses an identity response once when it is stored.
	Compress ContentCompress `json:"compress,omitzero"`
}

// ContentCompress is store-time compression (defaults.contentCoding.compress):
// an identity response of a listed type, at least MinSize long, with a
// body held inline, is stored gzip-compressed once, so that its hits are
// served compressed without compressing each time.
type ContentCompress struct {
	// Enabled: unset: true.
	Enabled *bool `json:"enabled,omitempty"`
	// MinSize is the least body length compressed. Unset: 1Ki.
	MinSize Size `json:"minSize,omitempty"`
	// Types are the media types compressed ("text/*" covers a whole
	// type). Unset: DefaultCompressTypes.
	Types []string `json:"types,omitzero"`
}

// DefaultOriginAccepts is contentCoding.originAccepts when unset.
var DefaultOriginAccepts = []string{"br", "gzip"}

// DefaultCompressTypes is contentCoding.compress.types when unset: text
// and the structured text types that compress well; images, audio, video
// and archives are compressed already.
var DefaultCompressTypes = []string{
	"text/*", "application/json", "application/javascript", "application/xml",
	"application/xhtml+xml", "application/rss+xml", "application/atom+xml",
	"application/ld+json", "application/manifest+json", "application/wasm",
	"image/svg+xml", "font/ttf", "font/otf",
}

// defaultCompressMinSize is contentCoding.compress.minSize when unset:
// below about a kilobyte gzip saves little and costs a decode for the
// clients that take identity (docs/benchmarks.md).
const defaultCompressMinSize = 1 * Ki

const (
	maxCompressTypes = 64
	maxMediaType     = 128
)

// originCodings are the codings a tier may ask its origin for.
var originCodings = []string{"br", "gzip", "zstd"}

// NormalizeOn reports whether the tier normalizes Accept-Encoding.
func (c ContentCoding) NormalizeOn() bool { return c.Normalize == nil || *c.Normalize }

// CodingCompiled is defaults.contentCoding ready for the request path.
type CodingCompiled struct {
	// Normalize: fills send Ask as their Accept-Encoding and the variant
	// key leaves Accept-Encoding out.
	Normalize bool
	// Ask is the Accept-Encoding value of every fill: "br, gzip", or
	// "identity" when the tier asks for no coding.
	Ask string
	// Compress, MinSize: store-time compression of identity responses of
	// the listed types, at least MinSize bytes long.
	Compress bool
	MinSize  int64
	types    []string // lower case; "text/" for "text/*"
}

func compileCoding(c ContentCoding) CodingCompiled {
	out := CodingCompiled{Normalize: c.NormalizeOn()}
	ask := c.OriginAccepts
	if ask == nil {
		ask = DefaultOriginAccepts
	}
	out.Ask = "identity"
	if len(ask) > 0 {
		out.Ask = strings.ToLower(strings.Join(ask, ", "))
	}
	cc := c.Compress
	out.Compress = out.Normalize && (cc.Enabled == nil || *cc.Enabled)
	out.MinSize = int64(cc.MinSize)
	if cc.MinSize == 0 {
		out.MinSize = int64(defaultCompressMinSize)
	}
	types := cc.Types
	if types == nil {
		types = DefaultCompressTypes
	}
	for _, t := range types {
		t = strings.ToLower(t)
		out.types = append(out.types, strings.TrimSuffix(t, "*"))
	}
	return out
}

// Compressible reports whether a response of this Content-Type value is
// one the tier compresses at store time.
func (c *CodingCompiled) Compressible(contentType string) bool {
	if !c.Compress || contentType == "" {
		return false
	}
	mt, _, _ := strings.Cut(contentType, ";")
	mt = strings.ToLower(strings.TrimSpace(mt))
	for _, t := range c.types {
		if mt == t || strings.HasSuffix(t, "/") && strings.HasPrefix(mt, t) {
			return true
		}
	}
	return false
}

// validate checks defaults.contentCoding.
func (c ContentCoding) validate(p *problems) {
	const field = "defaults.contentCoding"
	seen := map[string]bool{}
	for i, name := range c.OriginAccepts {
		at := fmt.Sprintf("%s.originAccepts[%d]", field, i)
		switch n := strings.ToLower(name); {
		case !slices.Contains(originCodings, n):
			p.add(at, "must be one of br, gzip, zstd (got %q)", name)
		case seen[n]:
			p.add(at, "%q is listed twice", name)
		default:
			seen[n] = true
		}
	}
	cc := c.Compress
	if cc.MinSize < 0 {
		p.add(field+".compress.minSize", "must be >= 0")
	}
	if len(cc.Types) > maxCompressTypes {
		p.add(field+".compress.types", "must have at most %d entries (got %d)", maxCompressTypes, len(cc.Types))
	}
	for i, t := range cc.Types {
		at := fmt.Sprintf("%s.compress.types[%d]", field, i)
		if len(t) > maxMediaType {
			p.add(at, "must be at most %d bytes", maxMediaType)
			continue
		}
		check := t
		if strings.HasSuffix(t, "/*") {
			check = strings.TrimSuffix(t, "*") + "x"
		}
		if mt, params, err := mime.ParseMediaType(check); err != nil || len(params) > 0 || !strings.Contains(mt, "/") || strings.Contains(t, ";") {
			p.add(at, "must be a media type such as text/html, or type/* (got %q)", t)
		}
	}
}
