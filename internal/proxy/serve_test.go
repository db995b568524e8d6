package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
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

// Age and Content-Length are computed when serving: values stored with an
// entry (by an older writer, through L2) never add a second one.
func TestStoredAgeAndContentLengthAreReplacedNotRepeated(t *testing.T) {
	f := newFixture(t, "", cacheFor("public, max-age=600", "hello"))
	expect(t, f.get("/s"), 200, "MISS")

	req := httptest.NewRequest("GET", f.srv.URL+"/s", nil)
	kb := f.px.keys.Get().(*keyBuf)
	defer f.px.keys.Put(kb)
	kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
	key := kb.Primary()
	var e entry.Entry
	// The client has the whole response before the fill stores it.
	waitFor(t, func() bool {
		_, err := f.px.store.Get(context.Background(), key, &e)
		return err == nil
	}, "the fill to be stored")
	e.Header = append(e.Header, entry.Field{Name: "Age", Value: "99999"}, entry.Field{Name: "Content-Length", Value: "7"})
	if err := f.px.store.Set(context.Background(), key, &e); err != nil {
		t.Fatal(err)
	}

	f.clock.Advance(3 * time.Second)
	r := f.get("/s")
	expect(t, r, 200, "HIT; layer=l1")
	if got := r.header["Age"]; !slices.Equal(got, []string{"3"}) {
		t.Errorf("Age = %q, want [3]", got)
	}
	if r.body != "hello" {
		t.Errorf("body %q, want hello", r.body)
	}
}
