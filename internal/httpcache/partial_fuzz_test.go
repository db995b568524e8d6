package httpcache_test

import (
	"net/http"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// A Content-Range that parses names bytes that exist: first <= last, and
// last < length when the length is known; and it reads back the same
// once written. ReceivedPart never accepts what ParseContentRange refuses.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-4/10", "bytes 4-9/*", "bytes */10", "Bytes 1-2/3", "bytes 5-10/10",
		"bytes 0-99999999999999999999/1", "bytes 9223372036854775806-9223372036854775806/9223372036854775807",
		"bytes -1-4/10", "bytes 0-4/10/11", "bytes  0-4/10", "\tbytes 0-0/1\t"} {
		f.Add(s, int64(5))
	}
	f.Fuzz(func(t *testing.T, v string, cl int64) {
		cr, ok := httpcache.ParseContentRange(v)
		if ok {
			if cr.Start < 0 || cr.End < cr.Start || (cr.Length >= 0 && cr.End >= cr.Length) || cr.Length < -1 {
				t.Fatalf("%q parsed as %+v", v, cr)
			}
			if cr.Length >= 0 {
				again, ok := httpcache.ParseContentRange(httpcache.ContentRangeValue(
					httpcache.ByteRange{Start: cr.Start, End: cr.End}, cr.Length))
				if !ok || again != cr {
					t.Fatalf("%q: %+v reads back as %+v, %v", v, cr, again, ok)
				}
			}
		}
		part, why := httpcache.ReceivedPart(http.Header{"Content-Range": {v}}, cl)
		if why == "" && (!ok || cr.Length < 0 || part.Span.Start != cr.Start || part.Span.End != cr.End ||
			(cl >= 0 && cl != cr.End-cr.Start+1)) {
			t.Fatalf("ReceivedPart accepted %q (Content-Length %d) as %+v", v, cl, part)
		}
	})
}

// Spans built by AddSpan stay sorted, disjoint and apart, hold every byte
// added, and Gap and Covers agree with them byte by byte.
func FuzzSpans(f *testing.F) {
	f.Add([]byte{0, 4, 7, 9, 3, 5}, uint8(0), uint8(9))
	f.Add([]byte{10, 12, 0, 2, 20, 22}, uint8(1), uint8(21))
	f.Fuzz(func(t *testing.T, adds []byte, a, b uint8) {
		if len(adds) > 64 {
			adds = adds[:64]
		}
		var spans []httpcache.ByteRange
		var held [256]bool
		for i := 0; i+1 < len(adds); i += 2 {
			s, e := int64(min(adds[i], adds[i+1])), int64(max(adds[i], adds[i+1]))
			spans = httpcache.AddSpan(spans, httpcache.ByteRange{Start: s, End: e})
			for p := s; p <= e; p++ {
				held[p] = true
			}
		}
		var inSpans [256]bool
		for i, s := range spans {
			if s.Start > s.End || (i > 0 && spans[i-1].End+1 >= s.Start) {
				t.Fatalf("spans not sorted, disjoint and apart: %v", spans)
			}
			for p := s.Start; p <= s.End; p++ {
				inSpans[p] = true
			}
		}
		if inSpans != held {
			t.Fatalf("spans %v do not hold exactly the bytes added", spans)
		}
		want := httpcache.ByteRange{Start: int64(min(a, b)), End: int64(max(a, b))}
		var runs []httpcache.ByteRange
		for p := want.Start; p <= want.End; p++ {
			if held[p] {
				continue
			}
			if n := len(runs); n > 0 && runs[n-1].End == p-1 {
				runs[n-1].End = p
			} else {
				runs = append(runs, httpcache.ByteRange{Start: p, End: p})
			}
		}
		gap, res := httpcache.Gap(spans, want)
		switch {
		case len(runs) == 0 && (res != httpcache.GapNone || !httpcache.Covers(spans, want)):
			t.Fatalf("nothing missing of %v in %v, got %v %v (covers %v)", want, spans, gap, res, httpcache.Covers(spans, want))
		case len(runs) == 1 && (res != httpcache.GapOne || gap != runs[0] || httpcache.Covers(spans, want)):
			t.Fatalf("one run %v missing of %v in %v, got %v %v", runs[0], want, spans, gap, res)
		case len(runs) > 1 && (res != httpcache.GapMany || httpcache.Covers(spans, want)):
			t.Fatalf("runs %v missing of %v in %v, got %v %v", runs, want, spans, gap, res)
		}
	})
}
