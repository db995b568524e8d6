package httpcache_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// The cache-hit path runs these for every request; they must not allocate.
func TestHitPathDoesNotAllocate(t *testing.T) {
	empty := http.Header{}
	plain := http.Header{"Accept": {"*/*"}, "Accept-Encoding": {"gzip, br"}, "User-Agent": {"test"}}
	withCC := http.Header{"Cache-Control": {`max-age=0, max-stale="30", no-cache, stale-if-error=5`}, "Pragma": {"no-cache"}}
	s := httpcache.Stored{ResponseTime: t0, InitialAge: time.Second, Lifetime: time.Minute, StaleWhileRevalidate: time.Minute}
	req := httpcache.RequestCC{MaxStaleAny: true}
	now := t0.Add(90 * time.Second)
	names := []string{"accept", "accept-encoding", "x-absent"}
	langNames := []string{"accept", "accept-language"}
	langs := http.Header{"Accept-Language": {"fr-CH, fr;q=0.9, en;q=0.8, de;q=0.7", "*;q=0.5"}, "Accept": {"*/*"}}
	key := make([]byte, 0, 256)
	notMod := http.Header{"If-None-Match": {`"a", "b"`}}
	storedH := http.Header{"Etag": {`"b"`}}
	cases := []struct {
		name string
		f    func()
	}{
		{"ParseRequestCC without Cache-Control or Pragma", func() { _ = httpcache.ParseRequestCC(plain) }},
		{"ParseRequestCC with an empty header", func() { _ = httpcache.ParseRequestCC(empty) }},
		{"ParseRequestCC with Cache-Control", func() { _ = httpcache.ParseRequestCC(withCC) }},
		{"Evaluate", func() { _, _ = httpcache.Evaluate(s, req, now) }},
		{"CurrentAge", func() { _ = httpcache.CurrentAge(s, now) }},
		{"StaleOnErrorOK", func() { _ = httpcache.StaleOnErrorOK(s, req, now) }},
		{"AppendVaryKey with lowercase names", func() { key = httpcache.AppendVaryKey(key[:0], names, plain, httpcache.VaryOptions{}) }},
		{"AppendVaryKey normalizing Accept-Language", func() {
			key = httpcache.AppendVaryKey(key[:0], langNames, langs, httpcache.VaryOptions{NormalizeAcceptLanguage: true})
		}},
		{"StaleIfUnreachableOK", func() { _ = httpcache.StaleIfUnreachableOK(s, req, now) }},
		{"NotModified with If-None-Match", func() { _ = httpcache.NotModified(notMod, 200, storedH) }},
		{"ParseHTTPDate", func() { _, _ = httpcache.ParseHTTPDate("Sun, 06 Nov 1994 08:49:37 GMT") }},
		{"AgeHeader for a small age", func() { _ = httpcache.AgeHeader(7 * time.Second) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, c.f); n != 0 {
				t.Errorf("%s allocates %v times per run", c.name, n)
			}
		})
	}
}

func BenchmarkParseRequestCC(b *testing.B) {
	h := http.Header{"Cache-Control": {"max-age=0, max-stale=30"}}
	b.ReportAllocs()
	for b.Loop() {
		_ = httpcache.ParseRequestCC(h)
	}
}

func BenchmarkEvaluate(b *testing.B) {
	s := httpcache.Stored{ResponseTime: t0, Lifetime: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = httpcache.Evaluate(s, httpcache.RequestCC{}, t0)
	}
}

func BenchmarkAppendVaryKey(b *testing.B) {
	h := http.Header{"Accept-Encoding": {"gzip, deflate, br"}, "Accept-Language": {"en-GB, en;q=0.9"}}
	names := []string{"accept-encoding", "accept-language"}
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = httpcache.AppendVaryKey(dst[:0], names, h, httpcache.VaryOptions{})
	}
}

func BenchmarkDecide(b *testing.B) {
	x := httpcache.Exchange{Method: http.MethodGet, ReqHeader: http.Header{}, Status: 200,
		RespHeader:  http.Header{"Cache-Control": {"public, max-age=60"}, "Date": {date(t0)}, "Etag": {`"x"`}},
		RequestTime: t0, ResponseTime: t0}
	b.ReportAllocs()
	for b.Loop() {
		_ = httpcache.Decide(x, httpcache.Policy{})
	}
}
