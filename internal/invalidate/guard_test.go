package invalidate

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// purgeServer serves Handler with o on a loopback port and counts the
// results it reports.
type purgeServer struct {
	url    string
	mu     sync.Mutex
	counts map[string]int
}

func newPurgeServer(t *testing.T, p *Purger, c *tierconfig.Compiled, limit *Limiter) *purgeServer {
	t.Helper()
	ps := &purgeServer{counts: map[string]int{}}
	h := Handler(p, tierconfig.NewHolder(c), HandlerOptions{Limit: limit, Count: func(r string) {
		ps.mu.Lock()
		ps.counts[r]++
		ps.mu.Unlock()
	}})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	ps.url = srv.URL
	return ps
}

func (ps *purgeServer) count(result string) int {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.counts[result]
}

// post sends body with the bearer token (none when empty) from the local
// address laddr ("" = any) and returns the status, the error message and
// the Retry-After header.
func (ps *purgeServer) post(t *testing.T, laddr, token, body string) (status int, msg, retryAfter string) {
	t.Helper()
	d := &net.Dialer{}
	if laddr != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(laddr)}
	}
	c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	defer c.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, ps.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var got map[string]any
	_ = json.NewDecoder(res.Body).Decode(&got)
	msg, _ = got["error"].(string)
	return res.StatusCode, msg, res.Header.Get("Retry-After")
}

// Under Istio, inbound traffic from other pods reaches the pod's
// containers from 127.0.0.6. Without a purge token only the pod itself
// (exactly 127.0.0.1) may purge: a peer of the mesh may not.
func TestWithoutATokenAPurgeFrom127006IsRefused(t *testing.T) {
	p, cache, c := newPurger(t, "")
	key := put(t, cache, "http", "a.example", "/kept")
	ps := newPurgeServer(t, p, c, nil)

	status, msg, _ := ps.post(t, "127.0.0.6", "", `{"urls":["/kept"]}`)
	if status != http.StatusForbidden || !strings.Contains(msg, "only from 127.0.0.1 or ::1") {
		t.Fatalf("from 127.0.0.6: %d %q, want 403 naming 127.0.0.1 and ::1", status, msg)
	}
	if !present(cache, key) {
		t.Fatal("a purge from 127.0.0.6 removed the entry")
	}
	if status, msg, _ := ps.post(t, "127.0.0.1", "", `{"urls":["/kept"]}`); status != http.StatusOK {
		t.Fatalf("from 127.0.0.1: %d %q, want 200", status, msg)
	}
	if present(cache, key) {
		t.Fatal("a purge from 127.0.0.1 left the entry")
	}
	if got := ps.count(ResultUnauthorized); got != 1 {
		t.Errorf("unauthorized purges counted %d, want 1", got)
	}
}

func TestPurgingEverythingNeedsAllTrueGivenAlone(t *testing.T) {
	p, cache, c := newPurger(t, "")
	a := put(t, cache, "http", "a.example", "/a")
	b := put(t, cache, "http", "b.example", "/b/c")
	ps := newPurgeServer(t, p, c, nil)
	for _, tc := range []struct{ body, want string }{
		{`{"prefix":"/"}`, `send {"all": true}`},
		{`{"all":true,"urls":["/a"]}`, "must be given alone"},
		{`{"all":true,"prefix":"/b/"}`, "must be given alone"},
		{`{"all":false}`, "nothing to purge"},
		{`{}`, "nothing to purge"},
	} {
		status, msg, _ := ps.post(t, "", "", tc.body)
		if status != http.StatusBadRequest || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %d %q, want 400 containing %q", tc.body, status, msg, tc.want)
		}
	}
	if !present(cache, a) || !present(cache, b) {
		t.Fatal("a refused purge removed entries")
	}
	if status, msg, _ := ps.post(t, "", "", `{"all":true}`); status != http.StatusOK {
		t.Fatalf(`{"all":true}: %d %q, want 200`, status, msg)
	}
	if present(cache, a) || present(cache, b) {
		t.Fatal(`{"all":true} left entries`)
	}
	if got := ps.count(ResultInvalid); got != 5 {
		t.Errorf("invalid purges counted %d, want 5", got)
	}
}

// Every other sidecar of the tier applies a purge of everything it hears.
func TestAMessagePurgingEverythingEmptiesL1(t *testing.T) {
	p, cache, _ := newPurger(t, "")
	p.SetRemote(nil, "me", 0, nil)
	a := put(t, cache, "http", "a.example", "/a")
	p.HandleMessage([]byte(`{"from":"other","all":true}`))
	if present(cache, a) {
		t.Fatal("a purge of everything from another sidecar left the entry")
	}
}

func TestPurgesOverTheRateLimitGet429WithRetryAfter(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	p, cache, c := newPurger(t, "purge: {token: "+token+"}")
	// 3 at once, then one every 1000 s: the test never sees a refill.
	ps := newPurgeServer(t, p, c, NewLimiter(0.001, 3))

	// Requests without the token spend nothing.
	for range 5 {
		if status, _, _ := ps.post(t, "", "wrong", `{"urls":["/a"]}`); status != http.StatusUnauthorized {
			t.Fatalf("a wrong token got %d, want 401", status)
		}
	}
	for i := range 3 {
		if status, msg, _ := ps.post(t, "", token, `{"urls":["/a"]}`); status != http.StatusOK {
			t.Fatalf("purge %d within the burst: %d %q, want 200", i, status, msg)
		}
	}
	key := put(t, cache, "http", "a.example", "/a")
	status, msg, retry := ps.post(t, "", token, `{"urls":["/a"]}`)
	if status != http.StatusTooManyRequests || !strings.Contains(msg, "rate limit") {
		t.Fatalf("the purge over the burst: %d %q, want 429 naming the rate limit", status, msg)
	}
	if n, err := strconv.Atoi(retry); err != nil || n < 1 || n > 1000 {
		t.Fatalf("Retry-After %q, want whole seconds in [1, 1000]", retry)
	}
	if !present(cache, key) {
		t.Fatal("a purge refused by the rate limit removed the entry")
	}
	if got := ps.count(ResultLimited); got != 1 {
		t.Errorf("limited purges counted %d, want 1", got)
	}
	if got := ps.count(ResultPurged); got != 3 {
		t.Errorf("purges counted %d, want 3", got)
	}
}

// A purge of everything takes the whole burst: a leaked token cannot keep
// the cache empty by repeating it.
func TestAPurgeOfEverythingTakesTheWholeBurst(t *testing.T) {
	p, _, c := newPurger(t, "")
	ps := newPurgeServer(t, p, c, NewLimiter(0.001, 10))
	if status, msg, _ := ps.post(t, "", "", `{"all":true}`); status != http.StatusOK {
		t.Fatalf("the first purge of everything: %d %q, want 200", status, msg)
	}
	for _, body := range []string{`{"all":true}`, `{"urls":["/a"]}`} {
		if status, _, _ := ps.post(t, "", "", body); status != http.StatusTooManyRequests {
			t.Fatalf("%s right after a purge of everything: %d, want 429", body, status)
		}
	}
}

func TestLimiterAllowsAPurgeOfEverythingWhenTheBucketIsFull(t *testing.T) {
	l := NewLimiter(0.001, 4)
	if d := l.take(true); d != 0 {
		t.Fatalf("a full bucket refused a purge of everything: wait %s", d)
	}
	if d := l.take(false); d <= 0 {
		t.Fatal("an empty bucket let a purge through")
	}
	if NewLimiter(0, 5) != nil {
		t.Fatal("a rate of 0 is not 'no limit'")
	}
	var none *Limiter
	if d := none.take(true); d != 0 {
		t.Fatal("no limiter limited")
	}
}
