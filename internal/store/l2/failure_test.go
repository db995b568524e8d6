package l2

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tiercache/tiercache/internal/backoff"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// A hung server (SIGSTOP: the kernel still accepts connections, nothing
// answers) costs each call about Timeout, and the error says "unavailable".
func TestPausedServerTimesOut(t *testing.T) {
	s := testredis.Start(t)
	cfg := Config{Addrs: []string{s.Addr()}, Prefix: "tc:t/a:", Timeout: 50 * time.Millisecond}
	warm := newTestClient(t, cfg)
	// Pooled connections exist before the pause.
	waitFor(t, 10*time.Second, "a first successful Set", func() bool {
		return warm.Set(context.Background(), "k", testEntry("/k"), time.Minute) == nil
	})
	s.Pause()
	defer s.Resume()
	cold := newTestClient(t, cfg) // has to dial a hung server

	ops := map[string]func(c *Client) error{
		"get": func(c *Client) error { _, err := c.Get(context.Background(), "k"); return err },
		"set": func(c *Client) error { return c.Set(context.Background(), "k", testEntry("/k"), time.Minute) },
		"acquire lease": func(c *Client) error {
			_, _, err := c.AcquireLease(context.Background(), "k", time.Second)
			return err
		},
		"publish":    func(c *Client) error { return c.Publish(context.Background(), []byte("x")) },
		"record hit": func(c *Client) error { return c.RecordHit(context.Background(), "k") },
		"ping":       func(c *Client) error { return c.Ping(context.Background()) },
	}
	for name, op := range ops {
		for cname, c := range map[string]*Client{"pooled": warm, "new": cold} {
			start := time.Now()
			err := op(c)
			d := time.Since(start)
			if err == nil || !IsUnavailable(err) {
				t.Errorf("%s (%s connection): err = %v, want one IsUnavailable accepts", name, cname, err)
			}
			if d > 500*time.Millisecond {
				t.Errorf("%s (%s connection) took %s with Timeout 50ms", name, cname, d)
			}
		}
	}

	// Bulk calls are bounded by the caller's context.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := warm.PurgeMatching(ctx, func(string, *entry.Entry) bool { return true })
	if d := time.Since(start); err == nil || d > time.Second {
		t.Errorf("PurgeMatching on a hung server: %v after %s, want an error within about 200ms", err, d)
	}
}

func TestDownServerFailsFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := newTestClient(t, Config{Addrs: []string{addr}, Prefix: "tc:t/a:"})
	start := time.Now()
	_, err = c.Get(context.Background(), "k")
	if err == nil || !IsUnavailable(err) {
		t.Fatalf("Get from a closed port: err = %v, want one IsUnavailable accepts", err)
	}
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Get from a closed port took %s", d)
	}
}

func TestSubscribeSurvivesRestart(t *testing.T) {
	s := testredis.Start(t)
	c := newTestClient(t, Config{Addrs: []string{s.Addr()}, Prefix: "tc:t/a:", Timeout: testTimeout})
	c.backoff = backoff.Exponential{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.5}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subscribed := make(chan struct{}, 10)
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(ctx, func(b []byte) { got <- string(b) }, func(time.Time) { subscribed <- struct{}{} })
	}()
	waitSubscribed := func(what string) {
		t.Helper()
		select {
		case <-subscribed:
		case <-time.After(10 * time.Second):
			t.Fatalf("no onSubscribed %s", what)
		}
	}
	roundTrip := func(msg string) {
		t.Helper()
		if err := c.Publish(context.Background(), []byte(msg)); err != nil {
			t.Fatalf("Publish: %v", err)
		}
		timeout := time.After(2 * time.Second)
		for {
			select {
			case m := <-got:
				switch m {
				case msg:
					return
				case "again": // a late copy of a probe below
				default:
					t.Fatalf("got %q, want %q", m, msg)
				}
			case <-timeout:
				t.Fatalf("%q not delivered", msg)
			}
		}
	}

	waitSubscribed("at first")
	roundTrip("before")
	mustSet(t, c, "k", testEntry("/k", "tag"), time.Minute)
	s.Restart()
	waitSubscribed("after a restart")
	roundTrip("after restart")

	// Pooled connections died with the server: the next calls reconnect.
	// The server forgot our Lua scripts too: EVALSHA falls back to EVAL.
	if _, err := c.Get(ctx, "k"); err != ErrNotFound {
		t.Fatalf("Get after a restart (no persistence): %v, want ErrNotFound", err)
	}
	mustSet(t, c, "k", testEntry("/k", "tag"), time.Minute)
	if n, err := c.PurgeTags(ctx, []string{"tag"}); n != 1 || err != nil {
		t.Fatalf("PurgeTags after a restart = %d, %v; want 1", n, err)
	}
	s.Restart()
	tok, ok, err := c.AcquireLease(ctx, "k", time.Minute)
	if err != nil || !ok {
		t.Fatalf("AcquireLease after a restart: %v, %v", ok, err)
	}
	s.Restart()
	if _, ok, _ := c.AcquireLease(ctx, "k", time.Minute); !ok {
		t.Fatal("lease survived a restart without persistence")
	}
	if err := c.ReleaseLease(ctx, "k", tok); err != nil {
		t.Fatalf("ReleaseLease after a restart: %v", err)
	}
	// Messages flow again once resubscribed (those sent before are lost,
	// which is what onSubscribed is for).
	waitSubscribed("after the later restarts")
	waitFor(t, 10*time.Second, "a message after the later restarts", func() bool {
		if err := c.Publish(ctx, []byte("again")); err != nil {
			return false
		}
		select {
		case <-got:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	for len(subscribed) > 0 {
		<-subscribed
	}
	// A longer outage: several failed attempts, then back.
	s.Stop()
	time.Sleep(300 * time.Millisecond)
	s.Restart()
	waitSubscribed("after an outage")
	roundTrip("after outage")

	cancel()
	select {
	case err := <-done:
		if err != context.Canceled {
			t.Fatalf("Subscribe returned %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Subscribe did not return after its context ended")
	}
}

// Subscribe returns when the client is closed, and nothing is left running.
func TestCloseEndsSubscribe(t *testing.T) {
	s := testredis.Start(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c, err := New(Config{Addrs: []string{s.Addr()}, Prefix: "tc:t/a:", Timeout: testTimeout})
	if err != nil {
		t.Fatal(err)
	}
	c.backoff = backoff.Exponential{Initial: 10 * time.Millisecond, Max: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.5}
	subscribed := make(chan struct{}, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.Subscribe(context.Background(), func([]byte) {}, func(time.Time) { subscribed <- struct{}{} })
	}()
	<-subscribed
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Subscribe returned nil after Close")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not return after Close")
	}
}

func TestPassword(t *testing.T) {
	s := testredis.Start(t, testredis.WithPassword("s3cret"))
	cfg := Config{Addrs: []string{s.Addr()}, Prefix: "tc:t/a:", Timeout: testTimeout, Password: "s3cret"}
	c := newTestClient(t, cfg)
	ctx := ctxT(t)
	mustSet(t, c, "k", testEntry("/k"), time.Minute)
	if _, err := c.Get(ctx, "k"); err != nil {
		t.Fatalf("Get with the right password: %v", err)
	}

	for _, tc := range []struct{ password, want string }{
		{"wrong", "WRONGPASS"},
		{"", "NOAUTH"},
	} {
		cfg.Password = tc.password
		bad := newTestClient(t, cfg)
		_, err := bad.Get(ctx, "k")
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "l2: get: ") {
			t.Errorf("password %q: err = %v, want an l2 error naming %s", tc.password, err, tc.want)
		}
		if !IsUnavailable(err) {
			t.Errorf("password %q: IsUnavailable(%v) = false", tc.password, err)
		}
	}
}

func TestSentinel(t *testing.T) {
	m := testredis.Start(t)
	s := testredis.StartSentinel(t, m, "mymaster")
	c := newTestClient(t, Config{Addrs: []string{s.Addr()}, Mode: ModeSentinel, MasterName: "mymaster", Prefix: "tc:t/a:", Timeout: testTimeout})
	ctx := ctxT(t)
	if err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	want := testEntry("/k", "t")
	mustSet(t, c, "k", want, time.Minute)
	got, err := c.Get(ctx, "k")
	if err != nil || !sameEntry(&got, want) {
		t.Fatalf("Get through sentinel: %v", err)
	}
	if n, err := c.PurgeTags(ctx, []string{"t"}); n != 1 || err != nil {
		t.Fatalf("PurgeTags through sentinel = %d, %v", n, err)
	}
}

// A replica refuses writes with READONLY: L2 is unavailable (a failover
// left us on a demoted master), not a bad value.
func TestReadOnlyReplicaIsUnavailable(t *testing.T) {
	m := testredis.Start(t)
	host, port, _ := net.SplitHostPort(m.Addr())
	r := testredis.Start(t, testredis.WithArgs("--replicaof", host, port))
	c := newTestClient(t, Config{Addrs: []string{r.Addr()}, Prefix: "tc:t/a:", Timeout: testTimeout})
	err := c.Set(ctxT(t), "k", testEntry("/k"), time.Minute)
	if err == nil || !strings.Contains(err.Error(), "READONLY") || !IsUnavailable(err) {
		t.Fatalf("Set on a replica: err = %v, want READONLY and IsUnavailable", err)
	}
}
