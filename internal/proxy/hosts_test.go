package proxy

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/invalidate"
)

// hostEcho answers with the Host it received, without freshness: only a
// rule's ttl stores it.
func hostEcho(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "host="+r.Host)
}

const perHost = `
rules:
  - name: shop
    match: {pathPrefix: /, hosts: [shop.example]}
    ttl: 1m
  - name: tenants
    match: {pathPrefix: /, hosts: ["*.tenants.example"]}
    ttl: 1h
`

// Rules select by host: a host no rule names takes the default rule (no
// ttl here, so nothing is stored), and each host keeps its own entry.
func TestRulesApplyPerHost(t *testing.T) {
	f := newFixture(t, perHost, hostEcho)
	for _, tc := range []struct {
		host, second, body string
	}{
		{"shop.example", "HIT; layer=l1", "host=shop.example"},
		{"SHOP.example:80", "HIT; layer=l1", "host=shop.example"}, // the key's host: lower case, default port dropped
		{"a.tenants.example", "HIT; layer=l1", "host=a.tenants.example"},
		{"tenants.example", "MISS", "host=tenants.example"},
		{"other.example", "MISS", "host=other.example"},
	} {
		f.get("/page", "Host", tc.host)
		r := f.get("/page", "Host", tc.host)
		if r.xcache() != tc.second || r.body != tc.body {
			t.Errorf("host %q: second request %q %q, want %q %q", tc.host, r.xcache(), r.body, tc.second, tc.body)
		}
	}
	if got := f.get("/page", "Host", "shop.example").header.Get("Cache-Status"); !strings.Contains(got, "detail=shop") {
		t.Errorf("Cache-Status %q does not name the shop rule", got)
	}
}

// An absolute-form target and a Host field that disagree: the target's
// authority is the request's host (RFC 9112 §3.2.2), the one the key
// holds and the origin receives, so it alone selects the rule; the Host
// field cannot pick the shop rule for a request the origin sees as
// another host's, nor the other way.
func TestAnAbsoluteTargetsHostSelectsTheRule(t *testing.T) {
	f := newFixture(t, perHost, hostEcho)
	addr := f.srv.Listener.Addr().String()
	for range 2 {
		status, body := rawGet(t, addr, "GET http://other.example/page HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n")
		if status != 200 || !strings.HasSuffix(body, "host=other.example") {
			t.Fatalf("absolute target other.example with Host shop.example: %d %q", status, body)
		}
	}
	if n := f.origin.count(); n != 2 {
		t.Fatalf("%d origin requests, want 2: other.example's answer has no ttl and must not be stored under shop's", n)
	}
	// The shop entry is filled through an absolute target naming shop,
	// whatever the Host field says.
	rawGet(t, addr, "GET http://shop.example/page HTTP/1.1\r\nHost: other.example\r\nConnection: close\r\n\r\n")
	if got := f.origin.last().Host; got != "shop.example" {
		t.Fatalf("the origin saw Host %q, want shop.example", got)
	}
	if r := f.get("/page", "Host", "shop.example"); r.xcache() != "HIT; layer=l1" || r.body != "host=shop.example" {
		t.Fatalf("shop.example after its fill: %q %q", r.xcache(), r.body)
	}
}

// A purge of a full URL finds its entries under the rule its host
// selects: here only the shop's rule sorts the query, so a purge keyed
// under another rule's shape would miss the stored entry.
func TestAPurgeKeysAURLUnderItsHostsRule(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: shop
    match: {pathPrefix: /, hosts: [shop.example]}
    cacheKey: {sortQuery: true}
`, cacheFor("public, max-age=600", "x"))
	expect(t, f.get("/p?b=1&a=2", "Host", "shop.example"), 200, "MISS")
	expect(t, f.get("/p?a=2&b=1", "Host", "shop.example"), 200, "HIT; layer=l1")
	res, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"http://shop.example/p?b=1&a=2"}})
	if err != nil || res.Purged != 1 {
		t.Fatalf("purge: %+v, %v; want 1 entry purged", res, err)
	}
	expect(t, f.get("/p?a=2&b=1", "Host", "shop.example"), 200, "MISS")
}
