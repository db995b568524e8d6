package httpcache_test

import (
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// The comparison table of RFC 9110 §8.8.3.2, checked through the two
// places that compare: If-None-Match (weak) and If-Range (strong).
func TestEntityTagComparison(t *testing.T) {
	tests := []struct {
		name           string
		client, stored string
		strong, weak   bool
	}{
		{"two equal weak tags match weakly only", `W/"1"`, `W/"1"`, false, true},
		{"two different weak tags do not match", `W/"1"`, `W/"2"`, false, false},
		{"a weak and a strong tag with equal opaque match weakly only", `W/"1"`, `"1"`, false, true},
		{"a strong and a weak tag with equal opaque match weakly only", `"1"`, `W/"1"`, false, true},
		{"two equal strong tags match both ways", `"1"`, `"1"`, true, true},
		{"two different strong tags do not match", `"1"`, `"2"`, false, false},
		{"opaque tags are compared byte for byte", `"abc"`, `"ABC"`, false, false},
		{"an empty opaque tag is a tag", `""`, `""`, true, true},
		{"a lowercase w/ is not a weak prefix", `w/"1"`, `"1"`, false, false},
		{"an unquoted stored ETag matches nothing", `"1"`, `1`, false, false},
		{"an unquoted client tag matches nothing", `1`, `"1"`, false, false},
	}
	stored200 := func(etag string) http.Header { return hdr("ETag", etag, "Date", date(t0)) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.NotModified(hdr("If-None-Match", tt.client), 200, stored200(tt.stored)); got != tt.weak {
				t.Errorf("If-None-Match (weak) = %v, want %v", got, tt.weak)
			}
			_, res := httpcache.EvalRange(hdr("Range", "bytes=0-0", "If-Range", tt.client), stored200(tt.stored), 10)
			if got := res == httpcache.RangeSatisfiable; got != tt.strong {
				t.Errorf("If-Range (strong) = %v, want %v", got, tt.strong)
			}
		})
	}
}

func TestNotModified(t *testing.T) {
	lm := date(t0.Add(-time.Hour))
	st := hdr("ETag", `"v2"`, "Last-Modified", lm, "Date", date(t0))
	tests := []struct {
		name   string
		req    http.Header
		status int
		stored httpcache.Header
		want   bool
	}{
		{"an unconditional request is not answered with 304", hdr(), 200, st, false},
		{"a matching If-None-Match gives 304", hdr("If-None-Match", `"v2"`), 200, st, true},
		{"a tag anywhere in the list matches", hdr("If-None-Match", `"v0", W/"v1" ,"v2"`), 200, st, true},
		{"a tag on a second field line matches", hdr("If-None-Match", `"v0"`, "If-None-Match", `"v2"`), 200, st, true},
		{"a list without the tag does not match", hdr("If-None-Match", `"v0", "v1"`), 200, st, false},
		{"star matches any stored response", hdr("If-None-Match", "*"), 200, hdr(), true},
		{"a tag that contains a comma is one tag", hdr("If-None-Match", `"a,b"`), 200, hdr("ETag", `"a,b"`), true},
		{"a malformed list stops at the damage", hdr("If-None-Match", `"v0", junk, "v2"`), 200, st, false},
		{"an unterminated tag matches nothing", hdr("If-None-Match", `"v2`), 200, st, false},
		{"If-None-Match without a stored ETag does not match", hdr("If-None-Match", `"v2"`), 200,
			hdr("Last-Modified", lm), false},
		{"If-None-Match takes precedence over a matching If-Modified-Since",
			hdr("If-None-Match", `"other"`, "If-Modified-Since", date(t0)), 200, st, false},
		{"a malformed If-None-Match still takes precedence", hdr("If-None-Match", "junk", "If-Modified-Since", date(t0)), 200, st,
			false},
		{"If-None-Match answers for any stored 2xx", hdr("If-None-Match", `"v2"`), 203, st, true},
		{"a stored 404 is never answered with 304", hdr("If-None-Match", `"v2"`), 404, st, false},
		{"a stored 301 is never answered with 304", hdr("If-None-Match", "*"), 301, st, false},

		{"If-Modified-Since at Last-Modified gives 304", hdr("If-Modified-Since", lm), 200, st, true},
		{"If-Modified-Since after Last-Modified gives 304", hdr("If-Modified-Since", date(t0.Add(-time.Minute))), 200, st, true},
		{"If-Modified-Since before Last-Modified does not", hdr("If-Modified-Since", date(t0.Add(-2*time.Hour))), 200, st, false},
		{"If-Modified-Since in another date format works", hdr("If-Modified-Since", t0.Add(-time.Minute).Format(time.ANSIC)),
			200, st, true},
		{"an invalid If-Modified-Since is ignored", hdr("If-Modified-Since", "yesterday"), 200, st, false},
		{"two If-Modified-Since lines are ignored", hdr("If-Modified-Since", lm, "If-Modified-Since", lm), 200, st, false},
		{"an If-Modified-Since later than the stored Date is compared like any other",
			hdr("If-Modified-Since", date(t0.Add(time.Hour))), 200, st, true},
		{"If-Modified-Since uses Date without Last-Modified", hdr("If-Modified-Since", date(t0)), 200, hdr("Date", date(t0)), true},
		{"If-Modified-Since after Date without Last-Modified gives 304",
			hdr("If-Modified-Since", date(t0.Add(time.Second))), 200, hdr("Date", date(t0)), true},
		{"If-Modified-Since before Date without Last-Modified does not match",
			hdr("If-Modified-Since", date(t0.Add(-time.Second))), 200, hdr("Date", date(t0)), false},
		{"If-Modified-Since uses Date when Last-Modified is invalid", hdr("If-Modified-Since", date(t0)), 200,
			hdr("Last-Modified", "junk", "Date", date(t0)), true},
		{"If-Modified-Since uses Date of an entry stored from a response without Date",
			hdr("If-Modified-Since", date(t0)), 200, func() http.Header {
				h := hdr("ETag", `"v"`)
				httpcache.AddDate(h, t0)
				return h
			}(), true},
		{"If-Modified-Since without any stored date does not match", hdr("If-Modified-Since", date(t0)), 200, hdr(), false},
		{"If-Modified-Since with an invalid stored Date and no Last-Modified does not match",
			hdr("If-Modified-Since", date(t0)), 200, hdr("Date", "junk"), false},
		{"If-Modified-Since without a stored Date uses Last-Modified",
			hdr("If-Modified-Since", date(t0.Add(time.Hour))), 200, hdr("Last-Modified", lm), true},
		{"Last-Modified wins over a later Date", hdr("If-Modified-Since", date(t0.Add(-30*time.Minute))), 200, st, true},
		{"If-Modified-Since only answers for a stored 200", hdr("If-Modified-Since", lm), 203, st, false},
		{"a nil stored header never matches a tag", hdr("If-None-Match", `"v2"`), 200, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.NotModified(tt.req, tt.status, tt.stored); got != tt.want {
				t.Errorf("NotModified = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestValidatorsFrom(t *testing.T) {
	lm := date(t0)
	tests := []struct {
		name   string
		stored httpcache.Header
		want   http.Header
	}{
		{"ETag and Last-Modified both become conditionals", hdr("ETag", `W/"x"`, "Last-Modified", lm),
			http.Header{"If-None-Match": {`W/"x"`}, "If-Modified-Since": {lm}}},
		{"only an ETag", hdr("ETag", ` "x" `), http.Header{"If-None-Match": {`"x"`}}},
		{"only a Last-Modified", hdr("Last-Modified", lm), http.Header{"If-Modified-Since": {lm}}},
		{"an invalid Last-Modified is not sent", hdr("Last-Modified", "then"), http.Header{}},
		{"no validators give an empty header", hdr("Date", lm), http.Header{}},
		{"another Header kind is read", entryHeader{{"etag", `"e"`}}, http.Header{"If-None-Match": {`"e"`}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.ValidatorsFrom(tt.stored); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ValidatorsFrom = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMergeNotModified(t *testing.T) {
	storedH := func() http.Header {
		return hdr("Content-Type", "text/plain", "Content-Length", "42", "Content-Encoding", "gzip",
			"ETag", `"v1"`, "Cache-Control", "max-age=60", "X-Keep", "k", "X-Multi", "a", "X-Multi", "b", "Date", date(t0))
	}
	tests := []struct {
		name string
		nm   http.Header
		want http.Header
	}{
		{"an empty 304 changes nothing", hdr(), storedH()},
		{"fields of the 304 replace the stored ones",
			hdr("Cache-Control", "max-age=600", "Date", date(t0.Add(time.Hour)), "ETag", `"v2"`, "X-New", "n"),
			func() http.Header {
				h := storedH()
				h.Set("Cache-Control", "max-age=600")
				h.Set("Date", date(t0.Add(time.Hour)))
				h.Set("ETag", `"v2"`)
				h.Set("X-New", "n")
				return h
			}()},
		{"all lines of a field are replaced together", hdr("X-Multi", "c"),
			func() http.Header { h := storedH(); h["X-Multi"] = []string{"c"}; return h }()},
		{"framing fields of the 304 are ignored",
			hdr("Content-Length", "0", "Content-Encoding", "br", "Transfer-Encoding", "chunked", "Content-Range", "bytes */42"),
			storedH()},
		{"hop-by-hop fields of the 304 are ignored",
			hdr("Connection", "X-Hop", "X-Hop", "1", "Keep-Alive", "timeout=5", "Te", "trailers", "Trailer", "X",
				"Upgrade", "h2c", "Proxy-Authenticate", "Basic", "Proxy-Connection", "keep-alive", "Proxy-Authorization", "x"),
			storedH()},
		{"Set-Cookie is merged so that Decide sees it", hdr("Set-Cookie", "s=1"),
			func() http.Header { h := storedH(); h.Set("Set-Cookie", "s=1"); return h }()},
		{"a non-canonical key in the 304 replaces the canonical stored one", http.Header{"x-keep": {"new"}},
			func() http.Header { h := storedH(); h.Set("X-Keep", "new"); return h }()},
		{"an empty field in the 304 is skipped", http.Header{"X-Keep": {}}, storedH()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, nm := storedH(), tt.nm.Clone()
			got := httpcache.MergeNotModified(st, nm)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("MergeNotModified\n got %v\nwant %v", got, tt.want)
			}
			if !reflect.DeepEqual(st, storedH()) || !reflect.DeepEqual(nm, tt.nm) {
				t.Errorf("an input was modified")
			}
		})
	}
	t.Run("the result shares no slices with the inputs", func(t *testing.T) {
		st, nm := storedH(), hdr("X-New", "n")
		got := httpcache.MergeNotModified(st, nm)
		got["X-Keep"][0], got["X-New"][0] = "changed", "changed"
		if st.Get("X-Keep") != "k" || nm.Get("X-New") != "n" {
			t.Errorf("inputs changed through the result")
		}
	})
	t.Run("a nil stored header gives the 304's end-to-end fields", func(t *testing.T) {
		got := httpcache.MergeNotModified(nil, hdr("ETag", `"x"`, "Connection", "close"))
		if want := hdr("ETag", `"x"`); !reflect.DeepEqual(got, want) {
			t.Errorf("got %v, want %v", got, want)
		}
	})
}

func TestAddDate(t *testing.T) {
	tests := []struct {
		name  string
		h     http.Header
		added bool
		want  []string
	}{
		{"a response without Date gets the time it was received", hdr(), true, []string{date(t0)}},
		{"a response with Date keeps it", hdr("Date", date(t0.Add(-time.Hour))), false, []string{date(t0.Add(-time.Hour))}},
		{"an invalid Date is left alone", hdr("Date", "junk"), false, []string{"junk"}},
		{"an empty Date line counts as present", http.Header{"Date": {""}}, false, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.AddDate(tt.h, t0.Add(500*time.Millisecond)); got != tt.added {
				t.Errorf("AddDate = %v, want %v", got, tt.added)
			}
			if got := tt.h["Date"]; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Date = %q, want %q", got, tt.want)
			}
		})
	}
}
