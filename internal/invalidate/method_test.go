package invalidate

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
)

func TestMethodRequestReadsThePurgeFromTheRequestOrNamesWhatIsWrong(t *testing.T) {
	req := func(target, host string, edit func(r *http.Request)) *http.Request {
		r := httptest.NewRequest(MethodPurge, target, nil)
		r.Host = host
		if edit != nil {
			edit(r)
		}
		return r
	}
	soft := func(v ...string) func(*http.Request) {
		return func(r *http.Request) { r.Header[SoftPurgeHeader] = v }
	}
	cases := map[string]struct {
		r    *http.Request
		want Request
		err  string
	}{
		"a PURGE names its Host and target": {
			r: req("/a/b?c=d", "shop.example", nil), want: Request{URLs: []string{"http://shop.example/a/b?c=d"}}},
		"an escaped path stays as received": {
			r: req("/a%2Fb", "shop.example", nil), want: Request{URLs: []string{"http://shop.example/a%2Fb"}}},
		"an absolute-form target names its own host": {
			r: req("http://other.example/x", "other.example", nil), want: Request{URLs: []string{"http://other.example/x"}}},
		"Tiercache-Soft-Purge 1 makes it soft": {
			r: req("/a", "h", soft("1")), want: Request{URLs: []string{"http://h/a"}, Soft: true}},
		"Tiercache-Soft-Purge 0 keeps it hard": {
			r: req("/a", "h", soft("0")), want: Request{URLs: []string{"http://h/a"}}},
		"another soft value is named": {
			r: req("/a", "h", soft("true")), err: "Tiercache-Soft-Purge: must be 1"},
		"the soft header twice is refused": {
			r: req("/a", "h", soft("1", "0")), err: "Tiercache-Soft-Purge: give it once"},
		"a body is refused, pointing to the admin API": {
			r: req("/a", "h", func(r *http.Request) { r.ContentLength = 12 }), err: "PURGE takes no body"},
		"a chunked body is refused": {
			r: req("/a", "h", func(r *http.Request) { r.ContentLength, r.TransferEncoding = -1, []string{"chunked"} }), err: "PURGE takes no body"},
		"a request without Host is refused": {
			r: req("/a", "", nil), err: "Host: required"},
		"an asterisk target is refused": {
			r: req("*", "h", nil), err: "request target: must be a path"},
		"a Host that would read back as another host is refused": {
			r: req("/a", "evil@victim.example", nil), err: "Host and request target: not a URL"},
		"a Host with a bad port is refused": {
			r: req("/a", "h:port", nil), err: "Host and request target"},
	}
	for name, c := range cases {
		got, msg := methodRequest(c.r)
		switch {
		case c.err != "" && !strings.Contains(msg, c.err):
			t.Errorf("%s: error %q, want it to contain %q", name, msg, c.err)
		case c.err == "" && (msg != "" || !reflect.DeepEqual(got, c.want)):
			t.Errorf("%s: got %+v, %q; want %+v", name, got, msg, c.want)
		}
	}
}
