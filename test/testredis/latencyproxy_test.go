package testredis

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// echoTrip writes a line on c and reads the echo, within limit.
func echoTrip(c net.Conn, r *bufio.Reader, line string, limit time.Duration) (time.Duration, error) {
	_ = c.SetDeadline(time.Now().Add(limit))
	start := time.Now()
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return 0, err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return time.Since(start), err
	}
	if got != line+"\n" {
		return 0, errors.New("echo mismatch: " + got)
	}
	return time.Since(start), nil
}

func dialProxy(t *testing.T, p *LatencyProxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestLatencyProxyForwardsBothWays(t *testing.T) {
	p := StartLatencyProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	for _, line := range []string{"PING", "hello", "a longer line with spaces"} {
		if d, err := echoTrip(c, r, line, 2*time.Second); err != nil || d > time.Second {
			t.Fatalf("%q: %v after %s", line, err, d)
		}
	}
	if n := p.Conns(); n != 1 {
		t.Fatalf("Conns = %d, want 1", n)
	}
}

func TestLatencyProxyDelaysEachDirectionByAFixedAmount(t *testing.T) {
	p := StartLatencyProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	cases := []struct {
		name               string
		toServer, toClient time.Duration
		least              time.Duration
	}{
		{"a delay towards the server alone slows a round trip by it", 100 * time.Millisecond, 0, 100 * time.Millisecond},
		{"a delay towards the client alone slows a round trip by it", 0, 100 * time.Millisecond, 100 * time.Millisecond},
		{"delays in both directions add up", 100 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond},
		{"no delay is fast again", 0, 0, 0},
	}
	for _, tc := range cases {
		p.SetDelay(tc.toServer, tc.toClient)
		d, err := echoTrip(c, r, tc.name, 3*time.Second)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if d < tc.least || d > tc.least+time.Second {
			t.Errorf("%s: round trip took %s, want %s to %s", tc.name, d, tc.least, tc.least+time.Second)
		}
	}
}

func TestLatencyProxyDelayIsNotCumulative(t *testing.T) {
	p := StartLatencyProxy(t, echoServer(t))
	c, r := dialProxy(t, p)
	p.SetDelay(0, 150*time.Millisecond)
	// Ten lines sent at once arrive together, 150 ms later, not 1.5 s.
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	start := time.Now()
	for range 10 {
		if _, err := io.WriteString(c, "x\n"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
	}
	if d := time.Since(start); d < 150*time.Millisecond || d > time.Second {
		t.Fatalf("ten pipelined lines took %s, want about 150ms", d)
	}
}

func TestLatencyProxyBlackholeAcceptsButNeverAnswers(t *testing.T) {
	p := StartLatencyProxy(t, echoServer(t))
	old, oldR := dialProxy(t, p)
	if _, err := echoTrip(old, oldR, "before", time.Second); err != nil {
		t.Fatal(err)
	}
	p.SetBlackhole(true)

	// A new connection is accepted, takes what is written, answers nothing.
	c, r := dialProxy(t, p)
	if _, err := echoTrip(c, r, "into the void", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection while blackholed: err = %v, want a timeout", err)
	}
	// An existing connection goes silent too.
	if _, err := echoTrip(old, oldR, "lost", 200*time.Millisecond); !isTimeout(err) {
		t.Fatalf("existing connection while blackholed: err = %v, want a timeout", err)
	}

	p.SetBlackhole(false)
	fresh, freshR := dialProxy(t, p)
	if _, err := echoTrip(fresh, freshR, "after", time.Second); err != nil {
		t.Fatalf("new connection after the blackhole: %v", err)
	}
}

func TestLatencyProxyCutAllClosesEveryConnection(t *testing.T) {
	p := StartLatencyProxy(t, echoServer(t))
	a, ar := dialProxy(t, p)
	b, br := dialProxy(t, p)
	for _, x := range []struct {
		c net.Conn
		r *bufio.Reader
	}{{a, ar}, {b, br}} {
		if _, err := echoTrip(x.c, x.r, "up", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if n := p.CutAll(); n != 2 {
		t.Fatalf("CutAll = %d, want 2", n)
	}
	_ = a.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := ar.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read on a cut connection: err = %v, want it closed", err)
	}
	c, r := dialProxy(t, p)
	if _, err := echoTrip(c, r, "new", time.Second); err != nil {
		t.Fatalf("a connection after CutAll: %v", err)
	}
}

func TestLatencyProxyClosesTheClientWhenTheTargetIsDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := StartLatencyProxy(t, dead)
	c, r := dialProxy(t, p)
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("read through a proxy to nothing: err = %v, want the connection closed", err)
	}
}

func TestLatencyProxyCloseIsBoundedAndLeavesNothingRunning(t *testing.T) {
	target := echoServer(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	p, err := NewLatencyProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Bytes waiting out a long delay must not hold Close up.
	p.SetDelay(10*time.Second, 10*time.Second)
	if _, err := io.WriteString(c, "slow\n"); err != nil {
		t.Fatal(err)
	}
	p.SetBlackhole(true)
	held, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %s", d)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c2, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c2.Close()
		t.Fatal("the proxy still accepts after Close")
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 8)); err == nil || isTimeout(err) {
		t.Fatalf("client connection after Close: err = %v, want it closed", err)
	}
}

func TestLatencyProxyInFrontOfRedis(t *testing.T) {
	s := Start(t)
	p := StartLatencyProxy(t, s.Addr())
	if v, err := do(t.Context(), p.Addr(), "", "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING through the proxy: %v, %v", v, err)
	}
	p.SetDelay(0, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := do(ctx, p.Addr(), "", "PING"); err == nil {
		t.Fatal("PING through a 200ms delay answered within 50ms")
	}
}
