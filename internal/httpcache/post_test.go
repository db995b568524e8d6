package httpcache_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestContentLocationIsTarget(t *testing.T) {
	const target = "https://Example.com/items/7?x=1"
	tests := []struct {
		name   string
		target string
		resp   httpcache.Header
		want   bool
	}{
		{"the same absolute URI names the target", target, hdr("Content-Location", "https://example.com/items/7?x=1"), true},
		{"an absolute path with the same query names the target", target, hdr("Content-Location", "/items/7?x=1"), true},
		{"a relative reference resolving to the target names it", target, hdr("Content-Location", "7?x=1"), true},
		{"a default port folds away", target, hdr("Content-Location", "https://EXAMPLE.com:443/items/7?x=1"), true},
		{"a fragment is ignored", target, hdr("Content-Location", "/items/7?x=1#top"), true},
		{"another path does not", target, hdr("Content-Location", "/items/8?x=1"), false},
		{"another query does not", target, hdr("Content-Location", "/items/7?x=2"), false},
		{"a missing query does not", target, hdr("Content-Location", "/items/7"), false},
		{"another host does not", target, hdr("Content-Location", "https://evil.example/items/7?x=1"), false},
		{"another scheme does not", target, hdr("Content-Location", "http://example.com/items/7?x=1"), false},
		{"a path that differs only in escaping does not", "https://example.com/a%2Fb", hdr("Content-Location", "/a/b"), false},
		{"userinfo does not", target, hdr("Content-Location", "https://u@example.com/items/7?x=1"), false},
		{"no Content-Location does not", target, hdr(), false},
		{"an empty Content-Location does not", target, hdr("Content-Location", " "), false},
		{"two Content-Location lines do not", target, hdr("Content-Location", "/items/7?x=1", "Content-Location", "/items/7?x=1"), false},
		{"an unparsable Content-Location does not", target, hdr("Content-Location", "http://[::1"), false},
		{"a target that is not absolute matches nothing", "/items/7?x=1", hdr("Content-Location", "/items/7?x=1"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.target)
			if err != nil {
				t.Fatal(err)
			}
			if got := httpcache.ContentLocationIsTarget(u, tt.resp); got != tt.want {
				t.Errorf("ContentLocationIsTarget = %v, want %v", got, tt.want)
			}
		})
	}
}

// RFC 9110 §9.3.3: a POST response is stored, for later GETs of its target
// URI, only when the tier allows it, with status 200, explicit freshness
// and a Content-Location naming the target.
func TestDecideStoringPOST(t *testing.T) {
	target, _ := url.Parse("https://example.com/form")
	post := func(status int, kv ...string) httpcache.Exchange {
		x := withMethod(ex(status, kv...), http.MethodPost)
		x.Target = target
		return x
	}
	on := httpcache.Policy{StorePOST: true}
	const (
		reasonPOSTStatus    = "a POST response is stored only with status 200"
		reasonPOSTLocation  = "a POST response is stored only with a Content-Location naming its target URI"
		reasonPOSTExplicit  = "a POST response is stored only with explicit freshness (max-age, s-maxage or Expires)"
		heuristicallyFresh  = "Fri, 01 Mar 2024 02:00:00 GMT"
		contentLocationSelf = "/form"
	)
	runDecide(t, []decideCase{
		{"a POST response is not stored when the tier does not allow it",
			post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), httpcache.Policy{}, notStored(reasonMethod)},
		{"a POST response with max-age and its own Content-Location is stored",
			post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), on, stored(sec(60))},
		{"a POST response with s-maxage is stored and must be revalidated when stale",
			post(200, "Cache-Control", "s-maxage=60", "Content-Location", contentLocationSelf), on,
			httpcache.Decision{Store: true, Lifetime: sec(60), MustRevalidate: true}},
		{"a POST response with Expires is stored",
			post(200, "Expires", date(t0.Add(time.Minute)), "Content-Location", contentLocationSelf), on, stored(sec(60))},
		{"a POST response without Content-Location is not stored",
			post(200, "Cache-Control", "max-age=60"), on, notStored(reasonPOSTLocation)},
		{"a POST response naming another resource is not stored",
			post(200, "Cache-Control", "max-age=60", "Content-Location", "/other"), on, notStored(reasonPOSTLocation)},
		{"a POST response without explicit freshness is not stored, even with a heuristic lifetime",
			post(200, "Last-Modified", heuristicallyFresh, "Content-Location", contentLocationSelf),
			httpcache.Policy{StorePOST: true, HeuristicFraction: 0.1, FallbackTTL: time.Hour}, notStored(reasonPOSTExplicit)},
		{"a rule's ttl does not make a POST response storable",
			post(200, "Content-Location", contentLocationSelf), httpcache.Policy{StorePOST: true, ForceTTL: time.Hour},
			notStored(reasonPOSTExplicit)},
		{"a rule's ttl does not replace a POST response's own max-age",
			post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf),
			httpcache.Policy{StorePOST: true, ForceTTL: time.Hour}, stored(sec(60))},
		{"an invalid max-age means stale, as for a GET, so without a validator it is not stored",
			post(200, "Cache-Control", "max-age=soon", "Content-Location", contentLocationSelf), on, notStored(reasonStale)},
		{"a 201 Created is not stored", post(201, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), on,
			notStored(reasonPOSTStatus)},
		{"a 204 is not stored", post(204, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), on,
			notStored(reasonPOSTStatus)},
		{"no-store on a POST response still prevents storing",
			post(200, "Cache-Control", "no-store, max-age=60", "Content-Location", contentLocationSelf), on, notStored(reasonRespNoStore)},
		{"private on a POST response still prevents storing",
			post(200, "Cache-Control", "private, max-age=60", "Content-Location", contentLocationSelf), on, notStored(reasonPrivate)},
		{"Set-Cookie on a POST response still prevents storing",
			post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf, "Set-Cookie", "s=1"), on,
			notStored(reasonSetCookie)},
		{"a POST with Authorization is stored only with public, s-maxage or must-revalidate",
			withReq(post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), "Authorization", "Bearer x"), on,
			notStored(reasonAuth)},
		{"no-store on the POST request prevents storing",
			withReq(post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), "Cache-Control", "no-store"), on,
			notStored(reasonReqNoStore)},
		{"StorePOST does not make other unsafe methods storable",
			withMethod(post(200, "Cache-Control", "max-age=60", "Content-Location", contentLocationSelf), http.MethodPut), on,
			notStored(reasonMethod)},
	})
}
