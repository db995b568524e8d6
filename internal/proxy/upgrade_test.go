package proxy

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestAProxyWithItsOwnUpgradesTunnelsAWebSocketAndClosesItOnClose(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(context.Background())
			if err != nil {
				return
			}
			if err := c.Write(context.Background(), typ, msg); err != nil {
				return
			}
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(f.srv.URL, "http")+"/ws", nil)
	if err != nil {
		t.Fatalf("WebSocket through the proxy: %v", err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageText, []byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := c.Read(ctx); err != nil || string(msg) != "ping" {
		t.Fatalf("echo: %q, %v", msg, err)
	}
	if err := f.px.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Read(ctx); err == nil || ctx.Err() != nil {
		t.Fatalf("the tunnel stayed open after the proxy closed: %v", err)
	}
}

const upgradePurgeToken = "upgrade-purge-token-s3cret"

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
	f := newFixtureFor(t, "purge: {token: \""+upgradePurgeToken+"\"}\n", o)
	r := f.get("/ws", "Upgrade", "websocket", "Connection", "Upgrade",
		"Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==",
		debugHeader, upgradePurgeToken)
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
