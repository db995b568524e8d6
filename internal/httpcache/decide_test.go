package httpcache_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// ex is a GET answered with status and the response fields kv at t0, sent
// at t0 (no response delay). The response gets Date: t0 unless kv sets
// Date; a Date of "-" means no Date field.
func ex(status int, kv ...string) httpcache.Exchange {
	h := hdr(kv...)
	switch h.Get("Date") {
	case "":
		h.Set("Date", date(t0))
	case "-":
		h.Del("Date")
	}
	return httpcache.Exchange{
		Method: http.MethodGet, ReqHeader: http.Header{}, Status: status, RespHeader: h,
		RequestTime: t0, ResponseTime: t0,
	}
}

func withReq(x httpcache.Exchange, kv ...string) httpcache.Exchange {
	x.ReqHeader = hdr(kv...)
	return x
}

func withMethod(x httpcache.Exchange, m string) httpcache.Exchange {
	x.Method = m
	return x
}

func stored(lifetime time.Duration) httpcache.Decision {
	return httpcache.Decision{Store: true, Lifetime: lifetime}
}

func notStored(reason string) httpcache.Decision { return httpcache.Decision{Reason: reason} }

type decideCase struct {
	name string
	x    httpcache.Exchange
	p    httpcache.Policy
	want httpcache.Decision
}

func runDecide(t *testing.T, tests []decideCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := tt.want
			if want.Store && want.Strip == nil {
				want.Strip = []string{"Set-Cookie"}
			}
			got := httpcache.Decide(tt.x, tt.p)
			// Why and Source have a table of their own
			// (TestDecideSaysWhyAndFromWhere); here: present exactly when
			// they apply.
			if (got.Why == "") != got.Store || (got.Source == "") == got.Store {
				t.Errorf("Decide: Store %v with Why %q and Source %q", got.Store, got.Why, got.Source)
			}
			got.Why, got.Source = "", ""
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Decide\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

const (
	reasonMethod       = "only GET responses are stored"
	reasonInfo         = "an informational (1xx) response is not stored"
	reasonBadStatus    = "the status code is not a valid final status"
	reasonPartial      = "partial content (206) is not stored"
	reasonNotModified  = "a 304 Not Modified response is not stored"
	reasonUnderstand   = "must-understand with a status code the cache does not understand prevents storing"
	reasonReqNoStore   = "no-store on the request prevents storing"
	reasonRespNoStore  = "no-store on the response prevents storing"
	reasonPrivate      = "private prevents storing in a shared cache"
	reasonAuth         = "a request with Authorization is stored only with public, s-maxage or must-revalidate"
	reasonSetCookie    = "Set-Cookie prevents storing"
	reasonVaryStar     = "Vary: * prevents storing"
	reasonNotByDefault = "the status code is not cacheable by default and the response has no explicit freshness"
	reasonNoCache      = "no-cache without a validator could never be reused"
	reasonNoInfo       = "no freshness information and no validator"
	reasonCredentials  = "a response to a request with Cookie or Authorization is stored only with explicit freshness from the origin (or public, or a rule's ttlWithCredentials)"
	reasonStale        = "the response is already stale and has no validator"
)

// RFC 9111 §3: whether a response may be stored at all.
func TestDecideStoring(t *testing.T) {
	force := httpcache.Policy{ForceTTL: time.Hour}
	runDecide(t, []decideCase{
		{"a 200 with max-age is stored", ex(200, "Cache-Control", "max-age=60"), httpcache.Policy{}, stored(sec(60))},
		{"a POST response is not stored", withMethod(ex(200, "Cache-Control", "max-age=60"), http.MethodPost), force,
			notStored(reasonMethod)},
		{"a HEAD response is not stored", withMethod(ex(200, "Cache-Control", "max-age=60"), http.MethodHead), force,
			notStored(reasonMethod)},
		{"a lowercase get is another method", withMethod(ex(200, "Cache-Control", "max-age=60"), "get"), force,
			notStored(reasonMethod)},
		{"a 100 Continue is not stored", ex(100, "Cache-Control", "max-age=60"), force, notStored(reasonInfo)},
		{"a 103 Early Hints is not stored", ex(103, "Cache-Control", "max-age=60"), force, notStored(reasonInfo)},
		{"status 0 is not valid", ex(0, "Cache-Control", "max-age=60"), force, notStored(reasonBadStatus)},
		{"status 600 is not valid", ex(600, "Cache-Control", "max-age=60"), force, notStored(reasonBadStatus)},
		{"a negative status is not valid", ex(-200, "Cache-Control", "max-age=60"), force, notStored(reasonBadStatus)},
		{"partial content is not stored", ex(206, "Cache-Control", "max-age=60", "ETag", `"a"`), force, notStored(reasonPartial)},
		{"a 304 is not stored", ex(304, "Cache-Control", "max-age=60", "ETag", `"a"`), force, notStored(reasonNotModified)},

		{"must-understand with a status we do not know prevents storing",
			ex(299, "Cache-Control", "must-understand, max-age=60"), httpcache.Policy{}, notStored(reasonUnderstand)},
		{"must-understand with a status we do not know prevents storing despite ForceTTL",
			ex(299, "Cache-Control", "must-understand, no-store"), force, notStored(reasonUnderstand)},
		{"must-understand with a known status lets the response be stored despite no-store",
			ex(200, "Cache-Control", "must-understand, no-store, max-age=60"), httpcache.Policy{}, stored(sec(60))},
		{"must-understand with a known status is stored like any other",
			ex(404, "Cache-Control", "must-understand, max-age=60"), httpcache.Policy{}, stored(sec(60))},
		{"must-understand does not override no-store on the request",
			withReq(ex(200, "Cache-Control", "must-understand, no-store, max-age=60"), "Cache-Control", "no-store"),
			httpcache.Policy{}, notStored(reasonReqNoStore)},

		{"no-store on the request prevents storing",
			withReq(ex(200, "Cache-Control", "max-age=60"), "Cache-Control", "no-store"), httpcache.Policy{}, notStored(reasonReqNoStore)},
		{"no-store on the request prevents storing despite ForceTTL",
			withReq(ex(200), "Cache-Control", "max-age=0, NO-STORE"), force, notStored(reasonReqNoStore)},
		{"Pragma no-cache on the request does not prevent storing",
			withReq(ex(200, "Cache-Control", "max-age=60"), "Pragma", "no-cache"), httpcache.Policy{}, stored(sec(60))},
		{"no-store on the response prevents storing", ex(200, "Cache-Control", "no-store, max-age=60"), httpcache.Policy{},
			notStored(reasonRespNoStore)},
		{"no-store on the response prevents storing despite ForceTTL", ex(200, "Cache-Control", "no-store"), force,
			notStored(reasonRespNoStore)},
		{"no-store on a second field line prevents storing",
			ex(200, "Cache-Control", "public, max-age=60", "Cache-Control", "no-store"), httpcache.Policy{}, notStored(reasonRespNoStore)},
		{"no-store wins over public and s-maxage", ex(200, "Cache-Control", "public, s-maxage=60, no-store"), httpcache.Policy{},
			notStored(reasonRespNoStore)},

		{"private prevents storing", ex(200, "Cache-Control", "private, max-age=60"), httpcache.Policy{}, notStored(reasonPrivate)},
		{"private prevents storing despite ForceTTL", ex(200, "Cache-Control", "private"), force, notStored(reasonPrivate)},
		{"private wins over public", ex(200, "Cache-Control", "public, private, s-maxage=60"), httpcache.Policy{},
			notStored(reasonPrivate)},
		{"an empty qualified private prevents storing", ex(200, "Cache-Control", `private="", max-age=60`), httpcache.Policy{},
			notStored(reasonPrivate)},
		{"qualified private is stored", ex(200, "Cache-Control", `private="X-User", max-age=60`), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(60), Strip: []string{"X-User", "Set-Cookie"}}},

		{"Authorization without public is not stored",
			withReq(ex(200, "Cache-Control", "max-age=60"), "Authorization", "Bearer x"), force, notStored(reasonAuth)},
		{"Authorization with proxy-revalidate is not stored",
			withReq(ex(200, "Cache-Control", "max-age=60, proxy-revalidate"), "Authorization", "Bearer x"), httpcache.Policy{},
			notStored(reasonAuth)},
		{"an empty Authorization still counts",
			withReq(ex(200, "Cache-Control", "max-age=60"), "Authorization", ""), httpcache.Policy{}, notStored(reasonAuth)},
		{"Authorization with public is stored",
			withReq(ex(200, "Cache-Control", "public, max-age=60"), "Authorization", "Bearer x"), httpcache.Policy{}, stored(sec(60))},
		{"Authorization with s-maxage is stored",
			withReq(ex(200, "Cache-Control", "s-maxage=60"), "Authorization", "Bearer x"), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(60), MustRevalidate: true}},
		{"Authorization with an invalid s-maxage is not stored",
			withReq(ex(200, "Cache-Control", "s-maxage=soon", "ETag", `"v"`), "Authorization", "Bearer x"), httpcache.Policy{},
			notStored(reasonAuth)},
		{"Authorization with must-revalidate is stored",
			withReq(ex(200, "Cache-Control", "max-age=60, must-revalidate"), "Authorization", "Bearer x"), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(60), MustRevalidate: true}},
		{"Proxy-Authorization is not Authorization",
			withReq(ex(200, "Cache-Control", "max-age=60"), "Proxy-Authorization", "Basic x"), httpcache.Policy{}, stored(sec(60))},

		{"Set-Cookie prevents storing", ex(200, "Cache-Control", "max-age=60", "Set-Cookie", "s=1"), httpcache.Policy{},
			notStored(reasonSetCookie)},
		{"Set-Cookie prevents storing despite public and ForceTTL", ex(200, "Cache-Control", "public", "Set-Cookie", "s=1"), force,
			notStored(reasonSetCookie)},
		{"an empty Set-Cookie still prevents storing", ex(200, "Cache-Control", "max-age=60", "Set-Cookie", ""), httpcache.Policy{},
			notStored(reasonSetCookie)},
		{"AllowSetCookie lets a response with Set-Cookie be stored",
			ex(200, "Cache-Control", "max-age=60", "Set-Cookie", "s=1", "Set-Cookie", "t=2"), httpcache.Policy{AllowSetCookie: true},
			stored(sec(60))},
		{"private naming Set-Cookie lets the response be stored",
			ex(200, "Cache-Control", `private="Set-Cookie", max-age=60`, "Set-Cookie", "s=1"), httpcache.Policy{},
			stored(sec(60))},
		{"no-cache naming set-cookie in lowercase lets the response be stored",
			ex(200, "Cache-Control", `no-cache="set-cookie", max-age=60`, "Set-Cookie", "s=1"), httpcache.Policy{},
			stored(sec(60))},
		{"private naming another field does not allow Set-Cookie",
			ex(200, "Cache-Control", `private="X-A", max-age=60`, "Set-Cookie", "s=1"), httpcache.Policy{}, notStored(reasonSetCookie)},
		{"Set-Cookie2 is not Set-Cookie", ex(200, "Cache-Control", "max-age=60", "Set-Cookie2", "s=1"), httpcache.Policy{},
			stored(sec(60))},

		{"Vary: * prevents storing", ex(200, "Cache-Control", "max-age=60", "Vary", "*"), force, notStored(reasonVaryStar)},
		{"a * inside a Vary list prevents storing", ex(200, "Cache-Control", "max-age=60", "Vary", "Accept, * "), httpcache.Policy{},
			notStored(reasonVaryStar)},
		{"a * on a second Vary line prevents storing",
			ex(200, "Cache-Control", "max-age=60", "Vary", "Accept", "Vary", "*"), httpcache.Policy{}, notStored(reasonVaryStar)},
		{"Vary with field names is stored", ex(200, "Cache-Control", "max-age=60", "Vary", "Accept-Encoding"), httpcache.Policy{},
			stored(sec(60))},

		{"a 500 with only an ETag is not stored", ex(500, "ETag", `"a"`), httpcache.Policy{FallbackTTL: time.Hour},
			notStored(reasonNotByDefault)},
		{"a 302 without explicit freshness is not stored", ex(302, "ETag", `"a"`, "Last-Modified", date(t0)),
			httpcache.Policy{HeuristicFraction: 0.1}, notStored(reasonNotByDefault)},
		{"a 500 with max-age is stored", ex(500, "Cache-Control", "max-age=5"), httpcache.Policy{}, stored(sec(5))},
		{"a 302 with Expires is stored", ex(302, "Expires", date(t0.Add(time.Minute))), httpcache.Policy{}, stored(sec(60))},
		{"a 503 with s-maxage is stored", ex(503, "Cache-Control", "s-maxage=5"), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(5), MustRevalidate: true}},
		{"public makes a 500 with an ETag storable", ex(500, "Cache-Control", "public", "ETag", `"a"`), httpcache.Policy{},
			stored(0)},
		{"an unknown status with max-age is stored", ex(299, "Cache-Control", "max-age=60"), httpcache.Policy{}, stored(sec(60))},

		{"a 200 without freshness or validators is not stored", ex(200), httpcache.Policy{}, notStored(reasonNoInfo)},
		{"stale windows alone are not freshness information",
			ex(200, "Cache-Control", "stale-while-revalidate=60, stale-if-error=60"), httpcache.Policy{StaleIfError: time.Hour},
			notStored(reasonNoInfo)},
		{"a 200 with only an ETag is stored for revalidation", ex(200, "ETag", `"a"`), httpcache.Policy{}, stored(0)},
		{"a 200 with only Last-Modified is stored for revalidation", ex(200, "Last-Modified", date(t0.Add(-time.Hour))),
			httpcache.Policy{}, stored(0)},
		{"a 200 with an unparsable Last-Modified still has a validator", ex(200, "Last-Modified", "yesterday"),
			httpcache.Policy{}, stored(0)},
		{"an empty ETag is not a validator", ex(200, "ETag", ""), httpcache.Policy{}, notStored(reasonNoInfo)},
		{"max-age=0 without a validator is already stale", ex(200, "Cache-Control", "max-age=0"), httpcache.Policy{},
			notStored(reasonStale)},
		{"an invalid Expires without a validator is already stale", ex(200, "Expires", "0"), httpcache.Policy{},
			notStored(reasonStale)},
		{"an invalid max-age without a validator is already stale", ex(200, "Cache-Control", "max-age=soon"), httpcache.Policy{},
			notStored(reasonStale)},
		{"max-age=0 with a Policy stale window is stored", ex(200, "Cache-Control", "max-age=0"),
			httpcache.Policy{StaleWhileRevalidate: sec(30)}, httpcache.Decision{Store: true, StaleWhileRevalidate: sec(30)}},
		{"max-age=0 with the origin's stale-if-error is stored", ex(200, "Cache-Control", "max-age=0, stale-if-error=60"),
			httpcache.Policy{}, httpcache.Decision{Store: true, StaleIfError: sec(60)}},

		{"unqualified no-cache with an ETag is stored and always revalidated",
			ex(200, "Cache-Control", "no-cache, max-age=60", "ETag", `"a"`), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(60), NoCache: true}},
		{"unqualified no-cache with Last-Modified is stored",
			ex(200, "Cache-Control", "no-cache", "Last-Modified", date(t0.Add(-time.Hour))), httpcache.Policy{},
			httpcache.Decision{Store: true, NoCache: true}},
		{"unqualified no-cache without a validator is not stored", ex(200, "Cache-Control", "no-cache, max-age=60"),
			httpcache.Policy{}, notStored(reasonNoCache)},
		{"ForceTTL does not override no-cache: without a validator it is not stored",
			ex(200, "Cache-Control", "no-cache"), force, notStored(reasonNoCache)},
		{"ForceTTL with no-cache and a validator is stored and revalidated on every use",
			ex(200, "Cache-Control", "no-cache", "ETag", `"a"`), force,
			httpcache.Decision{Store: true, Lifetime: time.Hour, NoCache: true, Strip: []string{"Set-Cookie"}}},
		{"ForceTTL does not apply to a request with a Cookie: without freshness it is not stored",
			withReq(ex(200), "Cookie", "session=victim"), force, notStored(reasonCredentials)},
		{"FallbackTTL does not apply to a request with a Cookie",
			withReq(ex(200), "Cookie", "session=victim"), httpcache.Policy{FallbackTTL: time.Hour}, notStored(reasonCredentials)},
		{"NegativeTTL does not apply to a request with a Cookie",
			withReq(ex(404), "Cookie", "s=1"), httpcache.Policy{NegativeTTL: time.Hour}, notStored(reasonCredentials)},
		{"the Last-Modified heuristic does not apply to a request with a Cookie",
			withReq(ex(200, "Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT"), "Cookie", "s=1"), httpcache.Policy{HeuristicFraction: 0.1}, notStored(reasonCredentials)},
		{"validators alone do not store the answer to a request with a Cookie",
			withReq(ex(200, "ETag", `"v1"`), "Cookie", "s=1"), httpcache.Policy{}, notStored(reasonCredentials)},
		{"FallbackTTL applies to a request with a Cookie when the origin says public",
			withReq(ex(200, "Cache-Control", "public"), "Cookie", "s=1"), httpcache.Policy{FallbackTTL: time.Hour}, stored(time.Hour)},
		{"FallbackTTL applies to a request with a Cookie when the rule opts in",
			withReq(ex(200), "Cookie", "s=1"), httpcache.Policy{FallbackTTL: time.Hour, ForceTTLWithCredentials: true}, stored(time.Hour)},
		{"ForceTTL does not apply to a request with a Cookie: the origin's max-age decides",
			withReq(ex(200, "Cache-Control", "max-age=60"), "Cookie", "session=victim"), force, stored(sec(60))},
		{"ForceTTL applies to a request with a Cookie when the rule opts in",
			withReq(ex(200), "Cookie", "session=victim"), httpcache.Policy{ForceTTL: time.Hour, ForceTTLWithCredentials: true},
			stored(time.Hour)},
		{"ForceTTL does not apply to an authorized request the origin marked public: the origin's max-age decides",
			withReq(ex(200, "Cache-Control", "public, max-age=60"), "Authorization", "Bearer x"), force, stored(sec(60))},
		{"ForceTTL applies to an authorized public response when the rule opts in",
			withReq(ex(200, "Cache-Control", "public, max-age=60"), "Authorization", "Bearer x"),
			httpcache.Policy{ForceTTL: time.Hour, ForceTTLWithCredentials: true}, stored(time.Hour)},
		{"qualified no-cache is stored with the field stripped",
			ex(200, "Cache-Control", `no-cache="X-Token", max-age=60`), httpcache.Policy{},
			httpcache.Decision{Store: true, Lifetime: sec(60), Strip: []string{"X-Token", "Set-Cookie"}}},
		{"Pragma no-cache on a response is ignored", ex(200, "Cache-Control", "max-age=60", "Pragma", "no-cache"),
			httpcache.Policy{}, stored(sec(60))},
		{"Pragma no-cache alone on a response is ignored", ex(200, "Pragma", "no-cache", "ETag", `"a"`),
			httpcache.Policy{}, stored(0)},
	})
}

func TestDecideReadsEveryHeaderKind(t *testing.T) {
	x := httpcache.Exchange{
		Method: http.MethodGet, Status: 200,
		RespHeader:  entryHeader{{"cache-control", "max-age=60"}, {"date", date(t0)}, {"age", "3"}},
		ReqHeader:   nil,
		RequestTime: t0, ResponseTime: t0,
	}
	got := httpcache.Decide(x, httpcache.Policy{})
	if !got.Store || got.Lifetime != sec(60) || got.InitialAge != sec(3) {
		t.Errorf("got %+v", got)
	}
	x.RespHeader = nil
	if got := httpcache.Decide(x, httpcache.Policy{}); got.Store {
		t.Errorf("nil response header: got %+v", got)
	}
}

func TestHeuristicallyCacheable(t *testing.T) {
	yes := map[int]bool{200: true, 203: true, 204: true, 206: true, 300: true, 301: true, 308: true,
		404: true, 405: true, 410: true, 414: true, 501: true}
	for status := -1; status < 1000; status++ {
		if got := httpcache.HeuristicallyCacheable(status); got != yes[status] {
			t.Errorf("HeuristicallyCacheable(%d) = %v, want %v", status, got, yes[status])
		}
	}
}

func TestDecideSaysWhyAndFromWhere(t *testing.T) {
	tests := map[string]struct {
		x           httpcache.Exchange
		p           httpcache.Policy
		why, source string
	}{
		"private is private":                 {ex(200, "Cache-Control", "private, max-age=60"), httpcache.Policy{}, httpcache.WhyPrivate, ""},
		"no-store is no-store":               {ex(200, "Cache-Control", "no-store"), httpcache.Policy{}, httpcache.WhyNoStore, ""},
		"the request's no-store is its own":  {withReq(ex(200, "Cache-Control", "max-age=60"), "Cache-Control", "no-store"), httpcache.Policy{}, httpcache.WhyRequestNoStore, ""},
		"Set-Cookie is set-cookie":           {ex(200, "Cache-Control", "max-age=60", "Set-Cookie", "a=b"), httpcache.Policy{}, httpcache.WhySetCookie, ""},
		"Authorization is authorization":     {withReq(ex(200, "Cache-Control", "max-age=60"), "Authorization", "Bearer x"), httpcache.Policy{}, httpcache.WhyAuthorization, ""},
		"Vary: * is vary-star":               {ex(200, "Cache-Control", "max-age=60", "Vary", "*"), httpcache.Policy{}, httpcache.WhyVaryStar, ""},
		"a 500 without freshness is status":  {ex(500), httpcache.Policy{}, httpcache.WhyStatus, ""},
		"nothing to go by is no-freshness":   {ex(200), httpcache.Policy{}, httpcache.WhyNoFreshness, ""},
		"a cookie's answer needs freshness":  {withReq(ex(200), "Cookie", "a=b"), httpcache.Policy{FallbackTTL: time.Minute}, httpcache.WhyCredentials, ""},
		"no-cache without validator":         {ex(200, "Cache-Control", "no-cache"), httpcache.Policy{}, httpcache.WhyNoCacheNoValidator, ""},
		"a POST is method":                   {withMethod(ex(200, "Cache-Control", "max-age=60"), http.MethodPost), httpcache.Policy{}, httpcache.WhyMethod, ""},
		"max-age is explicit":                {ex(200, "Cache-Control", "max-age=60"), httpcache.Policy{}, "", "explicit"},
		"a rule's ttl is forced":             {ex(200), httpcache.Policy{ForceTTL: time.Minute}, "", "forced"},
		"the fallback TTL is fallback":       {ex(200), httpcache.Policy{FallbackTTL: time.Minute}, "", "fallback"},
		"the negative TTL is negative":       {ex(404), httpcache.Policy{NegativeTTL: time.Minute}, "", "negative"},
		"Last-Modified makes it heuristic":   {ex(200, "Last-Modified", date(t0.Add(-10*time.Hour))), httpcache.Policy{HeuristicFraction: 0.1}, "", "heuristic"},
		"a validator alone is stored for it": {ex(200, "ETag", `"x"`), httpcache.Policy{}, "", "none"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			d := httpcache.Decide(tt.x, tt.p)
			if d.Why != tt.why || d.Source != tt.source {
				t.Errorf("Decide: Why %q Source %q (%s), want Why %q Source %q", d.Why, d.Source, d.Reason, tt.why, tt.source)
			}
		})
	}
}
