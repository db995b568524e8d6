package testredis

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Sentinel is a redis-server --sentinel process monitoring one master.
type Sentinel struct {
	p *proc
}

// StartSentinel starts a Sentinel that monitors master under name (quorum
// 1, using master's password if it has one) and waits until it reports the
// master's address. Sentinel rewrites its config file, so each one gets
// its own under t.TempDir().
func StartSentinel(t testing.TB, master *Server, name string) *Sentinel {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	masterHost, masterPort := splitAddr(master.Addr())
	args := func(port int) ([]string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\ndaemonize no\n", port)
		fmt.Fprintf(&b, "dir %q\nlogfile %q\n", dir, filepath.Join(dir, "redis.log"))
		fmt.Fprintf(&b, "sentinel monitor %s %s %s 1\n", name, masterHost, masterPort)
		fmt.Fprintf(&b, "sentinel down-after-milliseconds %s 5000\n", name)
		fmt.Fprintf(&b, "sentinel failover-timeout %s 60000\n", name)
		if master.p.password != "" {
			fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", name, master.p.password)
		}
		if err := os.WriteFile(conf, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
		return []string{conf, "--sentinel"}, nil
	}
	s := &Sentinel{p: newProc(t, dir, "", args)}
	if err := s.p.start(); err != nil {
		t.Fatalf("testredis: sentinel: %v", err)
	}
	if err := s.waitMaster(name, master.Addr()); err != nil {
		t.Fatalf("testredis: sentinel: %v", err)
	}
	return s
}

func (s *Sentinel) waitMaster(name, want string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last any
	var lastErr error
	for {
		last, lastErr = do(ctx, s.Addr(), "", "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)
		if a, ok := last.([]any); ok && len(a) == 2 && fmt.Sprint(a[0])+":"+fmt.Sprint(a[1]) == want {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("sentinel on %s does not report master %s at %s (last reply %v, %v)\n%s",
				s.Addr(), name, want, last, lastErr, s.p.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Addr is the sentinel's host:port (127.0.0.1).
func (s *Sentinel) Addr() string { return s.p.addr() }
