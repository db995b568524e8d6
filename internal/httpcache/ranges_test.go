package httpcache_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestEvalRange(t *testing.T) {
	lm := date(t0.Add(-time.Hour))
	st := hdr("ETag", `"v1"`, "Last-Modified", lm)
	ign := httpcache.RangeIgnore
	sat := httpcache.RangeSatisfiable
	uns := httpcache.RangeUnsatisfiable
	br := func(a, b int64) httpcache.ByteRange { return httpcache.ByteRange{Start: a, End: b} }
	tests := []struct {
		name      string
		req       http.Header
		stored    httpcache.Header
		size      int64
		wantRange httpcache.ByteRange
		want      httpcache.RangeResult
	}{
		{"no Range serves the full response", hdr(), st, 100, br(0, 0), ign},
		{"a first-last range is served", hdr("Range", "bytes=0-9"), st, 100, br(0, 9), sat},
		{"a first- range runs to the end", hdr("Range", "bytes=90-"), st, 100, br(90, 99), sat},
		{"a suffix range serves the last bytes", hdr("Range", "bytes=-10"), st, 100, br(90, 99), sat},
		{"a suffix longer than the body serves it all", hdr("Range", "bytes=-1000"), st, 100, br(0, 99), sat},
		{"a last position past the end is clamped", hdr("Range", "bytes=50-1000"), st, 100, br(50, 99), sat},
		{"a single byte range is served", hdr("Range", "bytes=99-99"), st, 100, br(99, 99), sat},
		{"the unit is case-insensitive", hdr("Range", "Bytes=0-0"), st, 100, br(0, 0), sat},
		{"whitespace around the range is tolerated", hdr("Range", " bytes= 1-2 "), st, 100, br(1, 2), sat},
		{"an empty list element is tolerated", hdr("Range", "bytes=1-2,"), st, 100, br(1, 2), sat},
		{"a huge last position is clamped", hdr("Range", "bytes=0-99999999999999999999999"), st, 100, br(0, 99), sat},
		{"a huge suffix serves it all", hdr("Range", "bytes=-99999999999999999999999"), st, 100, br(0, 99), sat},

		{"a first position at the size is unsatisfiable", hdr("Range", "bytes=100-"), st, 100, br(0, 0), uns},
		{"a first position past the size is unsatisfiable", hdr("Range", "bytes=200-300"), st, 100, br(0, 0), uns},
		{"a huge first position is unsatisfiable", hdr("Range", "bytes=99999999999999999999999-"), st, 100, br(0, 0), uns},
		{"a zero suffix is unsatisfiable", hdr("Range", "bytes=-0"), st, 100, br(0, 0), uns},
		{"any int-range of an empty body is unsatisfiable", hdr("Range", "bytes=0-"), st, 0, br(0, 0), uns},
		{"a suffix range of an empty body serves the full empty response", hdr("Range", "bytes=-5"), st, 0, br(0, 0), ign},

		{"several ranges are ignored", hdr("Range", "bytes=0-1,5-6"), st, 100, br(0, 0), ign},
		{"two Range lines are ignored", hdr("Range", "bytes=0-1", "Range", "bytes=5-6"), st, 100, br(0, 0), ign},
		{"another unit is ignored", hdr("Range", "items=0-1"), st, 100, br(0, 0), ign},
		{"a missing unit is ignored", hdr("Range", "0-1"), st, 100, br(0, 0), ign},
		{"a reversed range is malformed", hdr("Range", "bytes=5-3"), st, 100, br(0, 0), ign},
		{"a range without a dash is malformed", hdr("Range", "bytes=5"), st, 100, br(0, 0), ign},
		{"a lone dash is malformed", hdr("Range", "bytes=-"), st, 100, br(0, 0), ign},
		{"a negative number is malformed", hdr("Range", "bytes=--5"), st, 100, br(0, 0), ign},
		{"spaces inside a range are malformed", hdr("Range", "bytes=1 -2"), st, 100, br(0, 0), ign},
		{"letters are malformed", hdr("Range", "bytes=a-b"), st, 100, br(0, 0), ign},
		{"an empty range set is malformed", hdr("Range", "bytes="), st, 100, br(0, 0), ign},
		{"a negative size is ignored", hdr("Range", "bytes=0-1"), st, -1, br(0, 0), ign},

		{"a matching strong If-Range serves the range", hdr("Range", "bytes=0-1", "If-Range", `"v1"`), st, 100, br(0, 1), sat},
		{"a different If-Range tag serves the full response", hdr("Range", "bytes=0-1", "If-Range", `"v0"`), st, 100, br(0, 0), ign},
		{"a weak If-Range never matches", hdr("Range", "bytes=0-1", "If-Range", `W/"v1"`), st, 100, br(0, 0), ign},
		{"a strong If-Range against a weak ETag does not match", hdr("Range", "bytes=0-1", "If-Range", `"v1"`),
			hdr("ETag", `W/"v1"`), 100, br(0, 0), ign},
		{"If-Range without a stored ETag does not match", hdr("Range", "bytes=0-1", "If-Range", `"v1"`),
			hdr("Last-Modified", lm), 100, br(0, 0), ign},
		{"a failed If-Range wins over unsatisfiability", hdr("Range", "bytes=500-", "If-Range", `"v0"`), st, 100, br(0, 0), ign},
		{"a matching If-Range still lets the range be unsatisfiable", hdr("Range", "bytes=500-", "If-Range", `"v1"`), st, 100,
			br(0, 0), uns},
		{"an If-Range date equal to Last-Modified serves the range", hdr("Range", "bytes=0-1", "If-Range", lm), st, 100, br(0, 1), sat},
		{"an If-Range date in another format but the same instant matches",
			hdr("Range", "bytes=0-1", "If-Range", t0.Add(-time.Hour).Format(time.ANSIC)), st, 100, br(0, 1), sat},
		{"an If-Range date after Last-Modified does not match",
			hdr("Range", "bytes=0-1", "If-Range", date(t0)), st, 100, br(0, 0), ign},
		{"an If-Range date without Last-Modified does not match", hdr("Range", "bytes=0-1", "If-Range", lm),
			hdr("ETag", `"v1"`), 100, br(0, 0), ign},
		{"a junk If-Range does not match", hdr("Range", "bytes=0-1", "If-Range", "whatever"), st, 100, br(0, 0), ign},
		{"an empty If-Range does not match", hdr("Range", "bytes=0-1", "If-Range", ""), st, 100, br(0, 0), ign},
		{"two If-Range lines do not match", hdr("Range", "bytes=0-1", "If-Range", `"v1"`, "If-Range", `"v1"`), st, 100,
			br(0, 0), ign},
		{"If-Range without Range is ignored", hdr("If-Range", `"v1"`), st, 100, br(0, 0), ign},
		{"If-Range is not looked at for a malformed Range", hdr("Range", "bytes=x", "If-Range", `"v1"`), st, 100, br(0, 0), ign},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, res := httpcache.EvalRange(tt.req, tt.stored, tt.size)
			if res != tt.want || r != tt.wantRange {
				t.Errorf("EvalRange = %+v, %v; want %+v, %v", r, res, tt.wantRange, tt.want)
			}
		})
	}
}
