package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/accesslog"
)

// Found by an attacker review of the issue 13/14 features; each test
// failed before its fix.

const attackToken = "attack13-purge-token-s3cret"

// The debug mode says "the field never reaches the origin", and
// ServeHTTP hands WebSocket/HTTP upgrade requests to the upgrade proxy
// before debugRequest strips Tiercache-Debug. A client (or a page script
// of a tenant) that carries the tier's purge token in Tiercache-Debug on
// an Upgrade request delivers the purge token to the origin, which may
// log it or belong to another team; the origin can then purge the whole
// tier and read every debug answer.
// Defence: strip Tiercache-Debug (every spelling net/http canonicalizes
// to it) from upgrade requests too, before outboundTo.
func TestTheDebugTokenNeverReachesTheOriginOnAnUpgrade(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		// Refuse the upgrade: the request reached the origin, which is
		// all the attack needs.
		w.WriteHeader(http.StatusBadRequest)
	})
	f := newFixtureFor(t, "purge: {token: \""+attackToken+"\"}\n", o)
	r := f.get("/ws", "Upgrade", "websocket", "Connection", "Upgrade",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==",
		debugHeader, attackToken)
	if r.status != http.StatusBadRequest {
		t.Fatalf("status %d, want the origin's 400 relayed", r.status)
	}
	last := o.last()
	if last == nil {
		t.Fatal("the upgrade request never reached the origin")
	}
	if v := last.Header.Values(debugHeader); len(v) > 0 {
		t.Errorf("the origin received %s: %q: the tier's purge token left the sidecar", debugHeader, v)
	}
}

// Attack: the access log logs the request target as received
// (RequestURI up to '?'). An absolute-form target carries userinfo
// ("GET http://alice:s3cret@host/page"), which browsers and many HTTP
// libraries put there from a URL with credentials: the password lands in
// every access log line, readable by whoever reads the pod's stdout (a
// log pipeline shared by the cluster's tenants).
// Defence: log the path (and host) from the parsed URL, never userinfo;
// or refuse absolute-form targets with userinfo with a 400.
func TestTheAccessLogNeverHoldsTheUserinfoOfAnAbsoluteFormTarget(t *testing.T) {
	out := &lockedBuffer{}
	lg, err := accesslog.New(accesslog.Options{Writer: out, Defaults: accesslog.DefaultDefaults(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close(context.Background()) })
	o := newOrigin(t, cacheFor("max-age=60", "page"))
	f := newFixtureWith(t, "{}\n", o, func(po *Options) { po.AccessLog = lg }, nil)

	if status, _ := rawGet(t, f.srv.Listener.Addr().String(),
		"GET http://alice:pw-s3cret@example.com/page HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n"); status != http.StatusOK {
		t.Fatalf("status %d, want 200", status)
	}

	f.srv.Close() // every handler has logged
	lines := logLines(t, lg, out)
	if len(lines) != 1 {
		t.Fatalf("%d lines, want 1: %v", len(lines), lines)
	}
	out.mu.Lock()
	all := out.b.String()
	out.mu.Unlock()
	if strings.Contains(all, "pw-s3cret") {
		t.Errorf("the access log holds the password of the request target's userinfo: %s", all)
	}
}

// rawGet sends one request as raw bytes on a new connection to addr and
// returns the answer's status and body.
func rawGet(t *testing.T, addr, request string) (int, string) {
	t.Helper()
	res, body := rawExchange(t, addr, request, false)
	return res.StatusCode, body
}

// phpCookie reads cookie name as PHP's $_COOKIE does: in every cookie
// name, '+' and percent-escapes are decoded (urldecode) and then ' ', '.'
// and a lone '[' become '_' (PHP's "dots and spaces in variable names are
// converted to underscores").
func phpCookie(r *http.Request, name string) (string, bool) {
	for _, line := range r.Header.Values("Cookie") {
		for _, part := range strings.Split(line, ";") {
			n, v, ok := strings.Cut(strings.TrimLeft(part, " \t"), "=")
			if !ok {
				continue
			}
			n = strings.NewReplacer("+", "_", " ", "_", ".", "_", "[", "_").Replace(n)
			if n == name {
				return v, true
			}
		}
	}
	return "", false
}

// A bypass rule keeps logged-in pages out of the cache with a cookie
// condition on the PHP session cookie "session_id". PHP (and so WordPress,
// Drupal, Magento) reads the cookie "session.id", "session id",
// "session+id" or "session[id" as $_COOKIE["session_id"]. Unless the
// sidecar counts those names as the condition's (ambiguous, so met), it
// sees an anonymous request, the origin sees a session, and the personal
// page (max-age=60 for anonymous pages, as the origin sends it) is stored
// for every anonymous client of the URL.
func TestPHPMangledSessionCookieNamesBypassTheCache(t *testing.T) {
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		if s, ok := phpCookie(r, "session_id"); ok {
			_, _ = io.WriteString(w, "hello "+s)
			return
		}
		_, _ = io.WriteString(w, "hello anon")
	})
	f := newFixtureFor(t, `
rules:
  - name: logged-in
    match: {pathPrefix: /, cookies: [{name: session_id, present: true}]}
    bypass: true
`, o)
	for i, spelled := range []string{"session.id=mallory", "session id=mallory", "session+id=mallory", "session[id=mallory"} {
		path := "/page" + string(rune('a'+i))
		if r := f.get(path, "Cookie", spelled); r.body != "hello mallory" {
			t.Fatalf("cookie %q: the origin answered %q, want the personal page (the test's origin must read the name as PHP does)", spelled, r.body)
		}
		if r := f.get(path); r.body != "hello anon" {
			t.Errorf("cookie %q: the next anonymous client got %q (%s): a personal page was stored for all", spelled, r.body, r.xcache())
		}
	}
}
