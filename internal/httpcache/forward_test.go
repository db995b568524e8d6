package httpcache_test

import (
	"reflect"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestForwardedValidators(t *testing.T) {
	const ims = "Fri, 01 Mar 2024 11:00:00 GMT"
	both := hdr("If-None-Match", `"a"`, "If-Modified-Since", ims, "If-Range", `"a"`, "Range", "bytes=0-1")
	tests := []struct {
		name           string
		req            httpcache.Header
		forward, store bool
		want           []string
	}{
		{"a tier that withholds validators forwards none", both, false, false, nil},
		{"a tier that forwards them forwards both when nothing is stored", both, true, false,
			[]string{"If-None-Match", "If-Modified-Since"}},
		{"a stored response is validated with its own validators instead", both, true, true, nil},
		{"only the validators the client sent are forwarded", hdr("If-Modified-Since", ims), true, false,
			[]string{"If-Modified-Since"}},
		{"an unquoted If-None-Match is forwarded as received (the origin judges it)", hdr("If-None-Match", "abc"), true, false,
			[]string{"If-None-Match"}},
		{"If-Range and Range are never forwarded by a fill", hdr("If-Range", `"a"`, "Range", "bytes=0-1"), true, false, nil},
		{"a request without validators forwards none", hdr("Accept", "*/*"), true, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.ForwardedValidators(tt.req, tt.forward, tt.store); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("ForwardedValidators = %q, want %q", got, tt.want)
			}
		})
	}
}
