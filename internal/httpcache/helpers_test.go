package httpcache_test

import (
	"net/http"
	"time"
)

// hdr builds a header from name, value pairs; a name given twice makes two
// field lines.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h
}

// t0 is the instant the tests' origin answers at.
var t0 = time.Date(2024, time.March, 1, 12, 0, 0, 0, time.UTC)

// date formats t as an IMF-fixdate.
func date(t time.Time) string { return t.UTC().Format(http.TimeFormat) }

func sec(n int64) time.Duration { return time.Duration(n) * time.Second }

// maxDelta is 2^31 seconds (RFC 9111 §1.2.2).
const maxDelta = time.Duration(1<<31) * time.Second

// entryHeader is a Header that is not an http.Header, like *entry.Entry:
// Values does a case-insensitive scan and allocates.
type entryHeader [][2]string

func (e entryHeader) Values(name string) []string {
	var out []string
	for _, f := range e {
		if http.CanonicalHeaderKey(f[0]) == http.CanonicalHeaderKey(name) {
			out = append(out, f[1])
		}
	}
	return out
}
