package proxy

import (
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// The debug mode: a request carrying the tier's purge token in
// Tiercache-Debug is told the cache's decision; any other request is
// served as if the field were absent.

const debugToken = "0123456789abcdef0123456789abcdef"

const debugCfg = `
purge: {token: "` + debugToken + `"}
rules:
- name: static
  match: {pathPrefix: /static/}
- name: nocache
  match: {pathPrefix: /pass/}
  bypass: true
`

// debugOrigin answers /private with private, /cookie with a Set-Cookie,
// /big with a body larger than the tier stores, everything else with
// max-age=60; it fails the test if it ever sees the debug field.
func debugOrigin(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Values("Tiercache-Debug"); len(v) > 0 {
			t.Errorf("the origin received Tiercache-Debug %q", v)
		}
		h := w.Header()
		switch r.URL.Path {
		case "/private":
			h.Set("Cache-Control", "private, max-age=60")
		case "/cookie":
			h.Set("Cache-Control", "max-age=60")
			h.Set("Set-Cookie", "s=1")
		case "/big":
			h.Set("Cache-Control", "max-age=60")
			h.Set("Content-Length", "2097152")
			_, _ = io.WriteString(w, strings.Repeat("x", 2<<20))
			return
		default:
			h.Set("Cache-Control", "max-age=60")
		}
		_, _ = io.WriteString(w, "hi")
	}
}

// noDebug fails when r shows any trace of the debug mode or the token.
func noDebug(t *testing.T, r response) {
	t.Helper()
	if v := r.header.Values("Tiercache-Debug"); len(v) > 0 {
		t.Errorf("a request without the token got Tiercache-Debug %q", v)
	}
	if cs := r.header.Get("Cache-Status"); strings.Contains(cs, "key=") {
		t.Errorf("a request without the token got a key in Cache-Status %q", cs)
	}
	noToken(t, r)
}

func noToken(t *testing.T, r response) {
	t.Helper()
	for k, vs := range r.header {
		for _, v := range vs {
			if strings.Contains(v, debugToken) {
				t.Errorf("the token is echoed in %s: %q", k, v)
			}
		}
	}
	if strings.Contains(r.body, debugToken) {
		t.Error("the token is echoed in the body")
	}
}

func TestDebugSaysWhyAResponseWasNotStored(t *testing.T) {
	f := newFixture(t, debugCfg, debugOrigin(t))
	for _, c := range []struct {
		path, want string
	}{
		{"/private", `fwd=uri-miss, stored=?0, not-stored=private, reason="private prevents storing in a shared cache"`},
		{"/cookie", `fwd=uri-miss, stored=?0, not-stored=set-cookie, reason="Set-Cookie prevents storing"`},
		{"/big", `fwd=uri-miss, stored=?0, not-stored=too-large`},
		{"/static/a", `fwd=uri-miss, stored, source=explicit, lifetime=60`},
		{"/pass/a", `fwd=bypass, stored=?0, not-stored=bypass`},
	} {
		r := f.get(c.path, "Tiercache-Debug", debugToken)
		got := r.header.Get("Tiercache-Debug")
		if !strings.Contains(got, c.want) {
			t.Errorf("GET %s: Tiercache-Debug %q, want it to contain %q", c.path, got, c.want)
		}
		noToken(t, r)
	}
	r := f.get("/static/a", "Tiercache-Debug", debugToken)
	expect(t, r, http.StatusOK, "HIT; layer=l1")
	if got, want := r.header.Get("Tiercache-Debug"), `rule=static, key=`; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, ", hit, lifetime=60") {
		t.Errorf("a debug hit: Tiercache-Debug %q, want rule, key, hit and lifetime", got)
	}
	if cs := r.header.Get("Cache-Status"); !strings.Contains(cs, `; key="`) || !strings.Contains(cs, "/static/a") {
		t.Errorf("a debug hit's Cache-Status %q has no key", cs)
	}
}

func TestDebugNeedsTheTiersToken(t *testing.T) {
	t.Run("without the field nothing is said", func(t *testing.T) {
		f := newFixture(t, debugCfg, debugOrigin(t))
		noDebug(t, f.get("/private"))
		noDebug(t, f.get("/static/a"))
		noDebug(t, f.get("/static/a"))
	})
	t.Run("a wrong token is the same as none", func(t *testing.T) {
		f := newFixture(t, debugCfg, debugOrigin(t))
		for _, wrong := range []string{"", "x", debugToken[:31], debugToken + "0", "Bearer " + debugToken, strings.ToUpper(debugToken)} {
			r := f.get("/private", "Tiercache-Debug", wrong)
			expect(t, r, http.StatusOK, "MISS")
			noDebug(t, r)
		}
		expect(t, f.get("/static/a", "Tiercache-Debug", "nope"), http.StatusOK, "MISS")
		r := f.get("/static/a", "Tiercache-Debug", "nope")
		expect(t, r, http.StatusOK, "HIT; layer=l1")
		noDebug(t, r)
	})
	t.Run("the token twice is the same as none", func(t *testing.T) {
		f := newFixture(t, debugCfg, debugOrigin(t))
		noDebug(t, f.get("/private", "Tiercache-Debug", debugToken, "Tiercache-Debug", debugToken))
	})
	t.Run("a tier without a token has no debug mode", func(t *testing.T) {
		f := newFixture(t, "", debugOrigin(t))
		noDebug(t, f.get("/private", "Tiercache-Debug", ""))
		noDebug(t, f.get("/private", "Tiercache-Debug", debugToken))
	})
}

func TestADebugRequestStoresAndServesWhatAnyOtherWould(t *testing.T) {
	f := newFixture(t, debugCfg, debugOrigin(t))
	// The debug request fills the entry; the next plain request hits it.
	expect(t, f.get("/static/a", "Tiercache-Debug", debugToken), http.StatusOK, "MISS")
	r := f.get("/static/a")
	expect(t, r, http.StatusOK, "HIT; layer=l1")
	noDebug(t, r)
	if f.origin.count() != 1 {
		t.Fatalf("origin asked %d times, want 1", f.origin.count())
	}
	// What is stored carries no trace of the debug request.
	var e entry.Entry
	kb := &keyBuf{}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/static/a", nil)
	kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
	if err := f.cache.GetInto(kb.Primary(), &e); err != nil {
		t.Fatalf("nothing stored under the plain request's key: %v", err)
	}
	for _, fl := range e.Header {
		if strings.EqualFold(fl.Name, "Tiercache-Debug") || strings.Contains(fl.Value, debugToken) {
			t.Errorf("the stored entry carries %s: %q", fl.Name, fl.Value)
		}
	}
	// And a plain request's entry is what a debug request is served.
	expect(t, f.get("/static/b"), http.StatusOK, "MISS")
	expect(t, f.get("/static/b", "Tiercache-Debug", debugToken), http.StatusOK, "HIT; layer=l1")
	// A debug request for an uncacheable response leaves the same
	// hit-for-miss marker as any other.
	f.get("/private", "Tiercache-Debug", debugToken)
	if k := storedKind(f, "/private"); k != int(entry.KindUncacheable) {
		t.Errorf("after a debug miss of a private response L1 holds kind %d, want the hit-for-miss marker", k)
	}
}

// A request collapsed onto a debug request's fetch is told nothing: the
// flight shares the response, never the leader's decision.
func TestAWaiterOnADebugRequestsFetchGetsNoDebugOutput(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	f := newFixture(t, debugCfg, func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "hi")
	})
	leader := make(chan response, 1)
	go func() { leader <- f.get("/static/c", "Tiercache-Debug", debugToken) }()
	<-arrived
	before := testCounter(f.px.m.Coalesced)
	waiter := make(chan response, 1)
	go func() { waiter <- f.get("/static/c") }()
	deadline := time.Now().Add(5 * time.Second)
	for testCounter(f.px.m.Coalesced) == before {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("the second request never joined the first one's fetch")
		}
		runtime.Gosched()
	}
	close(release)
	l, w := <-leader, <-waiter
	if l.header.Get("Tiercache-Debug") == "" {
		t.Error("the debug leader got no Tiercache-Debug")
	}
	expect(t, w, http.StatusOK, "MISS; coalesced")
	noDebug(t, w)
}

// An origin's own Tiercache-Debug field reaches nobody, and is not stored:
// a client without the token sees none, whatever the origin sends.
func TestAnOriginsTiercacheDebugFieldIsDropped(t *testing.T) {
	f := newFixture(t, debugCfg, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Tiercache-Debug", "rule=forged, hit")
		_, _ = io.WriteString(w, "hi")
	})
	for _, path := range []string{"/static/a", "/static/a", "/pass/a"} {
		noDebug(t, f.get(path))
	}
	noDebug(t, f.do(http.MethodPut, "/static/x"))
	if got := f.get("/static/a", "Tiercache-Debug", debugToken).header.Values("Tiercache-Debug"); len(got) != 1 || strings.Contains(got[0], "forged") {
		t.Errorf("a debug hit's Tiercache-Debug %q, want this cache's one field", got)
	}
}
