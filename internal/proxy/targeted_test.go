package proxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// RFC 9213 against a real origin: which field decides, what reaches the
// origin and what the client sees.

// targetedOrigin answers with the given response fields and body "v".
func targetedOrigin(kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(kv); i += 2 {
			w.Header().Add(kv[i], kv[i+1])
		}
		_, _ = io.WriteString(w, "v")
	}
}

func wantOriginCount(t *testing.T, f *fixture, n int) {
	t.Helper()
	if got := f.origin.count(); got != n {
		t.Fatalf("the origin saw %d requests, want %d", got, n)
	}
}

func TestACDNCacheControlMaxAgeLongerThanCacheControlsIsServedFresh(t *testing.T) {
	f := newFixture(t, "", targetedOrigin("Cache-Control", "max-age=1", "CDN-Cache-Control", "max-age=3600"))
	miss := f.get("/a")
	expect(t, miss, 200, "MISS")
	f.clock.Advance(10 * time.Minute)
	hit := f.get("/a")
	expect(t, hit, 200, "HIT; layer=l1")
	wantOriginCount(t, f, 1)
	if hit.header.Get("Age") != "600" {
		t.Errorf("Age = %q, want 600", hit.header.Get("Age"))
	}
	// Not stripped by default: a CDN in front still gets its field, and
	// the client still gets Cache-Control as the origin sent it.
	for _, r := range []response{miss, hit} {
		if r.header.Get("CDN-Cache-Control") != "max-age=3600" || r.header.Get("Cache-Control") != "max-age=1" {
			t.Errorf("%s forwarded CDN-Cache-Control %q and Cache-Control %q", r.xcache(),
				r.header.Get("CDN-Cache-Control"), r.header.Get("Cache-Control"))
		}
	}
	f.clock.Advance(time.Hour)
	expect(t, f.get("/a"), 200, "MISS")
	wantOriginCount(t, f, 2)
}

func TestACDNCacheControlNoStoreIsNotStoredDespiteCacheControlMaxAge(t *testing.T) {
	f := newFixture(t, "", targetedOrigin("Cache-Control", "max-age=3600", "CDN-Cache-Control", "no-store"))
	expect(t, f.get("/a"), 200, "MISS")
	expect(t, f.get("/a"), 200, "MISS")
	wantOriginCount(t, f, 2)
}

func TestACDNCacheControlMaxAgeIsStoredDespiteCacheControlNoStore(t *testing.T) {
	f := newFixture(t, "", targetedOrigin("Cache-Control", "no-store", "CDN-Cache-Control", "max-age=60"))
	expect(t, f.get("/a"), 200, "MISS")
	expect(t, f.get("/a"), 200, "HIT; layer=l1")
	wantOriginCount(t, f, 1)
}

func TestAnInvalidCDNCacheControlLeavesCacheControlInCharge(t *testing.T) {
	for name, cdn := range map[string]string{
		"a quoted max-age":          `max-age="3600"`,
		"junk after a valid member": "max-age=3600, &&&&&",
		"an uppercase key":          "Max-Age=3600",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "", targetedOrigin("Cache-Control", "max-age=60", "CDN-Cache-Control", cdn))
			expect(t, f.get("/a"), 200, "MISS")
			f.clock.Advance(30 * time.Second)
			expect(t, f.get("/a"), 200, "HIT; layer=l1") // Cache-Control's 60s, not nothing
			f.clock.Advance(2 * time.Minute)
			expect(t, f.get("/a"), 200, "MISS") // and not the targeted 3600s
			wantOriginCount(t, f, 2)
		})
	}
}

func TestAConfiguredFieldTakesPrecedenceOverCDNCacheControl(t *testing.T) {
	const cfg = "defaults: {targetedCacheControl: {fields: [Tiercache-Cache-Control, CDN-Cache-Control]}}"
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "no-store")
		h.Set("CDN-Cache-Control", "no-store")
		switch r.URL.Path {
		case "/own":
			h.Set("Tiercache-Cache-Control", "max-age=600")
		case "/own-invalid": // ignored: CDN-Cache-Control is next
			h.Set("Tiercache-Cache-Control", "max-age=600.0")
		}
		_, _ = io.WriteString(w, "v")
	})
	f := newFixtureFor(t, cfg, o)
	expect(t, f.get("/own"), 200, "MISS")
	f.clock.Advance(5 * time.Minute)
	expect(t, f.get("/own"), 200, "HIT; layer=l1")
	wantOriginCount(t, f, 1)
	expect(t, f.get("/own-invalid"), 200, "MISS")
	expect(t, f.get("/own-invalid"), 200, "MISS")
	wantOriginCount(t, f, 3)

	// A tier that does not list the custom field ignores it.
	plain := newFixtureFor(t, "", o)
	expect(t, plain.get("/own"), 200, "MISS")
	expect(t, plain.get("/own"), 200, "MISS")
}

func TestAnEmptyTargetListIgnoresCDNCacheControl(t *testing.T) {
	f := newFixture(t, "defaults: {targetedCacheControl: {fields: []}}",
		targetedOrigin("Cache-Control", "no-store", "CDN-Cache-Control", "max-age=60"))
	expect(t, f.get("/a"), 200, "MISS")
	expect(t, f.get("/a"), 200, "MISS")
	wantOriginCount(t, f, 2)
}

// A 304 re-decides freshness from the stored header merged with the 304's:
// the targeted field that decided the store decides the refresh too.
func TestRevalidationKeepsTheTargetedFieldsFreshness(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "max-age=3600")
		h.Set("CDN-Cache-Control", "max-age=10")
		h.Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = io.WriteString(w, "v")
	})
	expect(t, f.get("/a"), 200, "MISS")
	f.clock.Advance(20 * time.Second) // stale for the CDN field, fresh for Cache-Control
	r := f.get("/a")
	expect(t, r, 200, "REVALIDATED")
	if r.body != "v" {
		t.Fatalf("body %q", r.body)
	}
	if inm := f.origin.last().Header.Get("If-None-Match"); inm != `"v1"` {
		t.Fatalf("the revalidation sent If-None-Match %q", inm)
	}
	f.clock.Advance(5 * time.Second)
	expect(t, f.get("/a"), 200, "HIT; layer=l1")
	f.clock.Advance(10 * time.Second)
	expect(t, f.get("/a"), 200, "REVALIDATED")
	wantOriginCount(t, f, 3)
}

func TestStripRemovesTheTargetedFieldsFromWhatClientsGet(t *testing.T) {
	const cfg = `
defaults: {targetedCacheControl: {fields: [Tiercache-Cache-Control, CDN-Cache-Control], strip: true}}
rules: [{name: pass, match: {pathPrefix: /pass/}, bypass: true}]
`
	f := newFixture(t, cfg, targetedOrigin(
		"Cache-Control", "max-age=1", "CDN-Cache-Control", "max-age=3600", "Tiercache-Cache-Control", "max-age=600",
		"Other-Cache-Control", "max-age=5", "ETag", `"e"`))
	stripped := func(r response) {
		t.Helper()
		for _, name := range []string{"CDN-Cache-Control", "Tiercache-Cache-Control"} {
			if v, ok := r.header[http.CanonicalHeaderKey(name)]; ok {
				t.Errorf("%d %q: the client got %s: %q", r.status, r.xcache(), name, v)
			}
		}
		// Fields not on the list, and Cache-Control, pass through.
		if r.header.Get("Other-Cache-Control") != "max-age=5" || r.header.Get("Cache-Control") != "max-age=1" {
			t.Errorf("%d %q: Other-Cache-Control %q, Cache-Control %q", r.status, r.xcache(),
				r.header.Get("Other-Cache-Control"), r.header.Get("Cache-Control"))
		}
	}
	miss := f.get("/a")
	expect(t, miss, 200, "MISS")
	stripped(miss)
	f.clock.Advance(5 * time.Minute) // fresh only by Tiercache-Cache-Control
	hit := f.get("/a")
	expect(t, hit, 200, "HIT; layer=l1")
	stripped(hit)
	notMod := f.get("/a", "If-None-Match", `"e"`)
	expect(t, notMod, 304, "HIT; layer=l1")
	stripped(notMod)
	head := f.do("HEAD", "/a")
	expect(t, head, 200, "HIT; layer=l1")
	stripped(head)
	pass := f.get("/pass/x")
	expect(t, pass, 200, "BYPASS")
	stripped(pass)
	wantOriginCount(t, f, 2)

	// The stored entry kept the fields: turned off, strip gives them back
	// on the next hit, with no origin request.
	c := f.px.cfg.Load().Config
	c.Defaults.TargetedCacheControl = &tierconfig.TargetedCacheControl{
		Fields: []string{"Tiercache-Cache-Control", "CDN-Cache-Control"},
	}
	compiled, err := tierconfig.Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	f.px.cfg.Store(compiled)
	again := f.get("/a")
	expect(t, again, 200, "HIT; layer=l1")
	if again.header.Get("CDN-Cache-Control") != "max-age=3600" || again.header.Get("Tiercache-Cache-Control") != "max-age=600" {
		t.Fatalf("after strip was turned off the hit carries CDN-Cache-Control %q, Tiercache-Cache-Control %q",
			again.header.Get("CDN-Cache-Control"), again.header.Get("Tiercache-Cache-Control"))
	}
	wantOriginCount(t, f, 2)
}

func TestStripAppliesToUpgradeAnswers(t *testing.T) {
	const cfg = "defaults: {targetedCacheControl: {strip: true}}"
	f := newFixture(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("CDN-Cache-Control", "no-store")
		if r.URL.Path == "/refused" {
			http.Error(w, "no", http.StatusForbidden)
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		c.CloseNow()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	base := "ws" + strings.TrimPrefix(f.srv.URL, "http")
	c, resp, err := websocket.Dial(ctx, base+"/ws", nil)
	if err != nil {
		t.Fatalf("WebSocket through the proxy: %v", err)
	}
	c.CloseNow()
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("CDN-Cache-Control") != "" {
		t.Errorf("101 answer: %d with CDN-Cache-Control %q", resp.StatusCode, resp.Header.Get("CDN-Cache-Control"))
	}
	_, resp, err = websocket.Dial(ctx, base+"/refused", nil)
	if err == nil || resp == nil {
		t.Fatalf("a refused upgrade dialled: %v, %v", resp, err)
	}
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("CDN-Cache-Control") != "" {
		t.Errorf("refused upgrade: %d with CDN-Cache-Control %q", resp.StatusCode, resp.Header.Get("CDN-Cache-Control"))
	}
	wantOriginCount(t, f, 2)
}

// A waiter that follows a fill's body file gets its header from the entry
// being written: stripped too.
func TestStripAppliesToWaitersFollowingAFileFill(t *testing.T) {
	body := payload(13, 512<<10)
	half := len(body) / 2
	sent, release := make(chan struct{}, 1), make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "max-age=300")
		h.Set("CDN-Cache-Control", "max-age=300")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body[:half])
		http.NewResponseController(w).Flush()
		sent <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = w.Write(body[half:])
	})
	f := newFileFixture(t, "defaults: {targetedCacheControl: {strip: true}}", o, bodystore.Options{})
	leader := f.started(t, t.Context(), "/big")
	select {
	case <-sent:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin was not asked within 5s")
	}
	waiter := f.started(t, t.Context(), "/big")
	close(release)
	for name, resp := range map[string]*http.Response{"leader": leader, "waiter": waiter} {
		if resp.Header.Get("CDN-Cache-Control") != "" || resp.Header.Get("Cache-Control") != "max-age=300" {
			t.Errorf("%s (%s): CDN-Cache-Control %q, Cache-Control %q", name, resp.Header.Get("X-Cache"),
				resp.Header.Get("CDN-Cache-Control"), resp.Header.Get("Cache-Control"))
		}
		if got, err := io.ReadAll(resp.Body); err != nil || len(got) != len(body) {
			t.Fatalf("%s: read %d bytes (%v), want %d", name, len(got), err, len(body))
		}
	}
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
		t.Fatalf("the waiter was %q, not a follower of the fill", x)
	}
	wantOriginCount(t, f.fixture, 1)
}
