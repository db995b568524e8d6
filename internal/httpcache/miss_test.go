package httpcache_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// RFC 9110 §13.2.1: the preconditions only the origin can evaluate.
func TestHasOriginPrecondition(t *testing.T) {
	tests := []struct {
		name string
		h    http.Header
		want bool
	}{
		{"If-Match goes to the origin", hdr("If-Match", `"v1"`), true},
		{"If-Unmodified-Since goes to the origin", hdr("If-Unmodified-Since", "Fri, 01 Mar 2024 11:00:00 GMT"), true},
		{"If-None-Match is the cache's to answer", hdr("If-None-Match", `"v1"`), false},
		{"If-Modified-Since is the cache's to answer", hdr("If-Modified-Since", "Fri, 01 Mar 2024 11:00:00 GMT"), false},
		{"If-Range is the cache's to answer", hdr("Range", "bytes=0-1", "If-Range", `"v1"`), false},
		{"no precondition", hdr(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.HasOriginPrecondition(tt.h); got != tt.want {
				t.Errorf("HasOriginPrecondition = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestRouteMiss(t *testing.T) {
	const get, head = http.MethodGet, http.MethodHead
	tests := []struct {
		name           string
		method         string
		h              http.Header
		haveStored     bool
		updateFromHead bool
		want           httpcache.MissRoute
	}{
		{"a GET without Range is a fill", get, hdr(), false, false, httpcache.MissFill},
		{"a GET that revalidates a stored response is a fill", get, hdr(), true, false, httpcache.MissFill},
		{"a HEAD is passed, never stored as a GET response", head, hdr(), false, true, httpcache.MissPass},
		{"a HEAD with a stored response is passed when the tier does not let HEAD update", head, hdr(), true, false, httpcache.MissPass},
		{"a HEAD with a stored response may update it when the tier allows", head, hdr(), true, true, httpcache.MissHeadUpdate},
		{"a HEAD with Range never updates", head, hdr("Range", "bytes=0-1"), true, true, httpcache.MissPass},
		{"a HEAD with the request's no-store never updates", head, hdr("Cache-Control", "no-store"), true, true, httpcache.MissPass},
		{"a HEAD with Authorization never updates (its answer may be personal)", head, hdr("Authorization", "Basic eDp5"), true, true, httpcache.MissPass},
		{"a HEAD with Cookie never updates (its answer may be personal)", head, hdr("Cookie", "a=b"), true, true, httpcache.MissPass},
		{"a single range asks for that range", get, hdr("Range", "bytes=0-1"), false, false, httpcache.MissRange},
		{"a suffix range asks for that range", get, hdr("Range", "bytes=-5"), false, false, httpcache.MissRange},
		{"a single range with one If-Range asks for that range", get, hdr("Range", "bytes=5-", "If-Range", `"v1"`), false, false, httpcache.MissRange},
		{"a range with two If-Range lines is passed", get, hdr("Range", "bytes=5-", "If-Range", `"v1"`, "If-Range", `"v2"`), false, false, httpcache.MissPass},
		{"several ranges are passed (their answer is never stored)", get, hdr("Range", "bytes=0-1,5-6"), false, false, httpcache.MissPass},
		{"two Range lines are passed", get, hdr("Range", "bytes=0-1", "Range", "bytes=5-6"), false, false, httpcache.MissPass},
		{"a range of another unit is passed", get, hdr("Range", "items=0-1"), false, false, httpcache.MissPass},
		{"a range a stored response must be revalidated for is passed", get, hdr("Range", "bytes=0-1"), true, false, httpcache.MissPass},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rcc := httpcache.ParseRequestCC(tt.h)
			if got := httpcache.RouteMiss(tt.method, tt.h, rcc, tt.haveStored, tt.updateFromHead); got != tt.want {
				t.Errorf("RouteMiss = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOnUncacheable(t *testing.T) {
	tests := []struct {
		name                   string
		status                 int
		h                      http.Header
		haveStored, behindVary bool
		want                   httpcache.UncacheableEffect
	}{
		{"an uncacheable 200 marks the key hit-for-miss", 200, hdr(), false, false, httpcache.UncacheableMarks},
		{"an uncacheable 200 replaces a stored response with the marker", 200, hdr(), true, false, httpcache.UncacheableMarks},
		{"a 404 that cannot be stored marks the key", 404, hdr(), true, false, httpcache.UncacheableMarks},
		{"a 500 leaves what is stored (errors say nothing about the response)", 500, hdr(), true, false, httpcache.UncacheableLeaves},
		{"a 503 leaves an empty key unmarked", 503, hdr(), false, false, httpcache.UncacheableLeaves},
		{"the request's own no-store leaves what is stored", 200, hdr("Cache-Control", "no-store"), true, false, httpcache.UncacheableLeaves},
		{"an answer to Authorization never removes what is stored", 200, hdr("Authorization", "Basic eDp5"), true, false, httpcache.UncacheableLeaves},
		{"an answer to Cookie never removes what is stored", 200, hdr("Cookie", "a=b"), true, false, httpcache.UncacheableLeaves},
		{"an answer to Cookie marks a key where nothing is stored", 200, hdr("Cookie", "a=b"), false, false, httpcache.UncacheableMarks},
		{"behind a Vary marker the stored variant is removed", 200, hdr(), true, true, httpcache.UncacheableRemoves},
		{"behind a Vary marker nothing is marked where nothing is stored", 200, hdr(), false, true, httpcache.UncacheableLeaves},
		{"behind a Vary marker an answer to Cookie leaves the stored variant", 200, hdr("Cookie", "a=b"), true, true, httpcache.UncacheableLeaves},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rcc := httpcache.ParseRequestCC(tt.h)
			if got := httpcache.OnUncacheable(tt.status, tt.h, rcc, tt.haveStored, tt.behindVary); got != tt.want {
				t.Errorf("OnUncacheable = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestOmitForNotModified(t *testing.T) {
	h := hdr("Content-Length", "5", "Content-Type", "text/plain", "Content-Range", "bytes 0-4/10", "Transfer-Encoding", "chunked",
		"ETag", `"v1"`, "Cache-Control", "max-age=60", "Vary", "Accept", "Content-Location", "/a", "Expires", "x", "Date", "y")
	httpcache.OmitForNotModified(h)
	got := keysOf(h)
	want := []string{"Cache-Control", "Content-Location", "Date", "Etag", "Expires", "Vary"}
	if !slices.Equal(got, want) {
		t.Errorf("a 304 keeps %v, want %v", got, want)
	}
}

func TestStoredHeader(t *testing.T) {
	tests := []struct {
		name  string
		src   http.Header
		strip []string
		want  []string // the field names kept
	}{
		{"end-to-end fields are kept", hdr("Content-Type", "text/plain", "ETag", `"v1"`), nil, []string{"Content-Type", "Etag"}},
		{"hop-by-hop fields are not stored", hdr("Connection", "close", "Keep-Alive", "timeout=5", "Transfer-Encoding", "chunked", "ETag", `"v1"`),
			nil, []string{"Etag"}},
		{"a field Connection names is not stored", hdr("Connection", "X-Hop", "X-Hop", "1", "ETag", `"v1"`), nil, []string{"Etag"}},
		{"the fields the decision strips are not stored", hdr("Set-Cookie", "a=b", "X-Private", "1", "ETag", `"v1"`),
			[]string{"Set-Cookie", "X-Private"}, []string{"Etag"}},
		{"Age and Content-Length are computed again, not stored", hdr("Age", "30", "Content-Length", "5", "ETag", `"v1"`), nil, []string{"Etag"}},
		{"the cache's own fields are never taken from an origin", hdr("X-Cache", "HIT", "Tiercache-Debug", "key=x", "ETag", `"v1"`),
			nil, []string{"Etag"}},
		{"an empty header stores nothing", nil, nil, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before http.Header
			if tt.src != nil {
				before = tt.src.Clone()
			}
			got := keysOf(httpcache.StoredHeader(tt.src, tt.strip, []string{"X-Cache", "Tiercache-Debug"}))
			if !slices.Equal(got, tt.want) {
				t.Errorf("stored fields %v, want %v", got, tt.want)
			}
			if len(tt.src) != len(before) {
				t.Errorf("StoredHeader modified its input: %v, was %v", tt.src, before)
			}
		})
	}
}

func keysOf(h http.Header) []string {
	ks := make([]string, 0, len(h))
	for k := range h {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
