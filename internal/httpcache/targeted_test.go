package httpcache_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// RFC 9213 §2.2: a targeted field is a Structured Fields Dictionary whose
// members are cache directives with typed values.
func TestParseTargetedCC(t *testing.T) {
	type cc = httpcache.ResponseCC
	tests := []struct {
		name   string
		lines  []string
		want   cc
		wantOK bool
	}{
		{"max-age is an Integer", []string{"max-age=60"}, cc{MaxAge: d(60)}, true},
		{"max-age=0 is valid", []string{"max-age=0"}, cc{MaxAge: d(0)}, true},
		{"every delta-seconds directive is read",
			[]string{"max-age=60, s-maxage=30, stale-while-revalidate=10, stale-if-error=600"},
			cc{MaxAge: d(60), SMaxAge: d(30), StaleWhileRevalidate: d(10), StaleIfError: d(600)}, true},
		{"every flag is read as a bare key",
			[]string{"public, no-store, must-revalidate, proxy-revalidate, no-transform, immutable, must-understand"},
			cc{Public: true, NoStore: true, MustRevalidate: true, ProxyRevalidate: true, NoTransform: true, Immutable: true,
				MustUnderstand: true}, true},
		{"a flag written as ?1 is the same as a bare key", []string{"no-store=?1"}, cc{NoStore: true}, true},
		{"unqualified private", []string{"private"}, cc{Private: true}, true},
		{"unqualified no-cache", []string{"no-cache"}, cc{NoCache: true}, true},
		{"a String on private names the fields it covers", []string{`private="Set-Cookie, x-user"`},
			cc{PrivateFields: []string{"Set-Cookie", "X-User"}}, true},
		{"a String on no-cache names the fields it covers", []string{`no-cache="set-cookie"`},
			cc{NoCacheFields: []string{"Set-Cookie"}}, true},
		{"an empty String on private is unqualified private", []string{`private=""`}, cc{Private: true}, true},
		{"max-age and no-store side by side are both read", []string{"max-age=10, no-store"},
			cc{MaxAge: d(10), NoStore: true}, true},
		{"max-age past 2^31 seconds clamps to 2^31 seconds", []string{"max-age=99999999999"},
			cc{MaxAge: httpcache.Delta{Valid: true, Value: maxDelta}}, true},
		{"max-age of exactly 2^31 is kept", []string{"max-age=2147483648"},
			cc{MaxAge: httpcache.Delta{Valid: true, Value: maxDelta}}, true},
		{"parameters on a directive are ignored", []string{"max-age=60;foo=bar, no-cache;a;b=?0"},
			cc{MaxAge: d(60), NoCache: true}, true},
		{"unknown directives are ignored whatever their value", []string{`foobar, ext="x", max-age=3600, n=(1 2), t=tok`},
			cc{MaxAge: d(3600)}, true},
		{"a field with only unknown directives is valid and has no directive", []string{"foo"}, cc{}, true},
		{"a key given twice keeps its last value", []string{"max-age=10, max-age=20"}, cc{MaxAge: d(20)}, true},
		{"a key given twice across field lines keeps its last value", []string{"max-age=10", "max-age=20"},
			cc{MaxAge: d(20)}, true},
		{"a wrong-typed value overridden by a good one is not seen", []string{`max-age="x", max-age=5`}, cc{MaxAge: d(5)}, true},
		{"field lines are joined into one dictionary", []string{"max-age=60", "no-cache"},
			cc{MaxAge: d(60), NoCache: true}, true},
		{"spaces after the comma are allowed", []string{"max-age=60,   public"}, cc{MaxAge: d(60), Public: true}, true},

		{"a quoted max-age is a String and makes the field invalid", []string{`max-age="10"`}, cc{}, false},
		{"a decimal max-age makes the field invalid", []string{"max-age=1.5"}, cc{}, false},
		{"a negative max-age makes the field invalid", []string{"max-age=-1"}, cc{}, false},
		{"a Token max-age makes the field invalid", []string{"max-age=abc"}, cc{}, false},
		{"a Boolean max-age makes the field invalid", []string{"max-age=?1"}, cc{}, false},
		{"max-age without a value makes the field invalid", []string{"max-age"}, cc{}, false},
		{"an inner list for max-age makes the field invalid", []string{"max-age=(1 2)"}, cc{}, false},
		{"a wrong-typed s-maxage makes the field invalid", []string{`max-age=60, s-maxage="60"`}, cc{}, false},
		{"a wrong-typed stale-while-revalidate makes the field invalid", []string{"max-age=60, stale-while-revalidate=1.0"},
			cc{}, false},
		{"a wrong-typed stale-if-error makes the field invalid", []string{"max-age=60, stale-if-error=-5"}, cc{}, false},
		{"no-store=?0 makes the field invalid", []string{"max-age=60, no-store=?0"}, cc{}, false},
		{"a flag with an Integer makes the field invalid", []string{"no-store=1"}, cc{}, false},
		{"private with an Integer makes the field invalid", []string{"private=1"}, cc{}, false},
		{"no-cache=?0 makes the field invalid", []string{"no-cache=?0"}, cc{}, false},
		{"a wrong-typed last duplicate makes the field invalid", []string{`max-age=10, max-age="x"`}, cc{}, false},
		{"an Integer of more than 15 digits is not a valid field", []string{"max-age=9999999999999999"}, cc{}, false},
		{"an uppercase key is not a valid field", []string{"MaX-aGe=3600"}, cc{}, false},
		{"a space before = is not a valid field", []string{"max-age =100"}, cc{}, false},
		{"a space after = is not a valid field", []string{"max-age= 100"}, cc{}, false},
		{"junk after a valid member is not a valid field", []string{"max-age=10000, &&&&&"}, cc{}, false},
		{"a trailing comma is not a valid field", []string{"max-age=60,"}, cc{}, false},
		{"an empty field line among others leaves a trailing comma", []string{"max-age=60", ""}, cc{}, false},
		{"a single-quoted value is not a valid field", []string{"max-age='60'"}, cc{}, false},
		{"an empty field is ignored", []string{""}, cc{}, false},
		{"a field of spaces is ignored", []string{"   "}, cc{}, false},
		{"no field lines at all are ignored", nil, cc{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := httpcache.ParseTargetedCC(tt.lines)
			if ok != tt.wantOK || !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseTargetedCC(%q)\n got %+v, %v\nwant %+v, %v", tt.lines, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// RFC 9213 §2.1: the first field of the target list that is present,
// valid and non-empty replaces Cache-Control.
func TestSelectResponseCC(t *testing.T) {
	const cdn, own = "Cdn-Cache-Control", "Tiercache-Cache-Control"
	both := []string{own, cdn}
	type cc = httpcache.ResponseCC
	tests := []struct {
		name     string
		h        httpcache.Header
		targeted []string
		want     cc
	}{
		{"without a target list Cache-Control decides", hdr("Cache-Control", "max-age=5", "CDN-Cache-Control", "max-age=60"),
			nil, cc{MaxAge: d(5)}},
		{"without any targeted field Cache-Control decides", hdr("Cache-Control", "max-age=5"), both, cc{MaxAge: d(5)}},
		{"a valid CDN-Cache-Control replaces Cache-Control",
			hdr("Cache-Control", "no-store, must-revalidate", "CDN-Cache-Control", "max-age=60"), []string{cdn},
			cc{MaxAge: d(60), Targeted: cdn}},
		{"an invalid CDN-Cache-Control is ignored and Cache-Control decides",
			hdr("Cache-Control", "no-store", "CDN-Cache-Control", `max-age="60"`), []string{cdn}, cc{NoStore: true}},
		{"an empty CDN-Cache-Control is ignored and Cache-Control decides",
			hdr("Cache-Control", "max-age=5", "CDN-Cache-Control", ""), []string{cdn}, cc{MaxAge: d(5)}},
		{"a valid field without a known directive still replaces Cache-Control",
			hdr("Cache-Control", "max-age=5", "CDN-Cache-Control", "foo"), []string{cdn}, cc{Targeted: cdn}},
		{"the first listed field wins over a later one", hdr("CDN-Cache-Control", "max-age=60", "Tiercache-Cache-Control", "no-store"),
			both, cc{NoStore: true, Targeted: own}},
		{"the list's order counts, not which field the response names first",
			hdr("Tiercache-Cache-Control", "no-store", "CDN-Cache-Control", "max-age=60"), []string{cdn, own},
			cc{MaxAge: d(60), Targeted: cdn}},
		{"a later listed field is used when the first is absent", hdr("Cache-Control", "max-age=5", "CDN-Cache-Control", "max-age=60"),
			both, cc{MaxAge: d(60), Targeted: cdn}},
		{"an invalid first field falls through to the next listed one",
			hdr("Tiercache-Cache-Control", "max-age=1.5", "CDN-Cache-Control", "max-age=60", "Cache-Control", "max-age=5"), both,
			cc{MaxAge: d(60), Targeted: cdn}},
		{"an empty first field falls through to the next listed one",
			hdr("Tiercache-Cache-Control", "", "CDN-Cache-Control", "private"), both, cc{Private: true, Targeted: cdn}},
		{"when every listed field is invalid Cache-Control decides",
			hdr("Tiercache-Cache-Control", "X=1", "CDN-Cache-Control", "max-age=-1", "Cache-Control", "max-age=5"), both,
			cc{MaxAge: d(5)}},
		{"a targeted field that is not on the list changes nothing",
			hdr("CDN-Cache-Control", "no-store", "Cache-Control", "max-age=5"), []string{own}, cc{MaxAge: d(5)}},
		{"a stored header is read the same way", entryHeader{{"cdn-cache-control", "max-age=60"}, {"cache-control", "no-store"}},
			[]string{cdn}, cc{MaxAge: d(60), Targeted: cdn}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.SelectResponseCC(tt.h, tt.targeted); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("SelectResponseCC\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

// Decide with a target list: the selected field's directives alone decide
// storability and freshness; Cache-Control and Expires are ignored.
func TestDecideTargeted(t *testing.T) {
	p := httpcache.Policy{TargetedFields: []string{"Tiercache-Cache-Control", "Cdn-Cache-Control"}}
	future, past := date(t0.Add(10000*time.Second)), date(t0.Add(-10000*time.Second))
	withEtag := func(kv ...string) httpcache.Exchange { return ex(200, append(kv, "ETag", `"v"`)...) }
	mr := func(l time.Duration) httpcache.Decision {
		return httpcache.Decision{Store: true, Lifetime: l, MustRevalidate: true}
	}
	runDecide(t, []decideCase{
		{"a CDN-Cache-Control max-age longer than Cache-Control's is the lifetime",
			ex(200, "Cache-Control", "max-age=1", "CDN-Cache-Control", "max-age=3600"), p, stored(sec(3600))},
		{"a CDN-Cache-Control max-age shorter than Cache-Control's is the lifetime",
			ex(200, "Cache-Control", "max-age=3600", "CDN-Cache-Control", "max-age=1"), p, stored(sec(1))},
		{"CDN-Cache-Control no-store prevents storing despite Cache-Control max-age and Expires",
			ex(200, "Cache-Control", "max-age=10000", "CDN-Cache-Control", "no-store", "Expires", future), p,
			notStored(reasonRespNoStore)},
		{"a CDN-Cache-Control max-age stores despite Cache-Control no-store",
			ex(200, "Cache-Control", "no-store", "CDN-Cache-Control", "max-age=10000"), p, stored(sec(10000))},
		{"CDN-Cache-Control private prevents storing despite Cache-Control max-age and Expires",
			ex(200, "CDN-Cache-Control", "private", "Cache-Control", "max-age=10000", "Expires", future), p,
			notStored(reasonPrivate)},
		{"CDN-Cache-Control no-cache without a validator is not stored despite Cache-Control max-age",
			ex(200, "CDN-Cache-Control", "no-cache", "Cache-Control", "max-age=10000", "Expires", future), p,
			notStored(reasonNoCache)},
		{"CDN-Cache-Control no-cache with a validator is stored and revalidated on every use",
			withEtag("CDN-Cache-Control", "no-cache", "Cache-Control", "max-age=10000"), p,
			httpcache.Decision{Store: true, NoCache: true}},
		{"a CDN-Cache-Control max-age ignores a past Expires",
			ex(200, "CDN-Cache-Control", "max-age=3600", "Expires", past), p, stored(sec(3600))},
		{"a CDN-Cache-Control max-age ignores an invalid Expires",
			ex(200, "CDN-Cache-Control", "max-age=3600", "Expires", "0"), p, stored(sec(3600))},
		{"CDN-Cache-Control max-age=0 ignores a future Expires", withEtag("CDN-Cache-Control", "max-age=0", "Expires", future), p,
			stored(0)},
		{"CDN-Cache-Control max-age=0 without a validator is not stored despite a future Expires",
			ex(200, "CDN-Cache-Control", "max-age=0", "Expires", future), p, notStored(reasonStale)},
		{"a CDN-Cache-Control without freshness ignores Expires too",
			ex(200, "CDN-Cache-Control", "public", "Expires", future, "Cache-Control", "max-age=60"), p, notStored(reasonNoInfo)},
		{"a CDN-Cache-Control without a known directive leaves heuristic freshness",
			ex(200, "CDN-Cache-Control", "foo", "Cache-Control", "no-store", "Last-Modified", date(t0.Add(-100*time.Second))),
			httpcache.Policy{TargetedFields: p.TargetedFields, HeuristicFraction: 0.1}, stored(sec(10))},
		{"an invalid CDN-Cache-Control leaves Cache-Control in charge",
			ex(200, "CDN-Cache-Control", `max-age="10000"`, "Cache-Control", "no-store"), p, notStored(reasonRespNoStore)},
		{"an invalid CDN-Cache-Control leaves Expires in charge too",
			ex(200, "CDN-Cache-Control", "max-age=10000, &&&&&", "Expires", date(t0.Add(90*time.Second))), p, stored(sec(90))},
		{"CDN-Cache-Control s-maxage wins over its max-age and forbids stale use",
			ex(200, "CDN-Cache-Control", "max-age=60, s-maxage=600, stale-while-revalidate=30"), p, mr(sec(600))},
		{"CDN-Cache-Control must-revalidate forbids stale use",
			ex(200, "CDN-Cache-Control", "max-age=60, must-revalidate", "Cache-Control", "stale-if-error=60"), p, mr(sec(60))},
		{"CDN-Cache-Control proxy-revalidate forbids stale use", ex(200, "CDN-Cache-Control", "max-age=60, proxy-revalidate"), p,
			mr(sec(60))},
		{"Cache-Control must-revalidate is ignored under a CDN-Cache-Control",
			ex(200, "CDN-Cache-Control", "max-age=60", "Cache-Control", "max-age=60, must-revalidate"), p, stored(sec(60))},
		{"the stale windows come from CDN-Cache-Control",
			ex(200, "CDN-Cache-Control", "max-age=60, stale-while-revalidate=30, stale-if-error=600",
				"Cache-Control", "max-age=60, stale-while-revalidate=1, stale-if-error=5"), p,
			httpcache.Decision{Store: true, Lifetime: sec(60), StaleWhileRevalidate: sec(30), StaleIfError: sec(600)}},
		{"Cache-Control stale windows are ignored under a CDN-Cache-Control",
			ex(200, "CDN-Cache-Control", "max-age=60", "Cache-Control", "max-age=60, stale-while-revalidate=30"), p,
			stored(sec(60))},
		{"the tier's stale windows still apply under a CDN-Cache-Control",
			ex(200, "CDN-Cache-Control", "max-age=60"),
			httpcache.Policy{TargetedFields: p.TargetedFields, StaleIfError: time.Minute},
			httpcache.Decision{Store: true, Lifetime: sec(60), StaleIfError: time.Minute}},
		{"a request with Authorization is stored with public in CDN-Cache-Control",
			withReq(ex(200, "CDN-Cache-Control", "public, max-age=60"), "Authorization", "Bearer x"), p, stored(sec(60))},
		{"public in Cache-Control does not share an authorized answer under a CDN-Cache-Control",
			withReq(ex(200, "CDN-Cache-Control", "max-age=60", "Cache-Control", "public"), "Authorization", "Bearer x"), p,
			notStored(reasonAuth)},
		{"CDN-Cache-Control private naming Set-Cookie stores the response without it",
			ex(200, "CDN-Cache-Control", `max-age=60, private="set-cookie"`, "Set-Cookie", "a=b"), p, stored(sec(60))},
		{"no-store on the request still prevents storing", withReq(ex(200, "CDN-Cache-Control", "max-age=60"),
			"Cache-Control", "no-store"), p, notStored(reasonReqNoStore)},
		{"the response's Age counts against a CDN-Cache-Control max-age",
			ex(200, "CDN-Cache-Control", "max-age=3600", "Age", "7200"), p,
			httpcache.Decision{Store: true, Lifetime: sec(3600), InitialAge: sec(7200)}},
		{"a custom field first in the list wins over CDN-Cache-Control",
			ex(200, "Tiercache-Cache-Control", "max-age=600", "CDN-Cache-Control", "no-store"), p, stored(sec(600))},
		{"a rule's forced TTL still yields to a CDN-Cache-Control no-store",
			ex(200, "CDN-Cache-Control", "no-store", "Cache-Control", "max-age=60"),
			httpcache.Policy{TargetedFields: p.TargetedFields, ForceTTL: time.Hour}, notStored(reasonRespNoStore)},
		{"without a target list CDN-Cache-Control is ignored",
			ex(200, "CDN-Cache-Control", "no-store", "Cache-Control", "max-age=60"), httpcache.Policy{}, stored(sec(60))},
	})
}

// A stored response is read again from its stored header when a 304
// revalidates it: with the same target list it gets the same decision.
func TestDecideTargetedIsTheSameOnTheStoredHeader(t *testing.T) {
	p := httpcache.Policy{TargetedFields: []string{"Cdn-Cache-Control"}}
	x := ex(200, "Cache-Control", "max-age=1", "CDN-Cache-Control", "max-age=3600", "ETag", `"v"`)
	first := httpcache.Decide(x, p)
	merged := httpcache.MergeNotModified(x.RespHeader.(http.Header), http.Header{"Date": {date(t0)}})
	x.RespHeader = merged
	if again := httpcache.Decide(x, p); !reflect.DeepEqual(again, first) || first.Lifetime != sec(3600) {
		t.Errorf("first %+v, after the 304 %+v", first, again)
	}
}
