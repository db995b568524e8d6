package httpcache_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func d(n int64) httpcache.Delta { return httpcache.Delta{Valid: true, Value: sec(n)} }

func TestParseResponseCC(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  httpcache.ResponseCC
	}{
		{"no Cache-Control gives the zero value", nil, httpcache.ResponseCC{}},
		{"an empty field gives the zero value", []string{""}, httpcache.ResponseCC{}},
		{"boolean directives are recognised",
			[]string{"public, no-cache, no-store, must-revalidate, proxy-revalidate, no-transform, immutable, must-understand"},
			httpcache.ResponseCC{Public: true, NoCache: true, NoStore: true, MustRevalidate: true, ProxyRevalidate: true,
				NoTransform: true, Immutable: true, MustUnderstand: true}},
		{"unqualified private sets Private", []string{"private"}, httpcache.ResponseCC{Private: true}},
		{"directive names are case-insensitive", []string{"Max-Age=60, S-MAXAGE=30, PUBLIC, No-Store"},
			httpcache.ResponseCC{MaxAge: d(60), SMaxAge: d(30), Public: true, NoStore: true}},
		{"max-age and s-maxage are parsed", []string{"max-age=60, s-maxage=120"},
			httpcache.ResponseCC{MaxAge: d(60), SMaxAge: d(120)}},
		{"max-age=0 is valid", []string{"max-age=0"}, httpcache.ResponseCC{MaxAge: d(0)}},
		{"leading zeros are fine", []string{"max-age=0060"}, httpcache.ResponseCC{MaxAge: d(60)}},
		{"a quoted max-age is tolerated", []string{`max-age="60"`}, httpcache.ResponseCC{MaxAge: d(60)}},
		{"whitespace around = and values is tolerated", []string{"max-age = 60 ,\tpublic"},
			httpcache.ResponseCC{MaxAge: d(60), Public: true}},
		{"max-age past 2^31 clamps to 2^31 seconds", []string{"max-age=99999999999999999999999999"},
			httpcache.ResponseCC{MaxAge: httpcache.Delta{Valid: true, Value: maxDelta}}},
		{"max-age of exactly 2^31 is kept", []string{"max-age=2147483648"},
			httpcache.ResponseCC{MaxAge: httpcache.Delta{Valid: true, Value: maxDelta}}},
		{"a negative max-age is invalid and treated as 0", []string{"max-age=-1"},
			httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"a non-integer max-age is invalid", []string{"max-age=1.5"}, httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"a max-age with letters is invalid", []string{"max-age=60s"}, httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"max-age without a value is invalid", []string{"max-age"}, httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"max-age with an empty value is invalid", []string{"max-age="}, httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"an invalid s-maxage is invalid and treated as 0", []string{"s-maxage=abc, max-age=60"},
			httpcache.ResponseCC{SMaxAge: d(0), MaxAge: d(60), Invalid: true}},
		{"identical duplicate max-age values are fine", []string{"max-age=60, max-age=60"},
			httpcache.ResponseCC{MaxAge: d(60)}},
		{"identical duplicates across field lines are fine", []string{"max-age=60", "max-age=060"},
			httpcache.ResponseCC{MaxAge: d(60)}},
		{"conflicting duplicate max-age values are invalid", []string{"max-age=60, max-age=120"},
			httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"conflicting duplicates across field lines are invalid", []string{"s-maxage=60", "s-maxage=61"},
			httpcache.ResponseCC{SMaxAge: d(0), Invalid: true}},
		{"an invalid duplicate poisons a valid max-age", []string{"max-age=60, max-age=x"},
			httpcache.ResponseCC{MaxAge: d(0), Invalid: true}},
		{"multiple field lines are combined", []string{"public", "max-age=30", "stale-if-error=5"},
			httpcache.ResponseCC{Public: true, MaxAge: d(30), StaleIfError: d(5)}},
		{"stale windows are parsed", []string{"stale-while-revalidate=30, stale-if-error=600"},
			httpcache.ResponseCC{StaleWhileRevalidate: d(30), StaleIfError: d(600)}},
		{"an invalid stale window is ignored", []string{"stale-while-revalidate=-5, stale-if-error=soon"},
			httpcache.ResponseCC{}},
		{"duplicate stale windows keep the smallest", []string{"stale-while-revalidate=30, stale-while-revalidate=10"},
			httpcache.ResponseCC{StaleWhileRevalidate: d(10)}},
		{"a stale window past 2^31 clamps", []string{"stale-if-error=4294967296"},
			httpcache.ResponseCC{StaleIfError: httpcache.Delta{Valid: true, Value: maxDelta}}},
		{"qualified private lists canonical field names", []string{`private="set-cookie, x-user"`},
			httpcache.ResponseCC{PrivateFields: []string{"Set-Cookie", "X-User"}}},
		{"qualified no-cache lists canonical field names", []string{`no-cache="Set-Cookie"`},
			httpcache.ResponseCC{NoCacheFields: []string{"Set-Cookie"}}},
		{"an unquoted qualified no-cache names one field", []string{`no-cache=set-cookie, max-age=5`},
			httpcache.ResponseCC{NoCacheFields: []string{"Set-Cookie"}, MaxAge: d(5)}},
		{"qualified field names are deduplicated", []string{`private="a, A", private="b,a"`},
			httpcache.ResponseCC{PrivateFields: []string{"A", "B"}}},
		{"an empty qualified private counts as unqualified", []string{`private=""`}, httpcache.ResponseCC{Private: true}},
		{"an empty qualified no-cache counts as unqualified", []string{`no-cache=" , "`}, httpcache.ResponseCC{NoCache: true}},
		{"qualified and unqualified no-cache are both kept", []string{`no-cache="X-A", no-cache`},
			httpcache.ResponseCC{NoCache: true, NoCacheFields: []string{"X-A"}}},
		{"a comma inside quotes does not split directives", []string{`private="x-a, max-age=5"`},
			httpcache.ResponseCC{PrivateFields: []string{"X-A", "max-age=5"}}},
		{"quoted-pairs are unescaped", []string{`no-cache="x-\a", max-age=5`},
			httpcache.ResponseCC{NoCacheFields: []string{"X-A"}, MaxAge: d(5)}},
		{"an unterminated quote swallows the rest of the line", []string{`private="x-a, max-age=5`},
			httpcache.ResponseCC{PrivateFields: []string{"X-A", "max-age=5"}}},
		{"junk after a quoted value is skipped", []string{`max-age="60"junk, public`},
			httpcache.ResponseCC{MaxAge: d(60), Public: true}},
		{"unknown directives are ignored", []string{"foo, bar=baz, max-age=5, =7, ,,"},
			httpcache.ResponseCC{MaxAge: d(5)}},
		{"a value on a boolean directive does not matter", []string{"no-store=1"}, httpcache.ResponseCC{NoStore: true}},
		{"a directive name with inner space is unknown", []string{"max age=5"}, httpcache.ResponseCC{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			for _, l := range tt.lines {
				h.Add("Cache-Control", l)
			}
			got := httpcache.ParseResponseCC(h)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseResponseCC(%q)\n got %+v\nwant %+v", tt.lines, got, tt.want)
			}
		})
	}
}

func TestParseResponseCCReadsEveryHeaderKind(t *testing.T) {
	h := entryHeader{{"cache-control", "max-age=5"}, {"Cache-Control", "public"}}
	got := httpcache.ParseResponseCC(h)
	if !got.Public || got.MaxAge != d(5) {
		t.Errorf("got %+v", got)
	}
	if got := httpcache.ParseResponseCC(nil); !reflect.DeepEqual(got, httpcache.ResponseCC{}) {
		t.Errorf("nil Header: got %+v", got)
	}
}

func TestParseRequestCC(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want httpcache.RequestCC
	}{
		{"no fields give the zero value", hdr(), httpcache.RequestCC{}},
		{"boolean directives are recognised", hdr("Cache-Control", "no-cache, no-store, only-if-cached, no-transform"),
			httpcache.RequestCC{NoCache: true, NoStore: true, OnlyIfCached: true, NoTransform: true}},
		{"delta directives are parsed", hdr("Cache-Control", "max-age=10, min-fresh=20, max-stale=30, stale-if-error=40"),
			httpcache.RequestCC{MaxAge: d(10), MinFresh: d(20), MaxStale: d(30), StaleIfError: d(40)}},
		{"max-stale without a value accepts any staleness", hdr("Cache-Control", "max-stale"),
			httpcache.RequestCC{MaxStaleAny: true}},
		{"a bounded max-stale wins over an unbounded one", hdr("Cache-Control", "max-stale, max-stale=5"),
			httpcache.RequestCC{MaxStale: d(5)}},
		{"an invalid max-stale is ignored", hdr("Cache-Control", "max-stale=-1"), httpcache.RequestCC{}},
		{"an invalid max-age counts as max-age=0", hdr("Cache-Control", "max-age=abc"),
			httpcache.RequestCC{MaxAge: d(0)}},
		{"an invalid min-fresh is ignored", hdr("Cache-Control", "min-fresh=1.5"), httpcache.RequestCC{}},
		{"duplicate max-age keeps the smallest", hdr("Cache-Control", "max-age=60", "Cache-Control", "max-age=10"),
			httpcache.RequestCC{MaxAge: d(10)}},
		{"duplicate min-fresh keeps the largest", hdr("Cache-Control", "min-fresh=5, min-fresh=50"),
			httpcache.RequestCC{MinFresh: d(50)}},
		{"duplicate max-stale keeps the smallest", hdr("Cache-Control", "max-stale=50, max-stale=5"),
			httpcache.RequestCC{MaxStale: d(5)}},
		{"a huge max-age clamps to 2^31 seconds", hdr("Cache-Control", "max-age=1000000000000"),
			httpcache.RequestCC{MaxAge: httpcache.Delta{Valid: true, Value: maxDelta}}},
		{"a quoted value is tolerated", hdr("Cache-Control", `max-age="0"`), httpcache.RequestCC{MaxAge: d(0)}},
		{"directive names are case-insensitive", hdr("Cache-Control", "NO-CACHE, Max-Age=3"),
			httpcache.RequestCC{NoCache: true, MaxAge: d(3)}},
		{"Pragma no-cache counts when there is no Cache-Control", hdr("Pragma", "no-cache"),
			httpcache.RequestCC{NoCache: true}},
		{"Pragma is matched case-insensitively in a list", hdr("Pragma", "x-foo, No-Cache"),
			httpcache.RequestCC{NoCache: true}},
		{"Pragma is ignored when Cache-Control is present", hdr("Pragma", "no-cache", "Cache-Control", "max-age=5"),
			httpcache.RequestCC{MaxAge: d(5)}},
		{"Pragma is ignored even with an empty Cache-Control", hdr("Pragma", "no-cache", "Cache-Control", ""),
			httpcache.RequestCC{}},
		{"other Pragma values mean nothing", hdr("Pragma", "no-cache=x, cache"), httpcache.RequestCC{}},
		{"unknown request directives are ignored", hdr("Cache-Control", "s-maxage=5, public, foo"), httpcache.RequestCC{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.ParseRequestCC(tt.h); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ParseRequestCC(%v)\n got %+v\nwant %+v", tt.h, got, tt.want)
			}
		})
	}
}
