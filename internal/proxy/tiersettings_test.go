package proxy

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
)

// The choices of docs/caching.md "Choices" that are tier settings, on and
// off, against a real origin: what reached the origin and what the client
// got.

// storedKind returns the kind of what L1 holds under path's primary key
// (entry.KindResponse, KindUncacheable, KindVary), or -1 for nothing.
func storedKind(f *fixture, path string) int {
	f.t.Helper()
	req := httptest.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	kb := &keyBuf{}
	kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
	var e entry.Entry
	if err := f.cache.GetInto(kb.Primary(), &e); err != nil {
		return -1
	}
	return int(e.Kind)
}

// headOrigin answers GET with a 60 s response (ETag "v1", X-Version 1,
// X-Only-Get, body "hello") and 304 to a matching If-None-Match; HEAD
// with the fields headFields (Content-Length 5 unless they set it).
func headOrigin(headFields ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if r.Method == http.MethodHead {
			h.Set("Content-Length", "5")
			for i := 0; i+1 < len(headFields); i += 2 {
				h.Set(headFields[i], headFields[i+1])
			}
			return
		}
		h.Set("Cache-Control", "max-age=60")
		h.Set("ETag", `"v1"`)
		h.Set("X-Version", "1")
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		h.Set("X-Only-Get", "yes")
		_, _ = io.WriteString(w, "hello")
	}
}

func TestAHeadsAnswerUpdatesTheStaleStoredGetWhenTheTierSaysSo(t *testing.T) {
	head := headOrigin("Cache-Control", "max-age=600", "ETag", `"v1"`, "X-Version", "2")
	t.Run("on", func(t *testing.T) {
		f := newFixture(t, "defaults: {updateFromHead: true}", head)
		expect(t, f.get("/a"), 200, "MISS")
		f.clock.Advance(2 * time.Minute) // stale
		got := f.do(http.MethodHead, "/a")
		expect(t, got, 200, "REVALIDATED")
		if m := f.origin.last().Method; m != http.MethodHead {
			t.Fatalf("the origin was asked with %s, want HEAD", m)
		}
		if inm := f.origin.last().Header.Get("If-None-Match"); inm != "" {
			t.Errorf("the HEAD carried If-None-Match %q: it must ask about the representation", inm)
		}
		// The stored response with the HEAD's fields: X-Version from the
		// HEAD, X-Only-Get kept from the GET (RFC 9111 §3.2).
		if got.header.Get("X-Version") != "2" || got.header.Get("X-Only-Get") != "yes" || got.header.Get("Content-Length") != "5" {
			t.Errorf("the HEAD's client got X-Version %q, X-Only-Get %q, Content-Length %q; want 2, yes, 5",
				got.header.Get("X-Version"), got.header.Get("X-Only-Get"), got.header.Get("Content-Length"))
		}
		// Fresh again for the HEAD's max-age=600: the GET is a hit with the
		// stored body and the updated field.
		f.clock.Advance(5 * time.Minute)
		hit := f.get("/a")
		expect(t, hit, 200, "HIT; layer=l1")
		if hit.body != "hello" || hit.header.Get("X-Version") != "2" {
			t.Errorf("the GET after the HEAD got %q with X-Version %q, want hello and 2", hit.body, hit.header.Get("X-Version"))
		}
		wantOriginCount(t, f, 2)
	})
	t.Run("off", func(t *testing.T) {
		f := newFixture(t, "", head)
		expect(t, f.get("/a"), 200, "MISS")
		f.clock.Advance(2 * time.Minute)
		got := f.do(http.MethodHead, "/a")
		expect(t, got, 200, "MISS")
		if got.header.Get("X-Only-Get") != "" || got.header.Get("X-Version") != "2" {
			t.Errorf("the HEAD's client got the origin's answer? X-Version %q, X-Only-Get %q", got.header.Get("X-Version"), got.header.Get("X-Only-Get"))
		}
		// Nothing changed: the GET revalidates the old copy.
		expect(t, f.get("/a"), 200, "REVALIDATED")
		if inm := f.origin.last().Header.Get("If-None-Match"); inm != `"v1"` {
			t.Errorf("the GET after the HEAD sent If-None-Match %q, want the stored \"v1\"", inm)
		}
		wantOriginCount(t, f, 3)
	})
}

func TestAHeadShowingTheResourceChangedRemovesTheStoredGet(t *testing.T) {
	for name, fields := range map[string][]string{
		"another ETag":           {"ETag", `"v2"`, "Cache-Control", "max-age=600"},
		"another Content-Length": {"ETag", `"v1"`, "Content-Length", "6", "Cache-Control", "max-age=600"},
		"another Last-Modified":  {"Last-Modified", "Fri, 01 Mar 2024 11:30:00 GMT"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "defaults: {updateFromHead: true}", headOrigin(fields...))
			expect(t, f.get("/a"), 200, "MISS")
			f.clock.Advance(2 * time.Minute)
			got := f.do(http.MethodHead, "/a")
			expect(t, got, 200, "MISS") // the origin's own answer
			if got.header.Get("X-Only-Get") != "" {
				t.Errorf("the HEAD's client got the removed response's X-Only-Get")
			}
			if k := storedKind(f, "/a"); k != -1 {
				t.Fatalf("the stored GET is still there (kind %d)", k)
			}
			// Removed, not revalidated: the next GET asks for the whole
			// response.
			expect(t, f.get("/a"), 200, "MISS")
			if inm := f.origin.last().Header.Get("If-None-Match"); inm != "" {
				t.Errorf("the GET after the HEAD sent If-None-Match %q, as if the old copy were kept", inm)
			}
		})
	}
}

func TestAHeadThatMayNotUpdateIsPassedThroughAndChangesNothing(t *testing.T) {
	for name, hdr := range map[string][]string{
		"a HEAD with a Cookie":         {"Cookie", "session=a"},
		"a HEAD with Authorization":    {"Authorization", "Bearer x"},
		"a HEAD with request no-store": {"Cache-Control", "no-store"},
		"a HEAD with Range":            {"Range", "bytes=0-1"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, "defaults: {updateFromHead: true}",
				headOrigin("Cache-Control", "max-age=600", "ETag", `"v2"`, "X-Version", "2"))
			expect(t, f.get("/a"), 200, "MISS")
			f.clock.Advance(2 * time.Minute)
			got := f.do(http.MethodHead, "/a", hdr...)
			expect(t, got, 200, "MISS")
			if got.header.Get("X-Only-Get") != "" {
				t.Errorf("the HEAD was answered from the stored response")
			}
			// Neither updated nor removed: the GET revalidates the old copy.
			expect(t, f.get("/a"), 200, "REVALIDATED")
			if inm := f.origin.last().Header.Get("If-None-Match"); inm != `"v1"` {
				t.Errorf("the GET after the HEAD sent If-None-Match %q, want \"v1\"", inm)
			}
		})
	}
}

// The HEAD's fields may be stored, so it is sent as a fill is: a
// forwarding header a fill withholds does not reach the origin.
func TestAnUpdatingHeadWithholdsWhatAFillWithholds(t *testing.T) {
	f := newFixture(t, "defaults: {updateFromHead: true}", headOrigin("Cache-Control", "max-age=600", "ETag", `"v1"`))
	expect(t, f.get("/a"), 200, "MISS")
	f.clock.Advance(2 * time.Minute)
	expect(t, f.do(http.MethodHead, "/a", "X-Forwarded-Scheme", "http", "X-Original-URL", "/admin"), 200, "REVALIDATED")
	last := f.origin.last()
	if last.Header.Get("X-Forwarded-Scheme") != "" || last.Header.Get("X-Original-Url") != "" {
		t.Fatalf("the updating HEAD forwarded %v", last.Header)
	}
}

// validatorOrigin answers 304 to If-None-Match "v1" and otherwise 200 with
// ETag "v1", max-age=60 and body "full".
func validatorOrigin(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "max-age=60")
	h.Set("ETag", `"v1"`)
	if r.Header.Get("If-None-Match") == `"v1"` {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = io.WriteString(w, "full")
}

func TestClientValidatorsReachTheOriginOnAMissWhenTheTierSaysSo(t *testing.T) {
	for name, cfg := range map[string]string{
		"standard":                 "defaults: {forwardClientValidators: true}",
		"strict (not on the list)": "defaults: {forwardClientValidators: true}\nrequestHeaders: {mode: strict}",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, cfg, validatorOrigin)
			got := f.get("/a", "If-None-Match", `"v1"`)
			expect(t, got, 304, "MISS")
			if inm := f.origin.last().Header.Get("If-None-Match"); inm != `"v1"` {
				t.Fatalf("the origin received If-None-Match %q, want the client's \"v1\"", inm)
			}
			// The 304 stored nothing, not even a hit-for-miss marker.
			if k := storedKind(f, "/a"); k != -1 {
				t.Fatalf("the origin's 304 left something stored (kind %d)", k)
			}
			// A request without validators fills the cache as ever...
			expect(t, f.get("/a"), 200, "MISS")
			// ...after which a client's validators are answered from it.
			expect(t, f.get("/a", "If-None-Match", `"v1"`), 304, "HIT; layer=l1")
			wantOriginCount(t, f, 2)
		})
	}
	t.Run("If-Modified-Since too", func(t *testing.T) {
		f := newFixture(t, "defaults: {forwardClientValidators: true}", validatorOrigin)
		const ims = "Fri, 01 Mar 2024 11:00:00 GMT"
		f.get("/a", "If-Modified-Since", ims, "If-Range", `"v1"`)
		last := f.origin.last()
		if last.Header.Get("If-Modified-Since") != ims || last.Header.Get("If-Range") != "" {
			t.Fatalf("the origin received If-Modified-Since %q and If-Range %q, want %q and none",
				last.Header.Get("If-Modified-Since"), last.Header.Get("If-Range"), ims)
		}
	})
}

func TestClientValidatorsAreWithheldByDefault(t *testing.T) {
	f := newFixture(t, "", validatorOrigin)
	// The fill asks for the full response, stores it and answers the
	// client's conditional from it.
	expect(t, f.get("/a", "If-None-Match", `"v1"`), 304, "MISS")
	if inm := f.origin.last().Header.Get("If-None-Match"); inm != "" {
		t.Fatalf("the origin received the client's If-None-Match %q", inm)
	}
	hit := f.get("/a")
	expect(t, hit, 200, "HIT; layer=l1")
	if hit.body != "full" {
		t.Fatalf("the stored body is %q", hit.body)
	}
	wantOriginCount(t, f, 1)
}

// With a stored response the fill validates the cache's copy with its own
// validators: the client's do not reach the origin even when forwarded.
func TestAStoredResponseIsValidatedWithItsOwnValidatorsNotTheClients(t *testing.T) {
	f := newFixture(t, "defaults: {forwardClientValidators: true}", validatorOrigin)
	expect(t, f.get("/a"), 200, "MISS")
	f.clock.Advance(2 * time.Minute)
	expect(t, f.get("/a", "If-Modified-Since", "Fri, 01 Mar 2024 11:00:00 GMT"), 200, "REVALIDATED")
	last := f.origin.last()
	if inm, ims := last.Header.Get("If-None-Match"), last.Header.Get("If-Modified-Since"); inm != `"v1"` || ims != "" {
		t.Fatalf("the origin received If-None-Match %q and If-Modified-Since %q, want the stored \"v1\" alone", inm, ims)
	}
}

// A conditional miss joins a collapsed fetch already running for its key,
// whose full response answers its conditional: one origin request.
func TestAConditionalMissJoinsARunningFetch(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	f := newFixture(t, "defaults: {forwardClientValidators: true}", func(w http.ResponseWriter, r *http.Request) {
		<-release
		validatorOrigin(w, r)
	})
	// Registered after the fixture, so it runs first: a failed wait must
	// not leave the origin's handlers blocking the server's Close.
	t.Cleanup(open)
	var wg sync.WaitGroup
	var first response
	wg.Add(1)
	go func() { defer wg.Done(); first = f.get("/a") }()
	waitFor(t, func() bool { return f.origin.count() == 1 }, "the first fill to reach the origin")
	before := testCounter(f.px.m.Coalesced)
	var second response
	wg.Add(1)
	go func() { defer wg.Done(); second = f.get("/a", "If-None-Match", `"v1"`) }()
	waitFor(t, func() bool { return testCounter(f.px.m.Coalesced) > before }, "the conditional request to join")
	open()
	wg.Wait()
	expect(t, first, 200, "MISS")
	expect(t, second, 304, "MISS; coalesced")
	wantOriginCount(t, f, 1)
}

// postOrigin answers a POST to /form with 200, the fields kv and the body
// "posted:<request body>", and a GET with a 60 s "from-get".
func postOrigin(kv ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			for i := 0; i+1 < len(kv); i += 2 {
				w.Header().Add(kv[i], kv[i+1])
			}
			_, _ = io.WriteString(w, "posted:"+string(b))
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "from-get")
	}
}

func (f *fixture) post(path, body string, hdr ...string) response {
	f.t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.srv.URL+path, strings.NewReader(body))
	if err != nil {
		f.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "text/plain")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return f.send(req)
}

func TestAPostAnswerNamingItsOwnURIServesLaterGetsWhenTheTierSaysSo(t *testing.T) {
	origin := postOrigin("Cache-Control", "max-age=60", "Content-Location", "/form")
	t.Run("on", func(t *testing.T) {
		f := newFixture(t, "defaults: {storePostResponses: true}", origin)
		expect(t, f.get("/form"), 200, "MISS")
		posted := f.post("/form", "x=1")
		expect(t, posted, 200, "BYPASS")
		if posted.body != "posted:x=1" {
			t.Fatalf("the POST's client got %q", posted.body)
		}
		if last := f.origin.last(); last.Method != http.MethodPost {
			t.Fatalf("the origin got %s, want the POST", last.Method)
		}
		hit := f.get("/form")
		expect(t, hit, 200, "HIT; layer=l1")
		if hit.body != "posted:x=1" || hit.header.Get("Content-Location") != "/form" {
			t.Fatalf("the GET after the POST got %q (Content-Location %q), want the POST's answer", hit.body, hit.header.Get("Content-Location"))
		}
		wantOriginCount(t, f, 2)
		// A GET of the same URI with a query is another resource.
		expect(t, f.get("/form?q=1"), 200, "MISS")
	})
	t.Run("off", func(t *testing.T) {
		f := newFixture(t, "", origin)
		expect(t, f.get("/form"), 200, "MISS")
		expect(t, f.post("/form", "x=1"), 200, "BYPASS")
		// The POST invalidated /form (RFC 9111 §4.4) and stored nothing.
		got := f.get("/form")
		expect(t, got, 200, "MISS")
		if got.body != "from-get" {
			t.Fatalf("the GET after the POST got %q", got.body)
		}
		wantOriginCount(t, f, 3)
	})
}

func TestAPostAnswerThatMayNotStandForItsURIIsNotStored(t *testing.T) {
	cases := map[string]struct {
		cfg    string
		fields []string
		hdr    []string
	}{
		"without Content-Location": {fields: []string{"Cache-Control", "max-age=60"}},
		"with another Content-Location": {
			fields: []string{"Cache-Control", "max-age=60", "Content-Location", "/form/1"}},
		"without explicit freshness": {
			fields: []string{"Content-Location", "/form", "Last-Modified", "Fri, 01 Mar 2024 11:00:00 GMT"}},
		"with Set-Cookie": {
			fields: []string{"Cache-Control", "max-age=60", "Content-Location", "/form", "Set-Cookie", "s=1"}},
		"private": {
			fields: []string{"Cache-Control", "private, max-age=60", "Content-Location", "/form"}},
		"sent with a forwarding header a fill withholds": {
			fields: []string{"Cache-Control", "max-age=60", "Content-Location", "/form"},
			hdr:    []string{"X-Forwarded-Host", "evil.example"}},
		"sent in strict mode with a header off the list": {
			cfg:    "requestHeaders: {mode: strict}\n",
			fields: []string{"Cache-Control", "max-age=60", "Content-Location", "/form"},
			hdr:    []string{"X-Debug", "1"}},
		"sent with a query the rule reshapes": {
			cfg:    "rules: [{name: r, match: {pathPrefix: /}, cacheKey: {queryExclude: [utm_*]}}]\n",
			fields: []string{"Cache-Control", "max-age=60", "Content-Location", "/form?utm_x=1"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, tc.cfg+"defaults: {storePostResponses: true}", postOrigin(tc.fields...))
			path := "/form"
			if strings.Contains(name, "query") {
				path = "/form?utm_x=1"
			}
			expect(t, f.post(path, "x=1", tc.hdr...), 200, "BYPASS")
			got := f.get("/form")
			expect(t, got, 200, "MISS")
			if got.body != "from-get" {
				t.Fatalf("the GET got %q", got.body)
			}
		})
	}
}

// In strict mode the POST's body headers (Content-Type, Content-Length)
// are not held against it: they describe what the key ignores anyway.
func TestAPostAnswerIsStoredInStrictModeWhenItSentOnlyAllowedHeaders(t *testing.T) {
	f := newFixture(t, "requestHeaders: {mode: strict}\ndefaults: {storePostResponses: true}",
		postOrigin("Cache-Control", "max-age=60", "Content-Location", "/form"))
	expect(t, f.post("/form", "x=1", "Accept", "text/plain"), 200, "BYPASS")
	expect(t, f.get("/form"), 200, "HIT; layer=l1")
}
