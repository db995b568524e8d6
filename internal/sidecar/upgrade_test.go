package sidecar

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// wsOrigin is a WebSocket origin at /ws: it greets, echoes every text
// message as "echo: <msg>", closes with 4000 "bye" when told "bye", and
// reports how each connection ended on closed.
type wsOrigin struct {
	*httptest.Server
	closed chan websocket.StatusCode
}

func newWSOrigin(t *testing.T) *wsOrigin {
	t.Helper()
	o := &wsOrigin{closed: make(chan websocket.StatusCode, 4)}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/ws" {
			w.Header().Set("Cache-Control", "max-age=60")
			_, _ = w.Write([]byte("plain"))
			return
		}
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		c.SetReadLimit(1 << 20)
		ctx := context.Background()
		if err := c.Write(ctx, websocket.MessageText, []byte("hello "+r.Header.Get("X-Client"))); err != nil {
			return
		}
		for {
			_, msg, err := c.Read(ctx)
			if err != nil {
				o.closed <- websocket.CloseStatus(err)
				return
			}
			if string(msg) == "bye" {
				_ = c.Close(4000, "bye")
				o.closed <- 4000
				return
			}
			if err := c.Write(ctx, websocket.MessageText, append([]byte("echo: "), msg...)); err != nil {
				return
			}
		}
	}))
	t.Cleanup(o.Close)
	return o
}

// dialWS opens a WebSocket to the sidecar's serving address.
func dialWS(t *testing.T, n *node) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.base, "http")+"/ws", &websocket.DialOptions{
		Host: testHost, HTTPHeader: http.Header{"X-Client": {"c1"}},
	})
	if err != nil {
		t.Fatalf("WebSocket through the sidecar: %v (response %v)", err, resp)
	}
	c.SetReadLimit(1 << 20)
	return c
}

func read(t *testing.T, c *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, msg, err := c.Read(ctx)
	if err != nil {
		t.Fatalf("reading a message: %v", err)
	}
	return string(msg)
}

func waitMetric(t *testing.T, n *node, name string, want float64) {
	t.Helper()
	var got float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = n.metric(t, name); got == want {
			return
		}
	}
	t.Fatalf("%s = %v, want %v", name, got, want)
}

func TestAWebSocketWorksThroughTheSidecarBothWays(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL)
	c := dialWS(t, n)
	defer c.CloseNow()

	if got := read(t, c); got != "hello c1" {
		t.Fatalf("the origin's first message arrived as %q (the handshake's headers reach the origin)", got)
	}
	ctx := context.Background()
	for _, m := range []string{"one", "two", strings.Repeat("x", 100<<10)} {
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		if got := read(t, c); got != "echo: "+m {
			t.Fatalf("echo of a %d-byte message: got %.40q", len(m), got)
		}
	}
	waitMetric(t, n, "tiercache_upgraded_connections", 1)
	waitMetric(t, n, `tiercache_upgrades_total{result="switched"}`, 1)

	// The client closes: the origin sees the close and its status.
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Fatalf("closing: %v", err)
	}
	select {
	case code := <-o.closed:
		if code != websocket.StatusNormalClosure {
			t.Fatalf("the origin saw close status %d, want %d", code, websocket.StatusNormalClosure)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client's close never reached the origin")
	}
	waitMetric(t, n, "tiercache_upgraded_connections", 0)

	// Plain requests on the same port are still cached.
	n.expect(t, "/plain", "MISS", "plain")
	n.expect(t, "/plain", "HIT; layer=l1", "plain")
}

func TestAnOriginsCloseReachesTheWebSocketClient(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL)
	c := dialWS(t, n)
	defer c.CloseNow()
	read(t, c)
	if err := c.Write(context.Background(), websocket.MessageText, []byte("bye")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, err := c.Read(ctx)
	if code := websocket.CloseStatus(err); code != 4000 {
		t.Fatalf("the client saw %v (status %d), want the origin's close status 4000", err, code)
	}
	waitMetric(t, n, "tiercache_upgraded_connections", 0)
}

func TestShutdownClosesOpenWebSocketsAfterTheDrain(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL)
	c := dialWS(t, n)
	defer c.CloseNow()
	read(t, c)

	stopped := make(chan struct{})
	go func() { n.shutdown(t); close(stopped) }()
	// The connection ends: the client's read fails instead of hanging,
	// and the origin's side is closed too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := c.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the WebSocket stayed open through the sidecar's shutdown: %v", err)
	}
	select {
	case <-o.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin's side of the WebSocket stayed open after the sidecar's shutdown")
	}
	select {
	case <-stopped:
	case <-time.After(15 * time.Second):
		t.Fatal("the sidecar did not stop")
	}
}

func TestAnUpgradeTheOriginDeclinesIsPassedThrough(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL)
	// /plain does not switch: the origin's 200 goes back as it is.
	resp := rawRequest(t, n, "GET /plain HTTP/1.1\r\nHost: "+testHost+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Cache") != "BYPASS" {
		t.Fatalf("got %d %q, want the origin's 200, BYPASS", resp.StatusCode, resp.Header.Get("X-Cache"))
	}
	waitMetric(t, n, `tiercache_upgrades_total{result="refused"}`, 1)
}

func TestAnH2CUpgradeIsServedAsHTTP11(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL)
	// curl --http2 over plain HTTP asks this way; h2c clients fall back to
	// HTTP/1.1 when the server ignores the upgrade (RFC 9110 §7.8).
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, n.base+"/plain", nil)
		req.Host = testHost
		req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
		req.Header.Set("Upgrade", "h2c")
		req.Header.Set("HTTP2-Settings", "AAMAAABkAAQAAP__")
		resp, err := n.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || b.String() != "plain" || resp.Header.Get("Upgrade") != "" {
			t.Fatalf("got %d %q (Upgrade %q), want the page over HTTP/1.1", resp.StatusCode, b.String(), resp.Header.Get("Upgrade"))
		}
	}
	if got := n.metric(t, `tiercache_upgrades_total{result="switched"}`); got != 0 {
		t.Fatalf("%v upgrades switched, want none", got)
	}
}

// With an http upstream the preface is relayed (passthrough_test.go); an
// https one cannot take it.
func TestAnHTTP2PrefaceGetsAnAnswerNotAHangWhenTheOriginIsHTTPS(t *testing.T) {
	n := startNode(t, "https://127.0.0.1:1")
	// A gRPC or h2c client with prior knowledge starts with the preface.
	resp := rawRequest(t, n, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	if resp.StatusCode != http.StatusHTTPVersionNotSupported || !strings.Contains(b.String(), "HTTP/2") {
		t.Fatalf("got %d %q, want 505 naming HTTP/2", resp.StatusCode, b.String())
	}
}

func TestAGRPCRequestGetsAClearError(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL)
	for ct, want := range map[string]int{
		"application/grpc":       http.StatusNotImplemented,
		"application/grpc+proto": http.StatusNotImplemented,
		"application/grpc-web":   http.StatusOK, // works over HTTP/1.1: proxied
	} {
		req, _ := http.NewRequest(http.MethodPost, n.base+"/svc.Echo/Say", strings.NewReader("\x00\x00\x00\x00\x00"))
		req.Host = testHost
		req.Header.Set("Content-Type", ct)
		resp, err := n.hc.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", ct, err)
		}
		var b strings.Builder
		_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
		resp.Body.Close()
		if resp.StatusCode != want || (want != http.StatusOK && !strings.Contains(b.String(), "gRPC")) {
			t.Errorf("%s: got %d %q, want %d", ct, resp.StatusCode, b.String(), want)
		}
	}
}

func TestAnIdleWebSocketIsClosedAndTheirNumberIsBounded(t *testing.T) {
	o := newWSOrigin(t)
	n := startNode(t, o.URL, "--upgrade-idle-timeout", "1s", "--max-upgraded-connections", "1")
	c := dialWS(t, n)
	defer c.CloseNow()
	read(t, c)
	waitMetric(t, n, "tiercache_upgraded_connections", 1)

	// A second one is refused while the first is open.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(n.base, "http")+"/ws", &websocket.DialOptions{Host: testHost})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a WebSocket over the limit: %v (response %v), want 503", err, resp)
	}

	// With nothing sent either way for 1s, the sidecar closes the first.
	start := time.Now()
	if _, _, err := c.Read(ctx); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an idle WebSocket stayed open: %v", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("the idle WebSocket was closed after %s, before the 1s idle timeout", took)
	}
	waitMetric(t, n, "tiercache_upgraded_connections", 0)
}

func TestAnOriginSwitchingToAProtocolNotOfferedGets502(t *testing.T) {
	origin := newRawOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: smtp\r\nConnection: Upgrade\r\n\r\n")
		_ = brw.Flush()
	})
	n := startNode(t, origin.URL)
	resp := rawRequest(t, n, "GET /ws HTTP/1.1\r\nHost: "+testHost+"\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d, want 502 for a switch to a protocol the client did not offer", resp.StatusCode)
	}
}

func TestAWebSocketOutlivesAConfigChangeThatRebuildsTheDataPlane(t *testing.T) {
	cp := startControlPlane(t)
	o := newWSOrigin(t)
	logs := &logBuffer{}
	n := startNodeLogging(t, logs, o.URL, append(liveArgs(cp.addr, t.TempDir(), smallL1), "--log-level", "debug")...)
	c := dialWS(t, n)
	defer c.CloseNow()
	read(t, c)

	// A new L1 size builds a new data-plane generation and retires the old
	// one, closing it once its requests have ended: the open WebSocket
	// must not hold it, nor be closed with it.
	v := cp.publish(t, "l1: {maxSize: 16Mi, shards: 16}\n")
	n.waitVersion(t, v)
	for deadline := time.Now().Add(10 * time.Second); len(logs.records("config change: previous data plane closed")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the previous data plane was never closed (an open WebSocket holds it)")
		}
	}
	if err := c.Write(context.Background(), websocket.MessageText, []byte("still here")); err != nil {
		t.Fatalf("writing after the config change: %v", err)
	}
	if got := read(t, c); got != "echo: still here" {
		t.Fatalf("after the config change the WebSocket answered %q", got)
	}
	waitMetric(t, n, "tiercache_upgraded_connections", 1)
}

// rawRequest writes raw to the sidecar's serving port on a new connection
// and reads one response, body included (closed when the test ends).
func rawRequest(t *testing.T, n *node, raw string) *http.Response {
	t.Helper()
	conn, err := net.DialTimeout("tcp", n.addrs.Serve, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte(raw)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no HTTP answer to %.30q: %v", raw, err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// An upgrade request the origin does not switch (a long poll that ignores
// Upgrade) is streamed like a pass-through: flushed to the client, and its
// origin request ends when the client leaves, as without the Upgrade.
func TestARefusedUpgradeIsStreamedAndEndsWhenItsClientLeaves(t *testing.T) {
	for name, upgrade := range map[string]bool{"plain GET (control)": false, "upgrade the origin ignores": true} {
		t.Run(name, func(t *testing.T) {
			gone, arrived := make(chan struct{}, 1), make(chan struct{}, 1)
			origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "no-store")
				w.WriteHeader(200)
				_, _ = w.Write([]byte("waiting\n"))
				w.(http.Flusher).Flush()
				arrived <- struct{}{}
				select {
				case <-r.Context().Done():
					gone <- struct{}{}
				case <-time.After(20 * time.Second):
				}
			}))
			defer origin.Close()
			cfg := filepath.Join(t.TempDir(), "tier.yaml")
			if err := os.WriteFile(cfg, []byte("origin: {idleTimeout: 1s}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			n := startNode(t, origin.URL, "--config", cfg)
			conn, err := net.Dial("tcp", n.addrs.Serve)
			if err != nil {
				t.Fatal(err)
			}
			req := "GET /poll HTTP/1.1\r\nHost: " + testHost + "\r\n"
			if upgrade {
				req += "Upgrade: websocket\r\nConnection: Upgrade\r\n"
			}
			if _, err := conn.Write([]byte(req + "\r\n")); err != nil {
				t.Fatal(err)
			}
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
				t.Fatal("the request did not reach the origin")
			}
			// The status line and first bytes are flushed to the client
			// (a refused upgrade's answer is not: io.Copy, no flush).
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
				t.Errorf("no status line within 2s of the origin's flush: %v", err)
			}
			conn.Close() // the client leaves
			select {
			case <-gone:
			case <-time.After(6 * time.Second):
				t.Fatal("6s after the client left, the origin request is still open (idleTimeout 1s)")
			}
		})
	}
}
