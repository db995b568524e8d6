package httpcache_test

import (
	"net/http"
	"net/url"
	"reflect"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestInvalidationTargets(t *testing.T) {
	const target = "https://Example.com/items/7?x=1#frag"
	tests := []struct {
		name   string
		method string
		status int
		target string
		resp   httpcache.Header
		want   []string
	}{
		{"a successful POST invalidates the target", "POST", 201, target, hdr(), []string{"https://Example.com/items/7?x=1"}},
		{"PUT, DELETE and PATCH invalidate", "DELETE", 204, target, hdr(), []string{"https://Example.com/items/7?x=1"}},
		{"an unknown method is unsafe", "PURGE", 200, target, hdr(), []string{"https://Example.com/items/7?x=1"}},
		{"methods are case-sensitive", "get", 200, target, hdr(), []string{"https://Example.com/items/7?x=1"}},
		{"a redirect invalidates", "POST", 303, target, hdr(), []string{"https://Example.com/items/7?x=1"}},
		{"GET does not invalidate", "GET", 200, target, hdr(), nil},
		{"HEAD does not invalidate", "HEAD", 200, target, hdr(), nil},
		{"OPTIONS does not invalidate", "OPTIONS", 200, target, hdr(), nil},
		{"TRACE does not invalidate", "TRACE", 200, target, hdr(), nil},
		{"a 4xx does not invalidate", "POST", 404, target, hdr(), nil},
		{"a 5xx does not invalidate", "POST", 500, target, hdr(), nil},
		{"a 1xx does not invalidate", "POST", 100, target, hdr(), nil},
		{"a same-origin Location is invalidated", "POST", 201, target, hdr("Location", "https://example.com/items/8"),
			[]string{"https://Example.com/items/7?x=1", "https://example.com/items/8"}},
		{"a relative Location is resolved against the target", "POST", 201, target, hdr("Location", "8?y=2#f"),
			[]string{"https://Example.com/items/7?x=1", "https://Example.com/items/8?y=2"}},
		{"an absolute-path Content-Location is resolved", "PUT", 200, target, hdr("Content-Location", "/other"),
			[]string{"https://Example.com/items/7?x=1", "https://Example.com/other"}},
		{"Location and Content-Location are both used", "POST", 201, target,
			hdr("Location", "/a", "Content-Location", "/b"),
			[]string{"https://Example.com/items/7?x=1", "https://Example.com/a", "https://Example.com/b"}},
		{"the default port is the same host", "POST", 201, target, hdr("Location", "https://EXAMPLE.com:443/p"),
			[]string{"https://Example.com/items/7?x=1", "https://EXAMPLE.com:443/p"}},
		{"another host is not invalidated", "POST", 201, target, hdr("Location", "https://evil.example/items/7"),
			[]string{"https://Example.com/items/7?x=1"}},
		{"a network-path reference to another host is not invalidated", "POST", 201, target, hdr("Location", "//evil.example/x"),
			[]string{"https://Example.com/items/7?x=1"}},
		{"another scheme is not invalidated", "POST", 201, target, hdr("Location", "http://example.com/items/8"),
			[]string{"https://Example.com/items/7?x=1"}},
		{"another port is not invalidated", "POST", 201, target, hdr("Location", "https://example.com:8443/items/8"),
			[]string{"https://Example.com/items/7?x=1"}},
		{"a Location equal to the target is listed once", "POST", 201, target, hdr("Location", "/items/7?x=1"),
			[]string{"https://Example.com/items/7?x=1"}},
		{"an unparsable Location is skipped", "POST", 201, target, hdr("Location", "http://[::1"),
			[]string{"https://Example.com/items/7?x=1"}},
		{"an empty Location is skipped", "POST", 201, target, hdr("Location", " "),
			[]string{"https://Example.com/items/7?x=1"}},
		{"an http target keeps port 80 equal to none", "POST", 200, "http://a.test/x", hdr("Location", "http://a.test:80/y"),
			[]string{"http://a.test/x", "http://a.test:80/y"}},
		{"a relative target only invalidates itself", "POST", 200, "/x", hdr("Location", "/y"), []string{"/x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.target)
			if err != nil {
				t.Fatal(err)
			}
			before := *u
			var got []string
			for _, v := range httpcache.InvalidationTargets(tt.method, tt.status, u, tt.resp) {
				if v == u {
					t.Errorf("the target itself was returned")
				}
				got = append(got, v.String())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("InvalidationTargets = %q, want %q", got, tt.want)
			}
			if *u != before {
				t.Errorf("target modified: %v", u)
			}
		})
	}
	t.Run("a nil target gives nothing", func(t *testing.T) {
		if got := httpcache.InvalidationTargets(http.MethodPost, 200, nil, hdr("Location", "/x")); got != nil {
			t.Errorf("got %v", got)
		}
	})
}
