package sidecar

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// PURGE on the serving port (purge.httpMethod), against a real sidecar in
// front of a real origin, over real HTTP.

const methodToken = "0123456789abcdef-method-token"

// purgeOrigin answers a GET with "<host><path> v<n>" (n counting that
// host and path's GETs), fresh for cacheControl; a PURGE with 200
// "origin purged". It records every request it gets.
type purgeOrigin struct {
	url          string
	cacheControl string

	mu   sync.Mutex
	gets map[string]int
	seen []*http.Request // method, host, URL and header of each request
}

func newPurgeOrigin(t *testing.T, cacheControl string) *purgeOrigin {
	t.Helper()
	o := &purgeOrigin{cacheControl: cacheControl, gets: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.seen = append(o.seen, &http.Request{Method: r.Method, Host: r.Host, URL: r.URL, Header: r.Header.Clone()})
		if r.Method == "PURGE" {
			_, _ = io.WriteString(w, "origin purged")
			return
		}
		o.gets[r.Host+r.URL.Path]++
		w.Header().Set("Cache-Control", o.cacheControl)
		w.Header().Set("ETag", fmt.Sprintf(`"v%d"`, o.gets[r.Host+r.URL.Path]))
		fmt.Fprintf(w, "%s%s v%d", r.Host, r.URL.Path, o.gets[r.Host+r.URL.Path])
	}))
	t.Cleanup(srv.Close)
	o.url = srv.URL
	return o
}

// purges returns the PURGE requests the origin got.
func (o *purgeOrigin) purges() []*http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*http.Request
	for _, r := range o.seen {
		if r.Method == "PURGE" {
			out = append(out, r)
		}
	}
	return out
}

// tokenSeen reports whether any request reached the origin with the token.
func (o *purgeOrigin) tokenSeen() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.seen {
		for _, vs := range r.Header {
			for _, v := range vs {
				if strings.Contains(v, methodToken) {
					return true
				}
			}
		}
	}
	return false
}

type answer struct {
	status int
	xcache string
	body   string
}

// send sends method path to s's serving port with Host host and the
// header fields hdr (name, value, name, value, ...).
func (s *sidecar) send(t *testing.T, method, host, path string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addrs.Serve+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := s.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, resp.Header.Get("X-Cache"), string(b)}
}

func (s *sidecar) expectGet(t *testing.T, host, path, xcache, body string) {
	t.Helper()
	if a := s.send(t, http.MethodGet, host, path); a.status != 200 || a.xcache != xcache || a.body != body {
		t.Fatalf("GET %s%s: %d %q %q, want 200 %q %q", host, path, a.status, a.xcache, a.body, xcache, body)
	}
}

// purgeAnswer decodes the JSON answer of a purge.
func purgeAnswer(t *testing.T, a answer) purgeResult {
	t.Helper()
	var res purgeResult
	if err := json.Unmarshal([]byte(a.body), &res); err != nil {
		t.Fatalf("purge answer %d %q: %v", a.status, a.body, err)
	}
	return res
}

func TestWithoutHTTPMethodAPurgeGoesToTheOriginAsToday(t *testing.T) {
	origin := newPurgeOrigin(t, "max-age=300")
	s := start(t, origin.url, "--config", writeConfig(t, smallL1+"purge: {token: "+methodToken+"}\n"))
	defer s.stop(t)

	s.expectGet(t, "a.example", "/p", "MISS", "a.example/p v1")
	s.expectGet(t, "a.example", "/p", "HIT; layer=l1", "a.example/p v1")
	// An application that implements PURGE itself still gets it, headers
	// and all, and its 200 invalidates the URL as any unsafe method's
	// does (RFC 9111 §4.4).
	a := s.send(t, "PURGE", "a.example", "/p", "Authorization", "Bearer app-own-scheme")
	if a.status != 200 || a.body != "origin purged" || a.xcache != "BYPASS" {
		t.Fatalf("PURGE: %d %q %q, want the origin's answer passed through", a.status, a.xcache, a.body)
	}
	got := origin.purges()
	if len(got) != 1 || got[0].URL.Path != "/p" || got[0].Header.Get("Authorization") != "Bearer app-own-scheme" {
		t.Fatalf("the origin got %d PURGEs (%v), want the one sent", len(got), got)
	}
	s.expectGet(t, "a.example", "/p", "MISS", "a.example/p v2")
}

func TestAPurgeOnTheServingPortNeedsTheTokenAndPurgesItsOwnURL(t *testing.T) {
	origin := newPurgeOrigin(t, "max-age=300")
	cfg := smallL1 + "purge: {token: " + methodToken + ", httpMethod: true}\n" +
		"rules: [{name: q, match: {pathPrefix: /q}, cacheKey: {queryExclude: [utm_source]}}]\n"
	s := start(t, origin.url, "--config", writeConfig(t, cfg))
	defer s.stop(t)
	bearer := "Bearer " + methodToken

	s.expectGet(t, "a.example", "/p", "MISS", "a.example/p v1")
	s.expectGet(t, "b.example", "/p", "MISS", "b.example/p v1")

	refused := []struct {
		name   string
		hdr    []string
		status int
		want   string
	}{
		{"a PURGE without a token is refused", nil, 401, "bearer token"},
		{"a PURGE with a wrong token is refused", []string{"Authorization", "Bearer " + strings.Repeat("x", len(methodToken))}, 401, "bearer token"},
		{"a PURGE with the token in another scheme is refused", []string{"Authorization", "Basic " + methodToken}, 401, "bearer token"},
		{"a bad soft purge header is named", []string{"Authorization", bearer, "Tiercache-Soft-Purge", "yes"}, 400, "Tiercache-Soft-Purge: must be 1"},
	}
	for _, c := range refused {
		a := s.send(t, "PURGE", "a.example", "/p", c.hdr...)
		if a.status != c.status || !strings.Contains(a.body, c.want) {
			t.Errorf("%s: %d %q, want %d naming %q", c.name, a.status, a.body, c.status, c.want)
		}
	}
	s.expectGet(t, "a.example", "/p", "HIT; layer=l1", "a.example/p v1")

	// The right token purges the URL of the request's own Host (spelt as
	// the key normalizes it) and nothing of the other host.
	a := s.send(t, "PURGE", "A.Example:80", "/p", "Authorization", bearer)
	if res := purgeAnswer(t, a); a.status != 200 || res.Purged != 1 || res.L1 != 1 || res.Soft {
		t.Fatalf("PURGE: %d %q, want 200 and one hard purge from L1", a.status, a.body)
	}
	s.expectGet(t, "a.example", "/p", "MISS", "a.example/p v2")
	s.expectGet(t, "b.example", "/p", "HIT; layer=l1", "b.example/p v1")

	// The query is shaped by the path's rule, as the key is.
	s.expectGet(t, "a.example", "/q?id=1", "MISS", "a.example/q v1")
	a = s.send(t, "PURGE", "a.example", "/q?utm_source=mail&id=1", "Authorization", bearer)
	if res := purgeAnswer(t, a); a.status != 200 || res.L1 != 1 {
		t.Fatalf("PURGE with an excluded parameter: %d %q, want the keyed URL purged", a.status, a.body)
	}
	s.expectGet(t, "a.example", "/q?id=1", "MISS", "a.example/q v2")

	if n := len(origin.purges()); n != 0 || origin.tokenSeen() {
		t.Fatalf("the origin got %d PURGEs, token seen %v: with httpMethod on none may reach it", n, origin.tokenSeen())
	}
	_, metrics := s.get(t, "http://"+s.addrs.Admin+"/metrics")
	for _, want := range []string{
		`tiercache_purge_requests_total{result="purged"} 2`,
		`tiercache_purge_requests_total{result="unauthorized"} 3`,
		`tiercache_purge_requests_total{result="invalid"} 1`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestAPurgeOnTheServingPortIsRefusedWithoutATokenEvenFromLoopback(t *testing.T) {
	origin := newPurgeOrigin(t, "max-age=300")
	s := start(t, origin.url, "--config", writeConfig(t, smallL1+"purge: {httpMethod: true}\n"))
	defer s.stop(t)
	s.expectGet(t, "a.example", "/p", "MISS", "a.example/p v1")
	// The test client is on 127.0.0.1, which the admin port trusts
	// without a token; the serving port never does.
	a := s.send(t, "PURGE", "a.example", "/p")
	if a.status != 403 || !strings.Contains(a.body, "purge.token") {
		t.Fatalf("PURGE without a configured token: %d %q, want 403 naming purge.token", a.status, a.body)
	}
	s.expectGet(t, "a.example", "/p", "HIT; layer=l1", "a.example/p v1")
	if n := len(origin.purges()); n != 0 {
		t.Fatalf("the origin got %d PURGEs", n)
	}
}

func TestASoftPurgeOnTheServingPortServesStaleWhileTheOriginIsAsked(t *testing.T) {
	origin := newPurgeOrigin(t, "max-age=300, stale-while-revalidate=60")
	s := start(t, origin.url, "--config", writeConfig(t, smallL1+"purge: {token: "+methodToken+", httpMethod: true}\n"))
	defer s.stop(t)

	s.expectGet(t, "a.example", "/p", "MISS", "a.example/p v1")
	a := s.send(t, "PURGE", "a.example", "/p", "Authorization", "Bearer "+methodToken, "Tiercache-Soft-Purge", "1")
	if res := purgeAnswer(t, a); a.status != 200 || !res.Soft || res.L1 != 1 {
		t.Fatalf("soft PURGE: %d %q, want 200, soft, one response from L1", a.status, a.body)
	}
	if got := s.send(t, http.MethodGet, "a.example", "/p"); !strings.HasPrefix(got.xcache, "STALE") || got.body != "a.example/p v1" {
		t.Fatalf("GET after the soft purge: %q %q, want the stale v1", got.xcache, got.body)
	}
}

func TestPurgesThroughBothPortsShareOneRateLimit(t *testing.T) {
	origin := newPurgeOrigin(t, "max-age=300")
	// Two purges, then one per 1000 s: the test never sees a refill.
	s := start(t, origin.url, "--config", writeConfig(t, smallL1+"purge: {token: "+methodToken+", httpMethod: true}\n"),
		"--purge-rate", "0.001", "--purge-burst", "2")
	defer s.stop(t)
	admin := func() int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addrs.Admin+"/purge", strings.NewReader(`{"urls":["/x"]}`))
		req.Header.Set("Authorization", "Bearer "+methodToken)
		resp, err := s.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	method := func() answer { return s.send(t, "PURGE", "a.example", "/x", "Authorization", "Bearer "+methodToken) }

	if got := admin(); got != 200 {
		t.Fatalf("first admin purge: %d", got)
	}
	if got := method(); got.status != 200 {
		t.Fatalf("first PURGE: %d %q", got.status, got.body)
	}
	if got := method(); got.status != http.StatusTooManyRequests || !strings.Contains(got.body, "rate limit") {
		t.Fatalf("third purge, by PURGE: %d %q, want 429", got.status, got.body)
	}
	if got := admin(); got != http.StatusTooManyRequests {
		t.Fatalf("fourth purge, by the admin API: %d, want 429", got)
	}
}

// A PURGE on the serving port has its access-log line like any request:
// method, path, status and bytes of the purge's answer, result "purge";
// a refused one too (401), and never the token.
func TestAPurgeOnTheServingPortIsInTheAccessLog(t *testing.T) {
	origin := newPurgeOrigin(t, "max-age=300")
	cfg := smallL1 + "purge: {token: " + methodToken + ", httpMethod: true}\n"
	var logs lockedBuffer
	s := startLogging(t, &logs, origin.url, "--config", writeConfig(t, cfg))
	s.expectGet(t, "a.example", "/logged", "MISS", "a.example/logged v1")
	refused := s.send(t, "PURGE", "a.example", "/logged")
	done := s.send(t, "PURGE", "a.example", "/logged", "Authorization", "Bearer "+methodToken)
	if refused.status != http.StatusUnauthorized || done.status != http.StatusOK {
		t.Fatalf("PURGE answers %d and %d, want 401 and 200", refused.status, done.status)
	}
	s.stop(t) // the access log is flushed at shutdown

	var lines []map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["msg"] == "access" && m["method"] == "PURGE" {
			lines = append(lines, m)
		}
	}
	if len(lines) != 2 {
		t.Fatalf("%d access lines for PURGE, want 2:\n%s", len(lines), logs.String())
	}
	for i, want := range []struct {
		status float64
		bytes  int
	}{{401, len(refused.body)}, {200, len(done.body)}} {
		m := lines[i]
		if m["path"] != "/logged" || m["status"] != want.status || m["bytes"] != float64(want.bytes) || m["result"] != "purge" {
			t.Errorf("line %d: %v; want path /logged, status %v, bytes %d, result purge", i, m, want.status, want.bytes)
		}
	}
	if strings.Contains(logs.String(), methodToken) {
		t.Errorf("the purge token is in the log:\n%s", logs.String())
	}
}
