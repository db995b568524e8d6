package proxy

import (
	"net/http"
	"testing"
	"time"
)

// A redirect without freshness is stored for the tier's status lifetime
// and no longer; a 404 takes its status lifetime over negativeTTL; a
// rule's own list replaces the tier's.
func TestStatusLifetimesStoreAnswersWithoutFreshness(t *testing.T) {
	f := newFixture(t, `
defaults:
  negativeTTL: 10s
  statusTTLs:
    - {statuses: [302], ttl: 1m}
    - {statuses: [404], ttl: 5m}
rules:
  - name: own
    match: {pathPrefix: /own/}
    statusTTLs: [{statuses: [301], ttl: 1h}]
`, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/go", "/own/go":
			w.Header().Set("Location", "/there")
			w.WriteHeader(http.StatusFound)
		case "/moved", "/own/moved":
			w.Header().Set("Location", "/there")
			w.WriteHeader(http.StatusMovedPermanently)
		default:
			http.NotFound(w, r)
		}
	})
	noRedirect := func(req *http.Request, via []*http.Request) error { return http.ErrUseLastResponse }
	f.srv.Client().CheckRedirect = noRedirect
	step := func(path string, status int, xcache string) {
		t.Helper()
		expect(t, f.get(path), status, xcache)
	}
	step("/go", 302, "MISS")
	step("/go", 302, "HIT; layer=l1")
	step("/missing", 404, "MISS")
	f.clock.Advance(30 * time.Second) // past negativeTTL, within the 404's status lifetime
	step("/missing", 404, "HIT; layer=l1")
	f.clock.Advance(31 * time.Second) // past the 302's minute
	step("/go", 302, "MISS")
	// The rule's list replaces the tier's: its 301 is stored, its 302 is
	// not (302 is not cacheable by default), its 404 falls back to
	// negativeTTL.
	step("/own/moved", 301, "MISS")
	step("/own/moved", 301, "HIT; layer=l1")
	step("/own/go", 302, "MISS")
	step("/own/go", 302, "MISS")
	step("/own/missing", 404, "MISS")
	f.clock.Advance(30 * time.Second)
	step("/own/missing", 404, "MISS")
}
