package proxy

import (
	"net/http"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// docs/caching.md "Settings for a typical site", as make bench part 9
// runs them (hack/bench-replay-tier.yaml), against an origin that
// personalises for a session cookie: what each setting is there for.

const typicalSiteFile = "../../hack/bench-replay-tier.yaml"

// siteOrigin answers like demo-origin's /site/: the visitor's own page
// (private) for the sid cookie, else the anonymous page (public, 300 s),
// both varying on Accept-Encoding.
func siteOrigin(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Vary", "Accept-Encoding")
	if c, err := r.Cookie("sid"); err == nil && !strings.HasSuffix(r.URL.Path, ".css") {
		h.Set("Cache-Control", "private, max-age=0, must-revalidate")
		_, _ = w.Write([]byte("page of " + c.Value))
		return
	}
	h.Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write([]byte("anonymous " + r.URL.Path))
}

func typicalSiteYAML(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(typicalSiteFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTheTypicalSiteSettingsAreTheDocumentedOnes(t *testing.T) {
	doc, err := os.ReadFile("../../docs/caching.md")
	if err != nil {
		t.Fatal(err)
	}
	sec := string(doc)
	i := strings.Index(sec, "\n## Settings for a typical site\n")
	if i < 0 {
		t.Fatal(`docs/caching.md has no "Settings for a typical site" section`)
	}
	m := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindStringSubmatch(sec[i:])
	if m == nil {
		t.Fatal("the section has no yaml block")
	}
	documented, err := tierconfig.Parse([]byte(m[1]))
	if err != nil {
		t.Fatalf("the documented settings do not parse: %v", err)
	}
	benched, err := tierconfig.Parse([]byte(typicalSiteYAML(t)))
	if err != nil {
		t.Fatalf("%s: %v", typicalSiteFile, err)
	}
	if !reflect.DeepEqual(documented, benched) {
		t.Errorf("docs/caching.md's settings differ from %s:\n%+v\n%+v", typicalSiteFile, documented.Rules, benched.Rules)
	}
}

func TestTypicalSiteSettings(t *testing.T) {
	const ga, ga2 = "_ga=GA1.1.1.2; _gid=GA1.1.3.4", "_ga=GA1.1.5.6; _fbp=fb.1.2.3"
	t.Run("analytics cookies alone are served from the cache", func(t *testing.T) {
		f := newFixture(t, typicalSiteYAML(t), siteOrigin)
		expect(t, f.get("/site/a.html", "Cookie", ga), 200, "MISS")
		got := f.get("/site/a.html", "Cookie", ga2)
		expect(t, got, 200, "HIT; layer=l1")
		if got.body != "anonymous /site/a.html" {
			t.Errorf("body %q", got.body)
		}
	})
	t.Run("a signed-in visitor gets their own page from the origin", func(t *testing.T) {
		f := newFixture(t, typicalSiteYAML(t), siteOrigin)
		expect(t, f.get("/site/a.html"), 200, "MISS")
		got := f.get("/site/a.html", "Cookie", ga+"; sid=abc")
		expect(t, got, 200, "BYPASS")
		if got.body != "page of abc" || f.origin.count() != 2 {
			t.Errorf("signed in: body %q after %d origin requests; want their page from the origin", got.body, f.origin.count())
		}
		expect(t, f.get("/site/a.html", "Cookie", ga), 200, "HIT; layer=l1")
	})
	t.Run("without the bypass a signed-in visitor gets the stored anonymous page", func(t *testing.T) {
		// The defaults: no leak (the personal page is never stored) but
		// the signed-out page, as the replay counts.
		f := newFixture(t, "", siteOrigin)
		expect(t, f.get("/site/a.html"), 200, "MISS")
		got := f.get("/site/a.html", "Cookie", "sid=abc")
		expect(t, got, 200, "HIT; layer=l1")
		if got.body != "anonymous /site/a.html" {
			t.Errorf("body %q", got.body)
		}
		f.clock.Advance(301 * time.Second) // the anonymous copy expires
		got = f.get("/site/a.html", "Cookie", "sid=abc")
		if got.body != "page of abc" || strings.HasPrefix(got.xcache(), "HIT") {
			t.Fatalf("expired: %q %q, want the origin's personal page", got.xcache(), got.body)
		}
		if got := f.get("/site/a.html", "Cookie", "sid=xyz"); got.body == "page of abc" {
			t.Fatalf("another visitor got abc's page (X-Cache %q)", got.xcache())
		}
	})
	t.Run("assets stay cached for signed-in visitors", func(t *testing.T) {
		f := newFixture(t, typicalSiteYAML(t), siteOrigin)
		expect(t, f.get("/site/static/s1.css"), 200, "MISS")
		expect(t, f.get("/site/static/s1.css", "Cookie", "sid=abc"), 200, "HIT; layer=l1")
	})
	t.Run("tracking parameters share the entry and do not reach the origin", func(t *testing.T) {
		f := newFixture(t, typicalSiteYAML(t), siteOrigin)
		expect(t, f.get("/site/b.html?gclid=Cj0KCQ"), 200, "MISS")
		if q := f.origin.last().URL.RawQuery; q != "" {
			t.Errorf("the origin got the query %q, want none", q)
		}
		expect(t, f.get("/site/b.html?utm_source=newsletter&utm_medium=email"), 200, "HIT; layer=l1")
		expect(t, f.get("/site/b.html?fbclid=IwAR1"), 200, "HIT; layer=l1")
	})
	t.Run("the order of parameters does not split the cache", func(t *testing.T) {
		f := newFixture(t, typicalSiteYAML(t), siteOrigin)
		expect(t, f.get("/site/api/items/i1.json?page=2&sort=new"), 200, "MISS")
		expect(t, f.get("/site/api/items/i1.json?sort=new&page=2"), 200, "HIT; layer=l1")
		expect(t, f.get("/site/api/items/i1.json?page=3&sort=new"), 200, "MISS")
	})
}
