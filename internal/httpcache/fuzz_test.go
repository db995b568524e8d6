package httpcache_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// ccSeeds are realistic and hostile Cache-Control values.
var ccSeeds = []string{
	"", "max-age=60", "public, max-age=31536000, immutable", "no-cache", "no-store", "private",
	`private="Set-Cookie, X-User"`, `no-cache="set-cookie"`, "s-maxage=0, must-revalidate",
	"max-age=60, stale-while-revalidate=30, stale-if-error=86400", "max-age=-1", "max-age=1.5",
	"max-age=99999999999999999999999999999999", "max-age=60, max-age=61", `max-age="60"`,
	`max-age="6\0"`, `private="unterminated`, `"`, `=`, `,,,`, `\`, `no-cache="a\`, "max-stale",
	"max-stale=-5", "min-fresh=10, only-if-cached", "must-understand, no-store", "MAX-AGE=5",
	"max-age = 5", "\x00\xff\t max-age=\t5", strings.Repeat("a=b,", 100),
}

func validDelta(d httpcache.Delta) bool {
	return d.Value >= 0 && d.Value <= time.Duration(1<<31)*time.Second && (d.Valid || d.Value == 0)
}

func FuzzParseCacheControl(f *testing.F) {
	for _, s := range ccSeeds {
		f.Add(s, "")
		f.Add(s, "no-cache")
	}
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		h := http.Header{"Cache-Control": {line1, line2}, "Pragma": {line2}}
		r := httpcache.ParseResponseCC(h)
		for _, d := range []httpcache.Delta{r.MaxAge, r.SMaxAge, r.StaleWhileRevalidate, r.StaleIfError} {
			if !validDelta(d) {
				t.Errorf("response delta %+v out of range for %q %q", d, line1, line2)
			}
		}
		if r.Invalid && r.MaxAge.Value != 0 && r.SMaxAge.Value != 0 {
			t.Errorf("Invalid with non-zero freshness: %+v", r)
		}
		for _, f := range append(r.PrivateFields, r.NoCacheFields...) {
			if f == "" {
				t.Errorf("empty field name in %+v", r)
			}
		}
		q := httpcache.ParseRequestCC(h)
		for _, d := range []httpcache.Delta{q.MaxAge, q.MinFresh, q.StaleIfError, q.MaxStale} {
			if !validDelta(d) {
				t.Errorf("request delta %+v out of range for %q %q", d, line1, line2)
			}
		}
		if q.MaxStaleAny && q.MaxStale.Valid {
			t.Errorf("both MaxStaleAny and MaxStale: %+v", q)
		}
		// One field line is the same as the two joined by a comma, as long
		// as neither leaves a quoted string open.
		if !strings.Contains(line1, `"`) && !strings.Contains(line2, `"`) {
			joined := http.Header{"Cache-Control": {line1 + "," + line2}, "Pragma": {line2}}
			if a, b := httpcache.ParseRequestCC(joined), q; a != b {
				t.Errorf("joined %+v != separate %+v", a, b)
			}
		}
	})
}

func FuzzParseHTTPDate(f *testing.F) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Thu, 01 Jan 1970 00:00:00 GMT", "0", "-1", "", "Sun, 31 Feb 1994 08:49:37 GMT", "Sat, 31 Dec 2016 23:59:60 GMT",
		"Sun, 06 Nov 1994 08:49:37 PST", "Fri, 31 Dec 9999 23:59:59 GMT", "Mon, 01 Jan 0000 00:00:00 GMT",
		"Wednesday,", ",", "Sun Nov 6  08:49:37 1994", "Sun, 06 Nov 1994 8:49:37 GMT", "\xff\xfe, 06 Nov 1994 08:49:37 GMT",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, ok := httpcache.ParseHTTPDate(s)
		if !ok {
			if !tm.IsZero() {
				t.Errorf("not ok but time %v", tm)
			}
			return
		}
		if tm.Location() != time.UTC || tm.Nanosecond() != 0 {
			t.Errorf("%q: %v not whole UTC seconds", s, tm)
		}
		// Whatever parsed must survive a round trip through IMF-fixdate.
		if tm.Year() <= 9999 {
			back, ok := httpcache.ParseHTTPDate(tm.Format(http.TimeFormat))
			if !ok || !back.Equal(tm) {
				t.Errorf("%q: round trip of %v gave %v %v", s, tm, back, ok)
			}
		}
		age := httpcache.AgeValue(http.Header{"Age": {s}})
		if age < 0 || age > time.Duration(1<<31)*time.Second {
			t.Errorf("AgeValue(%q) = %v", s, age)
		}
	})
}

func FuzzAgeValue(f *testing.F) {
	for _, s := range []string{"0", "60", "60, 70", " 5 ", "-1", "1.5", "", "abc", "2147483648", "99999999999999999999999", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		age := httpcache.AgeValue(http.Header{"Age": {s}})
		if age < 0 || age > time.Duration(1<<31)*time.Second || age%time.Second != 0 {
			t.Errorf("AgeValue(%q) = %v", s, age)
		}
		if got := httpcache.AgeHeader(age); got == "" || strings.HasPrefix(got, "-") {
			t.Errorf("AgeHeader(%v) = %q", age, got)
		}
	})
}

func FuzzParseTargetedCC(f *testing.F) {
	for _, s := range ccSeeds {
		f.Add(s, "")
	}
	f.Add("max-age=60;a=1, no-cache;b", `private="x, y"`)
	f.Add("max-age=(1 2), s-maxage=?0", "stale-if-error=999999999999999")
	f.Add(`n=:aGk=:, d=@1, s=%"caf%c3%a9", t=*tok`, "")
	f.Fuzz(func(t *testing.T, line1, line2 string) {
		for _, lines := range [][]string{{line1}, {line1, line2}} {
			r, ok := httpcache.ParseTargetedCC(lines)
			if !ok && !reflect.DeepEqual(r, httpcache.ResponseCC{}) {
				t.Errorf("ignored field %q with directives %+v", lines, r)
			}
			if r.Invalid || r.Targeted != "" {
				t.Errorf("ParseTargetedCC(%q) = %+v: Invalid and Targeted are never its to set", lines, r)
			}
			for _, d := range []httpcache.Delta{r.MaxAge, r.SMaxAge, r.StaleWhileRevalidate, r.StaleIfError} {
				if !validDelta(d) {
					t.Errorf("delta %+v out of range for %q", d, lines)
				}
			}
			for _, f := range append(r.PrivateFields, r.NoCacheFields...) {
				if f == "" {
					t.Errorf("empty field name in %+v", r)
				}
			}
			// Selected or not, the decision of a cache with a target list
			// is a decision: never a panic.
			h := http.Header{"Cdn-Cache-Control": lines, "Cache-Control": {line2}, "Expires": {line1}}
			x := httpcache.Exchange{Method: http.MethodGet, ReqHeader: http.Header{}, Status: 200, RespHeader: h,
				RequestTime: t0, ResponseTime: t0}
			d := httpcache.Decide(x, httpcache.Policy{TargetedFields: []string{"Cdn-Cache-Control"}})
			if d.Store == (d.Reason != "") {
				t.Errorf("Store %v with reason %q", d.Store, d.Reason)
			}
		}
	})
}

func FuzzDecide(f *testing.F) {
	f.Add(200, "max-age=60", "", date(t0), "", "", "", "", int64(0), int64(0), int64(0))
	f.Add(200, "no-cache", "", "", "", `"x"`, "", "", int64(0), int64(time.Hour), int64(2))
	f.Add(404, "", "max-stale", date(t0), "0", "", date(t0.Add(-time.Hour)), "5", int64(time.Minute), int64(0), int64(-3))
	f.Add(302, "s-maxage=abc, stale-if-error=9999999999999", "no-store", "junk", "-1", "", "", "-5", int64(-1), int64(-1), int64(1<<40))
	f.Add(206, "must-understand, no-store", "", date(t0.Add(time.Hour)), date(t0), `W/"y"`, "Mon, 01 Jan 1900 00:00:00 GMT",
		"99999999999999999999", int64(1<<62), int64(1<<62), int64(-1<<62))
	f.Add(999, `private="set-cookie"`, "", "", "", "", "", "", int64(0), int64(0), int64(0))
	f.Fuzz(func(t *testing.T, status int, cc, reqCC, dateV, expires, etag, lastMod, age string, force, fallback, skew int64) {
		resp := http.Header{"Cache-Control": {cc}, "Date": {dateV}, "Expires": {expires}, "Etag": {etag},
			"Last-Modified": {lastMod}, "Age": {age}, "Set-Cookie": {reqCC}, "Vary": {etag}}
		req := http.Header{"Cache-Control": {reqCC}}
		x := httpcache.Exchange{Method: http.MethodGet, ReqHeader: req, Status: status, RespHeader: resp,
			RequestTime: t0.Add(time.Duration(skew)), ResponseTime: t0}
		p := httpcache.Policy{AllowSetCookie: force%2 == 0, ForceTTL: time.Duration(force), FallbackTTL: time.Duration(fallback),
			NegativeTTL: time.Duration(fallback / 2), MaxTTL: time.Duration(force / 3), HeuristicFraction: float64(skew) / 1e9,
			HeuristicMax: time.Duration(fallback), StaleWhileRevalidate: time.Duration(skew), StaleIfError: time.Duration(force)}
		d := httpcache.Decide(x, p)
		limit := time.Duration(1<<31) * time.Second
		for name, v := range map[string]time.Duration{"Lifetime": d.Lifetime, "InitialAge": d.InitialAge,
			"StaleWhileRevalidate": d.StaleWhileRevalidate, "StaleIfError": d.StaleIfError} {
			if v < 0 || v > limit {
				t.Errorf("%s = %v out of range: %+v", name, v, d)
			}
		}
		if d.Store == (d.Reason != "") {
			t.Errorf("Store %v with reason %q", d.Store, d.Reason)
		}
		if d.Store && (d.MustRevalidate || d.NoCache) && (d.StaleWhileRevalidate != 0 || d.StaleIfError != 0) {
			t.Errorf("stale windows with MustRevalidate/NoCache: %+v", d)
		}
		if d.Store && (status < 200 || status > 599 || status == 206 || status == 304) {
			t.Errorf("stored status %d", status)
		}
		if d.Store {
			s := httpcache.Stored{ResponseTime: t0, InitialAge: d.InitialAge, Lifetime: d.Lifetime,
				StaleWhileRevalidate: d.StaleWhileRevalidate, StaleIfError: d.StaleIfError,
				MustRevalidate: d.MustRevalidate, NoCache: d.NoCache}
			use, a := httpcache.Evaluate(s, httpcache.ParseRequestCC(req), t0.Add(time.Duration(skew)))
			if a < 0 || use > httpcache.UseValidate {
				t.Errorf("Evaluate = %v, %v", use, a)
			}
		}
	})
}

// normalizeRef is a plain reference for the value part of a Vary key:
// lines joined by commas, each element trimmed.
func normalizeRef(lines []string) string {
	parts := strings.Split(strings.Join(lines, ","), ",")
	for i, p := range parts {
		parts[i] = strings.Trim(p, " \t")
	}
	return strings.Join(parts, ",")
}

func FuzzAppendVaryKey(f *testing.F) {
	f.Add("gzip, br", "", "gzip,br", "", true)
	f.Add("a", "b", "a,b", "", false)
	f.Add("", "\x00", "\x01", "\x010", true)
	f.Add(" x ", "", "x", "y", true)
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string, twoLines bool) {
		ha := http.Header{"Accept": {a1}, "X-Other": {b2}}
		if twoLines {
			ha["Accept"] = append(ha["Accept"], a2)
		}
		hb := http.Header{"Accept": {b1}}
		names := []string{"accept", "x-other"}
		ka := httpcache.AppendVaryKey(nil, names, ha, httpcache.VaryOptions{})
		kb := httpcache.AppendVaryKey(nil, names, hb, httpcache.VaryOptions{})
		// hb never has X-Other while ha always has it: the keys must differ.
		if string(ka) == string(kb) {
			t.Errorf("present and absent X-Other gave the same key %q", ka)
		}
		sameValues := normalizeRef(ha["Accept"]) == normalizeRef(hb["Accept"])
		ka = httpcache.AppendVaryKey(nil, names[:1], ha, httpcache.VaryOptions{})
		kb = httpcache.AppendVaryKey(nil, names[:1], hb, httpcache.VaryOptions{})
		if (string(ka) == string(kb)) != sameValues {
			t.Errorf("values %q vs %q: keys %q vs %q", ha["Accept"], hb["Accept"], ka, kb)
		}
		// The same values through another Header kind give the same key.
		var eh entryHeader
		for _, v := range ha["Accept"] {
			eh = append(eh, [2]string{"accept", v})
		}
		if kc := httpcache.AppendVaryKey(nil, names[:1], eh, httpcache.VaryOptions{}); string(kc) != string(ka) {
			t.Errorf("http.Header key %q != other Header key %q", ka, kc)
		}
	})
}

// Normalized Accept-Language keys do not depend on the order of the
// elements or how they are split over lines, and the option never makes
// two values the same unless both were normalized.
func FuzzAcceptLanguageKey(f *testing.F) {
	f.Add("en, de;q=0.5", "FR;Q=0.50")
	f.Add("*", "")
	f.Add("en;q=2", "x-\x00")
	f.Add(strings.Repeat("en,", 40), "de")
	f.Fuzz(func(t *testing.T, a, b string) {
		norm := httpcache.VaryOptions{NormalizeAcceptLanguage: true}
		names := []string{"accept-language"}
		key := func(lines ...string) string {
			return string(httpcache.AppendVaryKey(nil, names, http.Header{"Accept-Language": lines}, norm))
		}
		ab, ba := key(a, b), key(b, a)
		joined := key(a + "," + b)
		normalized := strings.HasPrefix(ab, "accept-language\x00\x012")
		if normalized && (ab != ba || ab != joined) {
			t.Errorf("order or lines changed a normalized key: %q, %q, %q", ab, ba, joined)
		}
		plain := string(httpcache.AppendVaryKey(nil, names, http.Header{"Accept-Language": {a, b}}, httpcache.VaryOptions{}))
		if !normalized && ab != plain {
			t.Errorf("a value that was not normalized is keyed %q, not as received %q", ab, plain)
		}
	})
}

func FuzzConditionalAndRange(f *testing.F) {
	f.Add(`"a", W/"b"`, `"a"`, date(t0), "bytes=0-10", `"a"`, int64(100), "a b c", "x, y")
	f.Add("*", "", "junk", "bytes=-0", date(t0), int64(0), "", ",,,")
	f.Add(`"unterminated`, `W/"`, "", "bytes=5-3,1-2", "W/", int64(-1), strings.Repeat("k ", 100), strings.Repeat("t,", 100))
	f.Add(`W/""`, `""`, "Sun Nov  6 08:49:37 1994", "bytes=99999999999999999999-", "", int64(1<<62), "\x00", "\xff")
	f.Fuzz(func(t *testing.T, inm, etag, ims, rng, ifRange string, size int64, skeys, ctags string) {
		req := http.Header{"If-None-Match": {inm}, "If-Modified-Since": {ims}, "Range": {rng}, "If-Range": {ifRange}}
		stored := http.Header{"Etag": {etag}, "Last-Modified": {ims}, "Date": {ims},
			"Surrogate-Key": {skeys}, "Cache-Tag": {ctags}, "Connection": {skeys}}
		_ = httpcache.NotModified(req, 200, stored)
		delete(req, "If-None-Match")
		_ = httpcache.NotModified(req, 200, stored)
		r, res := httpcache.EvalRange(req, stored, size)
		switch res {
		case httpcache.RangeSatisfiable:
			if r.Start < 0 || r.Start > r.End || r.End >= size {
				t.Errorf("range %+v outside a body of %d", r, size)
			}
		case httpcache.RangeIgnore, httpcache.RangeUnsatisfiable:
			if r != (httpcache.ByteRange{}) {
				t.Errorf("range %+v with result %v", r, res)
			}
		default:
			t.Errorf("unknown result %v", res)
		}
		tags := httpcache.Tags(stored)
		if len(tags) > 64 {
			t.Errorf("%d tags", len(tags))
		}
		seen := map[string]bool{}
		for _, tg := range tags {
			if tg == "" || len(tg) > 256 || seen[tg] {
				t.Errorf("bad or duplicate tag %q", tg)
			}
			seen[tg] = true
		}
		_ = httpcache.ValidatorsFrom(stored)
		merged := httpcache.MergeNotModified(stored, req)
		httpcache.RemoveHopByHop(merged)
		if _, ok := merged["Connection"]; ok {
			t.Errorf("Connection survived RemoveHopByHop")
		}
		names, _ := httpcache.VaryNames(http.Header{"Vary": {skeys, ctags}})
		_ = httpcache.AppendVaryKey(nil, names, req, httpcache.VaryOptions{})
	})
}
