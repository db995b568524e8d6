package cachekey

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestBuilderKeys(t *testing.T) {
	lang := NewShape(nil, []string{"utm_*"}, false, []string{"X-Tenant"}, []string{"lang"})
	plain := Shape{}
	tests := []struct {
		name             string
		url              string
		header           http.Header
		shape            *Shape
		primary, variant string
		ambiguous        bool
	}{
		{"a plain request keys its scheme, host and target", "http://Shop.Example:80/a?b=1", nil, &plain,
			"GET http://shop.example/a?b=1", "GET http://shop.example/a?b=1\x00v000000000000002a\x00accept\x00\x01\x00", false},
		{"X-Forwarded-Proto https keys https", "http://shop/a", http.Header{"X-Forwarded-Proto": {"https"}}, &plain,
			"GET https://shop/a", "GET https://shop/a\x00v000000000000002a\x00accept\x00\x01\x00", false},
		{"the shape drops query parameters and adds header and cookie parts behind the variant tag",
			"http://shop/a?utm_source=x&id=1", http.Header{"X-Tenant": {"acme"}, "Cookie": {"lang=fr"}, "Accept": {"text/html"}}, &lang,
			"GET http://shop/a?id=1", "GET http://shop/a?id=1\x00v000000000000002a\x00\x00h:x-tenant=acme\x00c:lang=fraccept\x00text/html\x00", false},
		{"a keyed cookie sent twice is ambiguous", "http://shop/a", http.Header{"Cookie": {"lang=fr; lang=en"}}, &lang,
			"GET http://shop/a", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tt.url, nil)
			for k, v := range tt.header {
				r.Header[k] = v
			}
			var kb Builder
			kb.Build(r, tt.shape, httpcache.VaryOptions{})
			if kb.Primary() != tt.primary || kb.Key() != tt.primary {
				t.Fatalf("primary key %q (Key %q), want %q", kb.Primary(), kb.Key(), tt.primary)
			}
			if kb.Ambiguous() != tt.ambiguous {
				t.Fatalf("Ambiguous = %v, want %v", kb.Ambiguous(), tt.ambiguous)
			}
			if tt.ambiguous {
				return
			}
			if got := kb.Variant(42, []string{"Accept"}, r.Header); got != tt.variant || kb.Key() != tt.variant {
				t.Fatalf("variant key %q, want %q", got, tt.variant)
			}
			if kb.Primary() != tt.primary {
				t.Fatalf("after Variant the primary key is %q, want %q", kb.Primary(), tt.primary)
			}
		})
	}
}

func TestBuilderDoesNotAllocate(t *testing.T) {
	s := NewShape(nil, []string{"utm_*"}, true, []string{"X-Tenant"}, []string{"lang"})
	r := httptest.NewRequest(http.MethodGet, "http://shop/a?utm_source=x&id=1&b=2", nil)
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("Cookie", "lang=fr")
	r.Header.Set("Accept", "text/html")
	var kb Builder
	kb.Build(r, &s, httpcache.VaryOptions{})
	kb.Variant(1, []string{"Accept"}, r.Header)
	if n := testing.AllocsPerRun(200, func() {
		kb.Build(r, &s, httpcache.VaryOptions{})
		kb.Variant(1, []string{"Accept"}, r.Header)
	}); n != 0 {
		t.Fatalf("Build and Variant allocate %v times once warm", n)
	}
}

// withheld is a request header as a fill forwarded it: the fields it
// withheld read as absent.
type withheld struct {
	h    http.Header
	name string
}

func (w withheld) Values(name string) []string {
	if http.CanonicalHeaderKey(name) == w.name {
		return nil
	}
	return w.h.Values(name)
}

// A fill stores behind a marker under the key a later lookup of the same
// request builds (both call AppendVariantKey), and a field the fill
// withheld from the origin keys as absent.
func TestAFillsVariantKeyIsTheLookupsKey(t *testing.T) {
	s := NewShape(nil, nil, false, []string{"X-Tenant"}, nil)
	r := httptest.NewRequest(http.MethodGet, "http://shop/a", nil)
	r.Header.Set("X-Tenant", "acme")
	r.Header.Set("Accept", "text/html")
	var kb Builder
	kb.Build(r, &s, httpcache.VaryOptions{})
	prim, extras := kb.Primary(), kb.Extras()
	names := []string{"Accept"}
	stored := string(AppendVariantKey([]byte(prim), 7, extras, names, r.Header, httpcache.VaryOptions{}))
	if looked := kb.Variant(7, names, r.Header); looked != stored {
		t.Fatalf("the lookup's key %q, the fill's %q", looked, stored)
	}
	absent := string(AppendVariantKey([]byte(prim), 7, extras, names, withheld{r.Header, "Accept"}, httpcache.VaryOptions{}))
	r.Header.Del("Accept")
	kb.Build(r, &s, httpcache.VaryOptions{})
	if looked := kb.Variant(7, names, r.Header); looked != absent {
		t.Fatalf("a withheld field keys as %q, a request without it as %q", absent, looked)
	}
}
