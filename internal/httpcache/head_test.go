package httpcache_test

import (
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// RFC 9111 §4.3.5: what a HEAD's answer does to the stored GET response.
func TestEffectOfHead(t *testing.T) {
	const etag, lm = `"v1"`, "Fri, 01 Mar 2024 11:00:00 GMT"
	storedFields := entryHeader{{"ETag", etag}, {"Last-Modified", lm}, {"Content-Type", "text/plain"}}
	tests := []struct {
		name         string
		storedStatus int
		stored       httpcache.Header
		storedLen    int64
		status       int
		head         httpcache.Header
		want         httpcache.HeadEffect
	}{
		{"a 200 with the stored validators and length updates", 200, storedFields, 5, 200,
			hdr("ETag", etag, "Last-Modified", lm, "Content-Length", "5", "Cache-Control", "max-age=60"), httpcache.HeadUpdates},
		{"a 200 without validators or length updates (nothing received disagrees)", 200, storedFields, 5, 200,
			hdr("Cache-Control", "max-age=60"), httpcache.HeadUpdates},
		{"a 200 with only the matching ETag updates", 200, storedFields, 5, 200, hdr("ETag", etag), httpcache.HeadUpdates},
		{"an ETag with white space around it still matches", 200, storedFields, 5, 200, hdr("ETag", " "+etag+" "), httpcache.HeadUpdates},
		{"a 200 with another ETag invalidates", 200, storedFields, 5, 200, hdr("ETag", `"v2"`), httpcache.HeadInvalidates},
		{"a weak ETag does not match the strong one stored", 200, storedFields, 5, 200, hdr("ETag", `W/"v1"`), httpcache.HeadInvalidates},
		{"an ETag when none is stored invalidates", 200, entryHeader{{"Content-Type", "text/plain"}}, 5, 200,
			hdr("ETag", etag), httpcache.HeadInvalidates},
		{"two ETag lines invalidate", 200, storedFields, 5, 200, hdr("ETag", etag, "ETag", etag), httpcache.HeadInvalidates},
		{"another Last-Modified invalidates", 200, storedFields, 5, 200,
			hdr("ETag", etag, "Last-Modified", "Fri, 01 Mar 2024 11:30:00 GMT"), httpcache.HeadInvalidates},
		{"another Content-Length invalidates", 200, storedFields, 5, 200, hdr("ETag", etag, "Content-Length", "6"), httpcache.HeadInvalidates},
		{"a Content-Length that is not a number invalidates", 200, storedFields, 5, 200, hdr("Content-Length", "5x"), httpcache.HeadInvalidates},
		{"a Content-Length of 0 matches an empty body", 200, storedFields, 0, 200, hdr("Content-Length", "0"), httpcache.HeadUpdates},
		{"the same Vary names in another order and case update", 200,
			entryHeader{{"Vary", "Accept-Encoding, accept-language"}}, 1, 200, hdr("Vary", "Accept-Language,Accept-Encoding"), httpcache.HeadUpdates},
		{"a Vary the stored response lacks invalidates", 200, storedFields, 5, 200, hdr("Vary", "Accept-Language"), httpcache.HeadInvalidates},
		{"a Vary the HEAD lacks invalidates", 200, entryHeader{{"Vary", "Accept-Language"}}, 5, 200, hdr(), httpcache.HeadInvalidates},
		{"Vary: * invalidates", 200, storedFields, 5, 200, hdr("Vary", "*"), httpcache.HeadInvalidates},
		{"a 200 for a stored 404 invalidates", 404, entryHeader{}, 9, 200, hdr(), httpcache.HeadInvalidates},
		{"a 304 leaves the stored response", 200, storedFields, 5, 304, hdr("ETag", `"v2"`), httpcache.HeadLeaves},
		{"a 404 leaves the stored response", 200, storedFields, 5, 404, hdr("Cache-Control", "max-age=60"), httpcache.HeadLeaves},
		{"a 410 leaves the stored response", 200, storedFields, 5, 410, hdr("ETag", `"v2"`), httpcache.HeadLeaves},
		{"a 500 leaves the stored response", 200, storedFields, 5, 500, hdr(), httpcache.HeadLeaves},
		{"a 203 leaves the stored response", 200, storedFields, 5, 203, hdr(), httpcache.HeadLeaves},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.EffectOfHead(tt.storedStatus, tt.stored, tt.storedLen, tt.status, tt.head); got != tt.want {
				t.Errorf("EffectOfHead = %d, want %d", got, tt.want)
			}
		})
	}
}
