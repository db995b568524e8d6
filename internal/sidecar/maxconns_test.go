package sidecar

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/connguard"
)

func TestMaxConnectionsDefaultsToTenThousand(t *testing.T) {
	o, err := ParseArgs([]string{"--upstream", "http://x:1"}, noEnv, io.Discard)
	if err != nil || o.MaxConns != connguard.DefaultMaxConns || connguard.DefaultMaxConns != 10000 {
		t.Fatalf("default --max-connections = %d (%v), want 10000", o.MaxConns, err)
	}
}

// Through the whole sidecar (--max-connections wired to the serving
// listener, net/http's connection states to the bound, the metrics): with
// both slots taken by idle keep-alive connections, a third client is
// served and the idle one that waited longest is closed for it.
func TestAtMaxConnectionsTheSidecarClosesAnIdleConnectionForANewClient(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = io.WriteString(w, "hello")
	}))
	defer origin.Close()
	s := start(t, origin.URL, "--max-connections", "2")
	defer s.stop(t)

	get := func(name string) (net.Conn, *bufio.Reader) {
		t.Helper()
		c, err := net.Dial("tcp", s.addrs.Serve)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		fmt.Fprintf(c, "GET /%s HTTP/1.1\r\nHost: app\r\n\r\n", name)
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("client %s: %v", name, err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK || string(b) != "hello" {
			t.Fatalf("client %s: %d %q", name, res.StatusCode, b)
		}
		return c, br
	}
	_, a := get("a")
	get("b")
	get("c") // served: an idle connection made room (else it waits 120 s, the idle timeout)
	if _, err := a.ReadByte(); err == nil {
		t.Fatal("the longest idle connection is still open")
	}
	body := metricsText(t, s)
	if v := metricValue(body, "tiercache_client_connections_reclaimed_total"); v != 1 {
		t.Errorf("tiercache_client_connections_reclaimed_total = %v, want 1", v)
	}
	if v := metricValue(body, "tiercache_client_connections"); v != 2 {
		t.Errorf("tiercache_client_connections = %v, want 2", v)
	}
}

// Connections opened and left silent (never a byte) do not keep a new
// client out of the sidecar until the header timeout (10 s): at the
// bound, the oldest that has been silent for a second makes room.
func TestAtMaxConnectionsSilentConnectionsDoNotKeepANewClientOut(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer origin.Close()
	s := start(t, origin.URL, "--max-connections", "2")
	defer s.stop(t)

	var silent []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", s.addrs.Serve)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(metricsText(t, s), "tiercache_client_connections") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the silent connections did not take both slots")
		}
		time.Sleep(10 * time.Millisecond)
	}

	c, err := net.Dial("tcp", s.addrs.Serve)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(4 * time.Second))
	fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: app\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("a new client behind two silent connections: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || string(b) != "hello" {
		t.Fatalf("a new client behind two silent connections: %d %q", res.StatusCode, b)
	}
	_ = silent[0].SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := silent[0].Read(make([]byte, 1)); err == nil {
		t.Error("the oldest silent connection is still open")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Error("the oldest silent connection is still open")
	}
	if v := metricValue(metricsText(t, s), "tiercache_client_connections_reclaimed_total"); v != 1 {
		t.Errorf("tiercache_client_connections_reclaimed_total = %v, want 1", v)
	}
}
