package sidecar

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	metricRelayed = `tiercache_passthrough_connections_total{protocol="h2c",result="relayed"}`
	metricRefused = `tiercache_passthrough_connections_total{protocol="h2c",result="refused"}`
	metricPassErr = `tiercache_passthrough_connections_total{protocol="h2c",result="error"}`
)

// grpcOrigin is a real gRPC server on loopback serving the standard health
// service, the way an app serves gRPC on its own port.
func grpcOrigin(t *testing.T) (addr string, hs *health.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	hs = health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	hs.SetServingStatus("shop", healthpb.HealthCheckResponse_SERVING)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String(), hs
}

func grpcClient(t *testing.T, addr string) healthpb.HealthClient {
	t.Helper()
	return healthpb.NewHealthClient(grpcConn(t, addr))
}

func grpcConn(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// h2cClient speaks HTTP/2 with prior knowledge over plain TCP: net/http's
// Transport with unencrypted HTTP/2 as its only protocol (x/net/http2's
// Transport with AllowHTTP is deprecated for it).
func h2cClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestGRPCCallsPassThroughTheServingPortUncached(t *testing.T) {
	addr, hs := grpcOrigin(t)
	n := startNode(t, "http://"+addr)
	cc := grpcConn(t, n.addrs.Serve)
	c := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for range 2 {
		resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "shop"})
		if err != nil {
			t.Fatalf("unary gRPC call through the sidecar: %v", err)
		}
		if resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check: %v", resp.Status)
		}
	}
	// Not cached: the second answer follows the origin's change.
	hs.SetServingStatus("shop", healthpb.HealthCheckResponse_NOT_SERVING)
	if resp, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "shop"}); err != nil || resp.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Check after the origin changed: %v %v", resp, err)
	}

	// A server-streaming call: each change on the origin arrives.
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []healthpb.HealthCheckResponse_ServingStatus{
		healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		if i == 1 {
			hs.SetServingStatus("shop", healthpb.HealthCheckResponse_SERVING)
		}
		if i == 2 {
			hs.SetServingStatus("shop", healthpb.HealthCheckResponse_NOT_SERVING)
		}
		got, err := w.Recv()
		if err != nil {
			t.Fatalf("Watch message %d: %v", i, err)
		}
		if got.Status != want {
			t.Fatalf("Watch message %d: %v, want %v", i, got.Status, want)
		}
	}
	if got := n.metric(t, metricRelayed); got != 1 {
		t.Errorf("%s = %v, want 1 (one client connection carries every call)", metricRelayed, got)
	}
	if got := n.metric(t, "tiercache_upgraded_connections"); got != 1 {
		t.Errorf("tiercache_upgraded_connections = %v while the gRPC connection is open, want 1", got)
	}
	if got := n.metric(t, "tiercache_l1_entries"); got != 0 {
		t.Errorf("tiercache_l1_entries = %v: something of the gRPC traffic was cached", got)
	}
	// The client leaving ends the relay and gives its slot back.
	cancel()
	cc.Close()
	waitMetric(t, n, "tiercache_upgraded_connections", 0)
}

func TestABrokenH2CPrefaceIsClosed(t *testing.T) {
	addr, _ := grpcOrigin(t)
	n := startNode(t, "http://"+addr)
	c, err := net.Dial("tcp", n.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nXY\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(c); err != nil || len(b) != 0 {
		t.Fatalf("after a broken preface: read %q, %v; want the connection closed without a byte", b, err)
	}
	if got := n.metric(t, metricPassErr); got != 1 {
		t.Errorf("%s = %v, want 1", metricPassErr, got)
	}
	if got := n.metric(t, metricRelayed); got != 0 {
		t.Errorf("%s = %v, want 0", metricRelayed, got)
	}
}

// mixedOrigin serves HTTP/1.1 and HTTP/2 with prior knowledge on one port,
// as an app whose port carries both does. It answers "<proto> <n>", n
// counting the requests it served, cacheable for a minute, and records
// the Upgrade field it was sent.
type mixedOrigin struct {
	addr     string
	served   atomic.Int64
	upgrades atomic.Value // string: the last request's Upgrade field
}

func newMixedOrigin(t *testing.T) *mixedOrigin {
	t.Helper()
	o := &mixedOrigin{}
	o.upgrades.Store("")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.upgrades.Store(r.Header.Get("Upgrade") + r.Header.Get("HTTP2-Settings"))
		w.Header().Set("Cache-Control", "max-age=60")
		fmt.Fprintf(w, "%s %d", r.Proto, o.served.Add(1))
	})}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	o.addr = ln.Addr().String()
	return o
}

func TestH2CPassesThroughWhileHTTP1OnTheSamePortIsCached(t *testing.T) {
	o := newMixedOrigin(t)
	n := startNode(t, "http://"+o.addr)
	h2 := h2cClient(t)
	get2 := func() (string, http.Header) {
		t.Helper()
		resp, err := h2.Get(n.base + "/x")
		if err != nil {
			t.Fatalf("h2c GET through the sidecar: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
			t.Fatalf("h2c GET: %s %d", resp.Proto, resp.StatusCode)
		}
		return string(b), resp.Header
	}

	if body, h := get2(); body != "HTTP/2.0 1" || h.Get("X-Cache") != "" {
		t.Fatalf("h2c GET: %q, X-Cache %q; want the origin's own HTTP/2 answer", body, h.Get("X-Cache"))
	}
	// HTTP/1.1 on the same port, while the h2c connection is open.
	n.expect(t, "/x", "MISS", "HTTP/1.1 2")
	n.expect(t, "/x", "HIT; layer=l1", "HTTP/1.1 2")
	// The h2c client is never served from the cache.
	if body, _ := get2(); body != "HTTP/2.0 3" {
		t.Fatalf("second h2c GET: %q, want the origin's third answer", body)
	}
	if got := n.metric(t, metricRelayed); got != 1 {
		t.Errorf("%s = %v, want 1", metricRelayed, got)
	}
}

func TestAnUpgradeToH2CIsAnsweredOverHTTP1AndNotForwarded(t *testing.T) {
	o := newMixedOrigin(t)
	n := startNode(t, "http://"+o.addr)
	for i, want := range []string{"MISS", "HIT"} {
		req, err := http.NewRequest("GET", n.base+"/u", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Connection", "Upgrade, HTTP2-Settings")
		req.Header.Set("Upgrade", "h2c")
		req.Header.Set("HTTP2-Settings", "AAMAAABkAAQCAAAAAAIAAAAA")
		resp, err := n.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.ProtoMajor != 1 || !strings.HasPrefix(resp.Header.Get("X-Cache"), want) {
			t.Fatalf("request %d: %d %s X-Cache %q %q", i, resp.StatusCode, resp.Proto, resp.Header.Get("X-Cache"), b)
		}
	}
	if up := o.upgrades.Load().(string); up != "" {
		t.Fatalf("the origin was sent Upgrade/HTTP2-Settings %q", up)
	}
}

func TestH2CBeyondTheUpgradedBoundGetsGoAway(t *testing.T) {
	addr, _ := grpcOrigin(t)
	n := startNode(t, "http://"+addr, "--max-upgraded-connections", "1")
	c := grpcClient(t, n.addrs.Serve)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "shop"}); err != nil {
		t.Fatal(err)
	}
	if ga := readGoAway(t, n.addrs.Serve); ga.ErrCode != http2.ErrCodeRefusedStream || !strings.Contains(string(ga.DebugData()), "too many") {
		t.Fatalf("a second h2c connection past --max-upgraded-connections=1: GOAWAY %v %q, want REFUSED_STREAM saying too many", ga.ErrCode, ga.DebugData())
	}
	if got := n.metric(t, metricRefused); got != 1 {
		t.Errorf("%s = %v, want 1", metricRefused, got)
	}
	// The held one still works.
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: "shop"}); err != nil {
		t.Fatal(err)
	}
}

func TestH2CToAnOriginThatIsDownGetsGoAway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	n := startNode(t, "http://"+addr)
	if ga := readGoAway(t, n.addrs.Serve); ga.ErrCode != http2.ErrCodeInternal || !strings.Contains(string(ga.DebugData()), "origin unavailable") {
		t.Fatalf("h2c to an origin that is down: GOAWAY %v %q, want INTERNAL_ERROR saying origin unavailable", ga.ErrCode, ga.DebugData())
	}
	// A real client fails at once too (with the GOAWAY, or, when it reads
	// the GOAWAY before it sent its request, "could not be established").
	start := time.Now()
	if _, err := h2cClient(t).Get(n.base + "/"); err == nil {
		t.Fatal("h2c GET to an origin that is down succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("h2c GET to an origin that is down failed after %v, want at once", d)
	}
	if got := n.metric(t, metricPassErr); got < 2 {
		t.Errorf("%s = %v, want 2 (or more: the client may retry)", metricPassErr, got)
	}
}

// readGoAway opens an h2c connection to addr and returns the GOAWAY the
// server answers with, after its SETTINGS.
func readGoAway(t *testing.T, addr string) *http2.GoAwayFrame {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	f := http2.NewFramer(c, c)
	if err := f.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		fr, err := f.ReadFrame()
		if err != nil {
			t.Fatalf("reading the server's frames: %v", err)
		}
		if ga, ok := fr.(*http2.GoAwayFrame); ok {
			return ga
		}
	}
	t.Fatal("no GOAWAY in the server's first frames")
	return nil
}

func TestAnIdleH2CConnectionIsClosed(t *testing.T) {
	addr, _ := grpcOrigin(t)
	n := startNode(t, "http://"+addr, "--upgrade-idle-timeout", "1s")
	c, err := net.Dial("tcp", n.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	f := http2.NewFramer(c, c)
	if err := f.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	// The origin's SETTINGS arrive through the relay; then nothing moves
	// and the sidecar closes the connection after the idle timeout.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr, err := f.ReadFrame()
	if err != nil {
		t.Fatalf("the origin's first frame: %v", err)
	}
	if _, ok := fr.(*http2.SettingsFrame); !ok {
		t.Fatalf("the origin's first frame is %v, want SETTINGS", fr.Header())
	}
	start := time.Now()
	for {
		if _, err := f.ReadFrame(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the idle h2c connection was not closed within 10s")
			}
			break
		}
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("closed after %v, want about 1s", d)
	}
}

func TestShutdownClosesH2CConnections(t *testing.T) {
	addr, _ := grpcOrigin(t)
	n := startNode(t, "http://"+addr)
	c := grpcClient(t, n.addrs.Serve)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := c.Watch(ctx, &healthpb.HealthCheckRequest{Service: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n.shutdown(t) // fails the test unless Run returns nil within 15s
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("shutdown with an open gRPC stream took %v: the stream held it", d)
	}
	if _, err := w.Recv(); err == nil {
		t.Fatal("the gRPC stream outlived the sidecar")
	}
}

// A client that sends the preface's first line after an HTTP/1.1 request
// is not relayed: only a connection that opens with the preface is.
func TestAPrefaceAfterARequestIsNotRelayed(t *testing.T) {
	o := newMixedOrigin(t)
	n := startNode(t, "http://"+o.addr)
	c, err := net.Dial("tcp", n.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"+http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	for i, want := range []int{200, 505} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("response %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	if got := n.metric(t, metricRelayed); got != 0 {
		t.Errorf("%s = %v, want 0", metricRelayed, got)
	}
}
