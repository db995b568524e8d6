package sidecar

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/test/testredis"
)

// doWith is node.do with request headers.
func (n *node) doWith(t *testing.T, method, path string, hdr http.Header) reply {
	t.Helper()
	req, err := http.NewRequest(method, n.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = testHost
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, xcache: resp.Header.Get("X-Cache"), body: string(b)}
}

func TestAPurgeThroughOneReplicaStopsAnotherReplicasFillOfTheURL(t *testing.T) {
	rs := testredis.Start(t)
	started, gate := make(chan struct{}, 4), make(chan struct{})
	var n atomic.Int64
	origin := newRawOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		v := n.Add(1)
		if v == 1 {
			started <- struct{}{}
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Cache-Control", "max-age=300")
		fmt.Fprintf(w, "v%d", v)
	})
	cfg := writeConfig(t, smallL1)
	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	b := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)

	// B fetches /slow; while the origin holds it, /slow is purged through A.
	fill := make(chan reply, 1)
	go func() { r, _ := b.do(http.MethodGet, "/slow"); fill <- r }()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("B's fill did not reach the origin")
	}
	purgesBefore := b.metric(t, "tiercache_purges_total")
	if status, res := a.purge(t, `{"urls":["/slow"]}`); status != http.StatusOK {
		t.Fatalf("purge: %d %+v", status, res)
	}
	// B has applied A's message once its purge count moved.
	for deadline := time.Now().Add(5 * time.Second); b.metric(t, "tiercache_purges_total") == purgesBefore; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("B never received the purge published by A")
		}
	}
	close(gate)
	select {
	case r := <-fill:
		if r.status != http.StatusOK || r.body != "v1" {
			t.Fatalf("B's overtaken fill answered %d %q, want 200 v1", r.status, r.body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("B's fill never answered")
	}
	// Neither B's L1 nor L2 may hold v1: both replicas fetch afresh.
	b.expect(t, "/slow", "MISS", "v2")
	if r := a.get(t, "/slow"); r.body == "v1" {
		t.Fatalf("A served the purged v1 (%s): B stored its overtaken fill in L2", r.xcache)
	}
}

func TestAnUnsafeRequestUnderAKeyedRuleRemovesTheVariantsFromL2Too(t *testing.T) {
	rs := testredis.Start(t)
	origin := newRawOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		_, _ = io.WriteString(w, r.Method+" for "+r.Header.Get("X-Tenant"))
	})
	cfg := writeConfig(t, smallL1+`rules: [{name: tenants, match: {pathPrefix: /}, cacheKey: {headers: [X-Tenant]}}]`+"\n")
	a := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	b := startNode(t, origin.URL, "--redis-addr", rs.Addr(), "--config", cfg)
	a.waitReady(t)
	b.waitReady(t)
	tenant := http.Header{"X-Tenant": {"a"}}

	if r := a.doWith(t, http.MethodGet, "/k", tenant); r.xcache != "MISS" {
		t.Fatalf("first GET via A: %q", r.xcache)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if r := b.doWith(t, http.MethodGet, "/k", tenant); r.xcache == "HIT; layer=l2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("B never found A's fill in L2")
		}
	}
	if r := a.doWith(t, http.MethodPost, "/k", tenant); r.status != http.StatusOK || r.xcache != "BYPASS" {
		t.Fatalf("POST via A: %d %q", r.status, r.xcache)
	}
	// A dropped its own copy and L2's at once; B may serve its L1 copy
	// until A's message arrives, but never the L2 copy after that.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r := b.doWith(t, http.MethodGet, "/k", tenant)
		if r.xcache == "HIT; layer=l2" {
			t.Fatal("B found the invalidated variant in L2")
		}
		if r.xcache == "MISS" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("B still serves the invalidated variant: %q", r.xcache)
		}
	}
}

// newRawOrigin is an origin serving h, closed when the test ends.
func newRawOrigin(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}
