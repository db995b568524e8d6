package httpcache_test

import (
	"net/http"
	"reflect"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestRemoveHopByHop(t *testing.T) {
	tests := []struct {
		name string
		in   http.Header
		want http.Header
	}{
		{"the fixed hop-by-hop fields go",
			hdr("Connection", "close", "Keep-Alive", "timeout=5", "Proxy-Connection", "keep-alive", "TE", "trailers",
				"Transfer-Encoding", "chunked", "Upgrade", "websocket", "Trailer", "X-T", "Proxy-Authenticate", "Basic",
				"Proxy-Authorization", "Basic x", "Content-Type", "text/html"),
			hdr("Content-Type", "text/html")},
		{"fields named by Connection go", hdr("Connection", "X-A, x-b", "Connection", "X-C", "X-A", "1", "X-B", "2", "X-C", "3",
			"X-D", "4"), hdr("X-D", "4")},
		{"Connection lists tolerate whitespace and empty elements", hdr("Connection", " , X-A ,, ", "X-A", "1", "X-B", "2"),
			hdr("X-B", "2")},
		{"Connection naming an end-to-end field removes it", hdr("Connection", "Cache-Control", "Cache-Control", "no-store",
			"ETag", `"x"`), hdr("ETag", `"x"`)},
		{"non-canonical keys are matched", http.Header{"keep-alive": {"x"}, "x-a": {"1"}, "Connection": {"X-A"}, "Etag": {"e"}},
			http.Header{"Etag": {"e"}}},
		{"a header without hop-by-hop fields is unchanged", hdr("ETag", `"x"`, "Vary", "Accept"), hdr("ETag", `"x"`, "Vary", "Accept")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.in.Clone()
			httpcache.RemoveHopByHop(h)
			if !reflect.DeepEqual(h, tt.want) {
				t.Errorf("got %v, want %v", h, tt.want)
			}
		})
	}
	t.Run("a nil header does not panic", func(t *testing.T) { httpcache.RemoveHopByHop(nil) })
}

func TestNamesFields(t *testing.T) {
	cases := map[string]struct {
		lines []string
		want  bool
	}{
		"no Connection field names nothing":          {nil, false},
		"keep-alive names no other field":            {[]string{"keep-alive"}, false},
		"close and keep-alive in any case name none": {[]string{"Keep-Alive, CLOSE"}, false},
		"a field name is named":                      {[]string{"keep-alive, Accept-Language"}, true},
		"a name on a second line is named":           {[]string{"close", "X-Tenant"}, true},
		"upgrade names the Upgrade field":            {[]string{"Upgrade"}, true},
		"empty elements name nothing":                {[]string{" , ,keep-alive"}, false},
	}
	for name, c := range cases {
		if got := httpcache.NamesFields(c.lines); got != c.want {
			t.Errorf("%s: NamesFields(%q) = %v, want %v", name, c.lines, got, c.want)
		}
	}
}
