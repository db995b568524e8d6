package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/accesslog"
)

// lockedBuffer is the access log's writer in tests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// logLines closes lg (writing what waits) and parses every line of out.
func logLines(t *testing.T, lg *accesslog.Logger, out *lockedBuffer) []map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := lg.Close(ctx); err != nil {
		t.Fatal(err)
	}
	out.mu.Lock()
	defer out.mu.Unlock()
	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSuffix(out.b.String(), "\n"), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// The access log line of each kind of answer, over real HTTP from a real
// origin: the proxy reports status and bytes from what it wrote, without
// wrapping the ResponseWriter.
func TestAccessLogLines(t *testing.T) {
	out := &lockedBuffer{}
	lg, err := accesslog.New(accesslog.Options{Writer: out, Defaults: accesslog.DefaultDefaults(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close(context.Background()) })
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/stale"):
			w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=600")
		case strings.HasPrefix(r.URL.Path, "/pass"):
			w.Header().Set("Cache-Control", "max-age=60")
		default:
			w.Header().Set("Cache-Control", "max-age=60")
		}
		_, _ = w.Write([]byte("0123456789"))
	})
	cfg := "rules:\n- name: passing\n  match: {pathPrefix: /pass}\n  bypass: true\n"
	f := newFixtureWith(t, cfg, o, func(po *Options) { po.AccessLog = lg }, nil)

	expect(t, f.get("/a?token=s3cret", "Cookie", "session=cookiesecret"), 200, "MISS")
	expect(t, f.get("/a?token=s3cret", "Authorization", "Bearer authsecret"), 200, "HIT; layer=l1")
	expect(t, f.get("/pass"), 200, "BYPASS")
	expect(t, f.get("/stale"), 200, "MISS")
	f.clock.Advance(10 * time.Second)
	if r := f.get("/stale"); r.status != 200 || !strings.HasPrefix(r.xcache(), "STALE") {
		t.Fatalf("got %d %q, want a stale answer", r.status, r.xcache())
	}
	// The background refresh of the stale answer is not a request: it
	// logs nothing. Wait for it so that Close below finds all lines.
	deadline := time.Now().Add(5 * time.Second)
	for o.count() < 4 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}

	f.srv.Close() // waits for every handler, and so every line
	lines := logLines(t, lg, out)
	want := []struct{ path, result, layer string }{
		{"/a", "miss", "origin"},
		{"/a", "hit", "l1"},
		{"/pass", "bypass", "origin"},
		{"/stale", "miss", "origin"},
		{"/stale", "stale", "l1"},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d: %v", len(lines), len(want), lines)
	}
	for i, w := range want {
		l := lines[i]
		if l["path"] != w.path || l["result"] != w.result || l["layer"] != w.layer ||
			l["status"] != float64(200) || l["bytes"] != float64(10) || l["method"] != "GET" ||
			l["msg"] != "access" || l["client"] != "127.0.0.1" {
			t.Errorf("line %d = %v, want path %s result %s layer %s status 200 bytes 10 from 127.0.0.1", i, l, w.path, w.result, w.layer)
		}
		if d, ok := l["duration"].(float64); !ok || d <= 0 || d > 5 {
			t.Errorf("line %d: duration %v, want seconds in (0, 5]", i, l["duration"])
		}
		if _, ok := l["query"]; ok {
			t.Errorf("line %d logs a query, which no queryParams allow: %v", i, l)
		}
	}
	out.mu.Lock()
	all := out.b.String()
	out.mu.Unlock()
	for _, secret := range []string{"s3cret", "authsecret", "cookiesecret"} {
		if strings.Contains(all, secret) {
			t.Errorf("the access log holds the secret %q:\n%s", secret, all)
		}
	}
}

// BenchmarkServeHTTPHitAccessLog is BenchmarkServeHTTPHit with the access
// log on (every request logged, lines written to io.Discard).
func BenchmarkServeHTTPHitAccessLog(b *testing.B) {
	f, req := benchFixture(b)
	lg, err := accesslog.New(accesslog.Options{Writer: io.Discard, Defaults: accesslog.DefaultDefaults(), FlushInterval: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = lg.Close(context.Background()) }()
	f.px.alog = lg
	w := &benchWriter{h: make(http.Header, 16)}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		w.status, w.n = 0, 0
		f.px.ServeHTTP(w, req)
		if w.status != 200 || w.n != 1024 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
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
