package httpcache_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestParseContentRange(t *testing.T) {
	cr := func(a, b, n int64) httpcache.ContentRange { return httpcache.ContentRange{Start: a, End: b, Length: n} }
	tests := []struct {
		name string
		in   string
		want httpcache.ContentRange
		ok   bool
	}{
		{"a range with its complete length is parsed", "bytes 0-4/10", cr(0, 4, 10), true},
		{"the last byte of the representation is parsed", "bytes 9-9/10", cr(9, 9, 10), true},
		{"an unknown complete length is parsed as -1", "bytes 4-9/*", cr(4, 9, -1), true},
		{"the unit is case-insensitive", "Bytes 1-2/3", cr(1, 2, 3), true},
		{"whitespace around the value is tolerated", " bytes 1-2/3 ", cr(1, 2, 3), true},
		{"a last position at the length is refused", "bytes 5-10/10", cr(0, 0, 0), false},
		{"a first position after the last is refused", "bytes 5-4/10", cr(0, 0, 0), false},
		{"an unsatisfied range is refused", "bytes */10", cr(0, 0, 0), false},
		{"another unit is refused", "items 0-4/10", cr(0, 0, 0), false},
		{"a missing length is refused", "bytes 0-4", cr(0, 0, 0), false},
		{"a missing space after the unit is refused", "bytes0-4/10", cr(0, 0, 0), false},
		{"an equals sign as in Range is refused", "bytes=0-4/10", cr(0, 0, 0), false},
		{"a negative position is refused", "bytes -1-4/10", cr(0, 0, 0), false},
		{"spaces inside the range are refused", "bytes 0 - 4/10", cr(0, 0, 0), false},
		{"a missing last position is refused", "bytes 0-/10", cr(0, 0, 0), false},
		{"several ranges are refused", "bytes 0-1,3-4/10", cr(0, 0, 0), false},
		{"a number past int64 is refused", "bytes 0-99999999999999999999/99999999999999999999", cr(0, 0, 0), false},
		{"an empty value is refused", "", cr(0, 0, 0), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := httpcache.ParseContentRange(tt.in)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("ParseContentRange(%q) = %+v, %v; want %+v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestStrongValidator(t *testing.T) {
	lm := t0.Add(-time.Hour)
	tests := []struct {
		name string
		h    http.Header
		want string
		has  bool
	}{
		{"a strong ETag is the validator", hdr("ETag", `"v1"`, "Date", date(t0)), `"v1"`, true},
		{"a strong ETag wins over Last-Modified", hdr("ETag", `"v1"`, "Last-Modified", date(lm), "Date", date(t0)), `"v1"`, true},
		{"a Last-Modified a second before Date is strong", hdr("Last-Modified", date(t0.Add(-time.Second)), "Date", date(t0)),
			date(t0.Add(-time.Second)), true},
		{"a Last-Modified is given as an IMF-fixdate", hdr("Last-Modified", lm.Format(time.ANSIC), "Date", date(t0)), date(lm), true},
		{"a weak ETag falls back to a strong Last-Modified", hdr("ETag", `W/"v1"`, "Last-Modified", date(lm), "Date", date(t0)),
			date(lm), true},
		{"a weak ETag alone is no strong validator", hdr("ETag", `W/"v1"`, "Date", date(t0)), "", true},
		{"a Last-Modified equal to Date is weak", hdr("Last-Modified", date(t0), "Date", date(t0)), "", true},
		{"a Last-Modified without Date is weak", hdr("Last-Modified", date(lm)), "", true},
		{"a malformed Last-Modified is no validator to use", hdr("Last-Modified", "yesterday", "Date", date(t0)), "", true},
		{"two ETag lines are no strong validator", hdr("ETag", `"a"`, "ETag", `"b"`, "Date", date(t0)), "", true},
		{"an unquoted ETag is no strong validator", hdr("ETag", `v1`, "Date", date(t0)), "", true},
		{"no validator at all is told apart", hdr("Date", date(t0)), "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, has := httpcache.StrongValidator(tt.h)
			if got != tt.want || has != tt.has {
				t.Errorf("StrongValidator = %q, %v; want %q, %v", got, has, tt.want, tt.has)
			}
		})
	}
}

// part is a 206 to a GET for bytes=0-4 at t0 with the response fields kv.
func part(kv ...string) httpcache.Exchange { return ex(http.StatusPartialContent, kv...) }

func TestDecidePartial(t *testing.T) {
	br := func(a, b int64) httpcache.ByteRange { return httpcache.ByteRange{Start: a, End: b} }
	cc := "Cache-Control"
	const fresh = "max-age=60"
	tests := []struct {
		name    string
		x       httpcache.Exchange
		sent    string
		cl      int64
		p       httpcache.Policy
		store   bool
		reason  string
		span    httpcache.ByteRange
		length  int64
		vld     string
		maxAge  time.Duration
		noCache bool
	}{
		{"a fresh 206 with a strong ETag is stored as a part", part(cc, fresh, "Content-Range", "bytes 0-4/10", "ETag", `"a"`),
			"bytes=0-4", 5, httpcache.Policy{}, true, "", br(0, 4), 10, `"a"`, 60 * time.Second, false},
		{"a fresh 206 without any validator is stored as a part", part(cc, fresh, "Content-Range", "bytes 4-9/10"),
			"bytes=-6", 6, httpcache.Policy{}, true, "", br(4, 9), 10, "", 60 * time.Second, false},
		{"a body of unknown length is stored once counted", part(cc, fresh, "Content-Range", "bytes 4-9/10"),
			"bytes=4-", -1, httpcache.Policy{}, true, "", br(4, 9), 10, "", 60 * time.Second, false},
		{"the origin may answer another range than asked", part(cc, fresh, "Content-Range", "bytes 0-4/10"),
			"bytes=-5", 5, httpcache.Policy{}, true, "", br(0, 4), 10, "", 60 * time.Second, false},
		{"a strong Last-Modified is the validator", part(cc, fresh, "Content-Range", "bytes 0-4/10", "Last-Modified", date(t0.Add(-time.Hour))),
			"bytes=0-4", 5, httpcache.Policy{}, true, "", br(0, 4), 10, date(t0.Add(-time.Hour)), 60 * time.Second, false},
		{"a 206 with a validator and no freshness is stored to be revalidated",
			part("Content-Range", "bytes 0-4/10", "ETag", `"a"`, cc, "no-cache"),
			"bytes=0-4", 5, httpcache.Policy{}, true, "", br(0, 4), 10, `"a"`, 0, true},

		{"a Content-Length other than the range's length is not stored", part(cc, fresh, "Content-Range", "bytes 4-9/10"),
			"bytes=-5", 5, httpcache.Policy{}, false, "the 206's Content-Length is not the length its Content-Range names", br(0, 0), 0, "", 0, false},
		{"a Content-Range past the complete length is not stored", part(cc, fresh, "Content-Range", "bytes 5-10/10"),
			"bytes=5-", 6, httpcache.Policy{}, false, "the 206's Content-Range is malformed", br(0, 0), 0, "", 0, false},
		{"a 206 without Content-Range is not stored", part(cc, fresh),
			"bytes=0-4", 5, httpcache.Policy{}, false, "a 206 needs exactly one Content-Range to be stored", br(0, 0), 0, "", 0, false},
		{"two Content-Range lines are not stored", part(cc, fresh, "Content-Range", "bytes 0-4/10", "Content-Range", "bytes 0-4/10"),
			"bytes=0-4", 5, httpcache.Policy{}, false, "a 206 needs exactly one Content-Range to be stored", br(0, 0), 0, "", 0, false},
		{"an unknown complete length is not stored", part(cc, fresh, "Content-Range", "bytes 0-4/*"),
			"bytes=0-4", 5, httpcache.Policy{}, false, "a 206 without a complete length (bytes a-b/*) is not stored", br(0, 0), 0, "", 0, false},
		{"multipart/byteranges is not stored", part(cc, fresh, "Content-Type", "multipart/byteranges; boundary=x", "Content-Range", "bytes 0-4/10"),
			"bytes=0-4", 5, httpcache.Policy{}, false, "a multipart/byteranges 206 is not stored", br(0, 0), 0, "", 0, false},
		{"an answer to several ranges is not stored", part(cc, fresh, "Content-Range", "bytes 0-4/10"),
			"bytes=0-4,6-7", 5, httpcache.Policy{}, false, "a 206 is stored only in answer to a single byte range", br(0, 0), 0, "", 0, false},
		{"an answer to no Range is not stored", part(cc, fresh, "Content-Range", "bytes 0-4/10"),
			"", 5, httpcache.Policy{}, false, "a 206 is stored only in answer to a single byte range", br(0, 0), 0, "", 0, false},
		{"a weak ETag alone is not stored", part(cc, fresh, "Content-Range", "bytes 0-4/10", "ETag", `W/"a"`),
			"bytes=0-4", 5, httpcache.Policy{}, false, "a 206 with only a weak validator is not stored", br(0, 0), 0, "", 0, false},
		{"no-store prevents storing a part", part(cc, "no-store", "Content-Range", "bytes 0-4/10", "ETag", `"a"`),
			"bytes=0-4", 5, httpcache.Policy{}, false, "no-store on the response prevents storing", br(0, 0), 0, "", 0, false},
		{"private prevents storing a part", part(cc, "private, max-age=60", "Content-Range", "bytes 0-4/10", "ETag", `"a"`),
			"bytes=0-4", 5, httpcache.Policy{}, false, "private prevents storing in a shared cache", br(0, 0), 0, "", 0, false},
		{"Vary: * prevents storing a part", part(cc, fresh, "Vary", "*", "Content-Range", "bytes 0-4/10", "ETag", `"a"`),
			"bytes=0-4", 5, httpcache.Policy{}, false, "Vary: * prevents storing", br(0, 0), 0, "", 0, false},
		{"a part with neither freshness nor validator is not stored", part("Content-Range", "bytes 0-4/10"),
			"bytes=0-4", 5, httpcache.Policy{}, false, "no freshness information and no validator", br(0, 0), 0, "", 0, false},
		{"a 200 is not a part", ex(200, cc, fresh, "Content-Range", "bytes 0-4/10"),
			"bytes=0-4", 5, httpcache.Policy{}, false, "only a 206 is a partial response", br(0, 0), 0, "", 0, false},
		{"a HEAD answer is not stored", withMethod(part(cc, fresh, "Content-Range", "bytes 0-4/10"), http.MethodHead),
			"bytes=0-4", 5, httpcache.Policy{}, false, "only GET responses are stored", br(0, 0), 0, "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := httpcache.DecidePartial(tt.x, tt.sent, tt.cl, tt.p)
			if got.Store != tt.store || got.Reason != tt.reason {
				t.Fatalf("Store %v (%q), want %v (%q)", got.Store, got.Reason, tt.store, tt.reason)
			}
			if !tt.store {
				return
			}
			if got.Span != tt.span || got.Length != tt.length || got.Validator != tt.vld ||
				got.Lifetime != tt.maxAge || got.NoCache != tt.noCache {
				t.Errorf("got span %+v length %d validator %q lifetime %v no-cache %v; want %+v %d %q %v %v",
					got.Span, got.Length, got.Validator, got.Lifetime, got.NoCache, tt.span, tt.length, tt.vld, tt.maxAge, tt.noCache)
			}
		})
	}
}

func TestDecideStillRefusesA206AsACompleteResponse(t *testing.T) {
	d := httpcache.Decide(part("Cache-Control", "max-age=60", "Content-Range", "bytes 0-4/10", "ETag", `"a"`), httpcache.Policy{})
	if d.Store {
		t.Fatal("Decide stored a 206 as if it were a complete response")
	}
}

func TestCanCombine(t *testing.T) {
	tests := []struct {
		name      string
		storedV   string
		storedLen int64
		fresh     bool
		newV      string
		newLen    int64
		want      bool
	}{
		{"the same strong ETag and length combine", `"a"`, 10, false, `"a"`, 10, true},
		{"the same strong Last-Modified combines", "Mon, 01 Jan 2024 00:00:00 GMT", 10, true, "Mon, 01 Jan 2024 00:00:00 GMT", 10, true},
		{"a stale stored part with the same strong validator combines", `"a"`, 10, false, `"a"`, 10, true},
		{"another ETag does not combine", `"a"`, 10, true, `"b"`, 10, false},
		{"another complete length does not combine", `"a"`, 10, true, `"a"`, 11, false},
		{"no validator on either side combines while the stored part is fresh", "", 10, true, "", 10, true},
		{"no validator on either side does not combine once the stored part is stale", "", 10, false, "", 10, false},
		{"a part with a validator does not combine with one without", "", 10, true, `"a"`, 10, false},
		{"a part without a validator does not combine with one with", `"a"`, 10, true, "", 10, false},
		{"an ETag never equals a date", `"Mon, 01 Jan 2024 00:00:00 GMT"`, 10, true, "Mon, 01 Jan 2024 00:00:00 GMT", 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.CanCombine(tt.storedV, tt.storedLen, tt.fresh, tt.newV, tt.newLen); got != tt.want {
				t.Errorf("CanCombine = %v, want %v", got, tt.want)
			}
		})
	}
}

type spans = []httpcache.ByteRange

func br(a, b int64) httpcache.ByteRange { return httpcache.ByteRange{Start: a, End: b} }

func TestAddSpan(t *testing.T) {
	tests := []struct {
		name string
		in   spans
		add  httpcache.ByteRange
		want spans
	}{
		{"a span is added to nothing", nil, br(3, 5), spans{br(3, 5)}},
		{"a span before the others goes first", spans{br(10, 12)}, br(0, 2), spans{br(0, 2), br(10, 12)}},
		{"a span after the others goes last", spans{br(0, 2)}, br(10, 12), spans{br(0, 2), br(10, 12)}},
		{"a span between two goes between them", spans{br(0, 2), br(20, 22)}, br(10, 12), spans{br(0, 2), br(10, 12), br(20, 22)}},
		{"an overlapping span merges", spans{br(0, 5)}, br(3, 8), spans{br(0, 8)}},
		{"an adjacent span after merges", spans{br(0, 4)}, br(5, 9), spans{br(0, 9)}},
		{"an adjacent span before merges", spans{br(5, 9)}, br(0, 4), spans{br(0, 9)}},
		{"a span one byte away does not merge", spans{br(0, 4)}, br(6, 9), spans{br(0, 4), br(6, 9)}},
		{"a span inside another changes nothing", spans{br(0, 9)}, br(3, 4), spans{br(0, 9)}},
		{"a span bridging two merges all three", spans{br(0, 2), br(6, 9)}, br(3, 5), spans{br(0, 9)}},
		{"a span covering several swallows them", spans{br(1, 2), br(4, 5), br(8, 8), br(20, 21)}, br(0, 10),
			spans{br(0, 10), br(20, 21)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := append(spans(nil), tt.in...)
			got := httpcache.AddSpan(tt.in, tt.add)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("AddSpan = %v, want %v", got, tt.want)
			}
			if !reflect.DeepEqual(tt.in, orig) && len(orig) > 0 {
				t.Errorf("AddSpan modified its input: %v, was %v", tt.in, orig)
			}
		})
	}
}

func TestGap(t *testing.T) {
	none, one, many := httpcache.GapNone, httpcache.GapOne, httpcache.GapMany
	tests := []struct {
		name    string
		held    spans
		want    httpcache.ByteRange
		gap     httpcache.ByteRange
		result  httpcache.GapResult
		covered bool
	}{
		{"a range inside a held span lacks nothing", spans{br(0, 9)}, br(2, 5), br(0, 0), none, true},
		{"the exact held span lacks nothing", spans{br(4, 9)}, br(4, 9), br(0, 0), none, true},
		{"nothing held lacks the whole range", nil, br(0, 9), br(0, 9), one, false},
		{"a held head lacks the tail", spans{br(0, 4)}, br(0, 9), br(5, 9), one, false},
		{"a held tail lacks the head", spans{br(5, 9)}, br(0, 9), br(0, 4), one, false},
		{"a held head and tail lack the middle", spans{br(0, 2), br(7, 9)}, br(0, 9), br(3, 6), one, false},
		{"a held middle lacks both ends", spans{br(3, 6)}, br(0, 9), br(0, 0), many, false},
		{"two holes are many gaps", spans{br(0, 1), br(4, 5), br(8, 9)}, br(0, 9), br(0, 0), many, false},
		{"spans outside the wanted range do not count", spans{br(0, 1), br(20, 30)}, br(5, 9), br(5, 9), one, false},
		{"a span starting inside the range leaves its head missing", spans{br(7, 30)}, br(5, 9), br(5, 6), one, false},
		{"a span ending inside the range leaves its tail missing", spans{br(0, 6)}, br(5, 9), br(7, 9), one, false},
		{"a held suffix answers a suffix range", spans{br(5, 9)}, br(9, 9), br(0, 0), none, true},
		{"two held spans around one missing byte lack that byte", spans{br(0, 4), br(6, 9)}, br(3, 7), br(5, 5), one, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gap, res := httpcache.Gap(tt.held, tt.want)
			if res != tt.result || gap != tt.gap {
				t.Errorf("Gap = %+v, %v; want %+v, %v", gap, res, tt.gap, tt.result)
			}
			if c := httpcache.Covers(tt.held, tt.want); c != tt.covered {
				t.Errorf("Covers = %v, want %v", c, tt.covered)
			}
		})
	}
}

func TestGapRangeAndContentRangeValue(t *testing.T) {
	tests := []struct {
		name       string
		r          httpcache.ByteRange
		length     int64
		rangeValue string
		crValue    string
	}{
		{"a gap to the end asks for the tail", br(5, 9), 10, "bytes=5-", "bytes 5-9/10"},
		{"a gap inside asks for both ends", br(3, 6), 10, "bytes=3-6", "bytes 3-6/10"},
		{"a gap at the start asks for both ends", br(0, 4), 10, "bytes=0-4", "bytes 0-4/10"},
		{"the whole of a one-byte representation", br(0, 0), 1, "bytes=0-", "bytes 0-0/1"},
		{"large positions are written in full", br(1<<40, 1<<41-1), 1 << 41, "bytes=1099511627776-", "bytes 1099511627776-2199023255551/2199023255552"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.GapRange(tt.r, tt.length); got != tt.rangeValue {
				t.Errorf("GapRange = %q, want %q", got, tt.rangeValue)
			}
			if got := httpcache.ContentRangeValue(tt.r, tt.length); got != tt.crValue {
				t.Errorf("ContentRangeValue = %q, want %q", got, tt.crValue)
			}
		})
	}
}

func TestSingleRange(t *testing.T) {
	tests := []struct {
		name string
		req  http.Header
		ok   bool
	}{
		{"one byte range is a single range", hdr("Range", "bytes=0-4"), true},
		{"a suffix range is a single range", hdr("Range", "bytes=-5"), true},
		{"an open range is a single range", hdr("Range", "bytes=5-"), true},
		{"an unsatisfiable range is still a single range", hdr("Range", "bytes=500-"), true},
		{"several ranges are not", hdr("Range", "bytes=0-1,3-4"), false},
		{"two Range lines are not", hdr("Range", "bytes=0-1", "Range", "bytes=3-4"), false},
		{"another unit is not", hdr("Range", "items=0-1"), false},
		{"a malformed range is not", hdr("Range", "bytes=5-1"), false},
		{"no Range is not", hdr(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := httpcache.SingleRange(tt.req)
			if ok != tt.ok || (ok && v != tt.req.Get("Range")) {
				t.Errorf("SingleRange = %q, %v; want ok %v", v, ok, tt.ok)
			}
		})
	}
}
