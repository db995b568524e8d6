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
