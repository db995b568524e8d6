package proxy

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// A hit builds its header map from one scratch allocation (serveEntry):
// repeated fields, many fields, a stored Via and multi-digit numbers must
// all come out exactly as stored.
func TestHitServesEveryStoredFieldValue(t *testing.T) {
	body := strings.Repeat("b", 1234)
	for _, extra := range []int{0, 20} {
		t.Run(fmt.Sprintf("%d extra fields", extra), func(t *testing.T) {
			f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
				h := w.Header()
				h.Set("Cache-Control", "public, max-age=86400")
				h["Link"] = []string{"</a.css>; rel=preload", "</b.js>; rel=preload"}
				h.Set("Via", "1.0 upstream")
				for i := range extra {
					h.Set(fmt.Sprintf("X-Extra-%02d", i), fmt.Sprintf("value %d", i))
				}
				h.Set("X-Last", "last")
				_, _ = w.Write([]byte(body))
			})
			expect(t, f.get("/h"), 200, "MISS")
			f.clock.Advance(3725 * time.Second)
			r := f.get("/h")
			expect(t, r, 200, "HIT; layer=l1")
			want := map[string][]string{
				"Link":           {"</a.css>; rel=preload", "</b.js>; rel=preload"},
				"Via":            {"1.0 upstream", "1.1 tiercache"},
				"Age":            {"3725"},
				"Content-Length": {"1234"},
				"X-Last":         {"last"},
				"Cache-Control":  {"public, max-age=86400"},
			}
			for i := range extra {
				want[fmt.Sprintf("X-Extra-%02d", i)] = []string{fmt.Sprintf("value %d", i)}
			}
			for k, v := range want {
				if got := r.header[k]; !slices.Equal(got, v) {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if r.body != body {
				t.Errorf("body of %d bytes, want %d", len(r.body), len(body))
			}
		})
	}
}
