package testredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	if _, err := Binary(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func mustDo(t *testing.T, addr, password string, args ...string) any {
	t.Helper()
	v, err := do(context.Background(), addr, password, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", addr, args, err)
	}
	return v
}

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	addr := s.Addr()
	mustDo(t, addr, "", "SET", "k", "v")
	if v := mustDo(t, addr, "", "GET", "k"); v != "v" {
		t.Fatalf("GET k = %v, want v", v)
	}

	s.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := do(ctx, addr, "", "PING")
	cancel()
	if err == nil {
		t.Fatal("PING to a paused server answered")
	}
	s.Resume()
	mustDo(t, addr, "", "PING")

	s.Restart()
	if s.Addr() != addr {
		t.Fatalf("address changed across Restart: %s → %s", addr, s.Addr())
	}
	if v := mustDo(t, addr, "", "GET", "k"); v != nil {
		t.Fatalf("GET k after restart = %v, want nil (no persistence)", v)
	}

	s.Stop()
	if _, err := do(context.Background(), addr, "", "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Restart()
	mustDo(t, addr, "", "PING")
	s.Kill()
	if _, err := do(context.Background(), addr, "", "PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
}

func TestStopPausedServer(t *testing.T) {
	s := Start(t)
	s.Pause()
	start := time.Now()
	s.Stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Stop of a paused server took %s", d)
	}
}

func TestPassword(t *testing.T) {
	s := Start(t, WithPassword("sekret"))
	_, err := do(context.Background(), s.Addr(), "", "GET", "k")
	var re respError
	if !errors.As(err, &re) || !strings.HasPrefix(string(re), "NOAUTH") {
		t.Fatalf("GET without AUTH: err = %v, want NOAUTH", err)
	}
	mustDo(t, s.Addr(), "sekret", "GET", "k")
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs = %v", c.Addrs())
	}
	for _, a := range c.Addrs() {
		v := mustDo(t, a, "", "CLUSTER", "INFO").(string)
		if !strings.Contains(v, "cluster_state:ok") {
			t.Fatalf("%s: %s", a, v)
		}
	}
	// Keys land on the node that owns their slot: some node takes "a"
	// and the others redirect.
	var ok, moved int
	for _, a := range c.Addrs() {
		_, err := do(context.Background(), a, "", "SET", "a", "1")
		switch {
		case err == nil:
			ok++
		case strings.HasPrefix(err.Error(), "MOVED"):
			moved++
		default:
			t.Fatalf("%s: SET a: %v", a, err)
		}
	}
	if ok != 1 || moved != 2 {
		t.Fatalf("SET a: %d nodes took it and %d redirected, want 1 and 2", ok, moved)
	}
}

func TestSentinel(t *testing.T) {
	m := Start(t, WithPassword("pw"))
	s := StartSentinel(t, m, "mymaster")
	v := mustDo(t, s.Addr(), "", "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster").([]any)
	if got := fmt.Sprint(v[0]) + ":" + fmt.Sprint(v[1]); got != m.Addr() {
		t.Fatalf("sentinel reports %s, want %s", got, m.Addr())
	}
}
