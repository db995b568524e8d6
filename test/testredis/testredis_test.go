package testredis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// Binary only looks for redis-server: $TIERCACHE_REDIS_SERVER (the path
// hack/ensure-redis.sh printed), else on PATH, else where Debian's package
// puts it. It never runs a script or a package manager; without a binary
// it fails naming the command that installs one.
func TestBinaryOnlyFindsRedisServer(t *testing.T) {
	// A PATH of one directory whose "bash", "sudo" and "apt-get" record
	// that they ran: nothing may run them.
	pathDir := t.TempDir()
	ran := filepath.Join(t.TempDir(), "ran")
	for _, name := range []string{"bash", "sh", "sudo", "apt-get"} {
		script := "#!/bin/sh\necho " + name + " >>" + ran + "\nexit 1\n"
		if err := os.WriteFile(filepath.Join(pathDir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	installedDir := t.TempDir()
	installed := filepath.Join(installedDir, "redis-server")
	if err := os.WriteFile(installed, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	onPath := filepath.Join(t.TempDir(), "redis-server")
	if err := os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notExecutable := filepath.Join(t.TempDir(), "redis-server")
	if err := os.WriteFile(notExecutable, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	fromEnv := filepath.Join(t.TempDir(), "redis-server")
	if err := os.WriteFile(fromEnv, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	both := filepath.Dir(onPath) + string(os.PathListSeparator) + pathDir

	tests := map[string]struct {
		env       string // TIERCACHE_REDIS_SERVER
		path      string
		installed string
		want      string   // the path found; "" for an error
		wantErr   []string // substrings of the error
	}{
		"the variable's path wins over PATH and the installed one": {
			env: fromEnv, path: both, installed: installed, want: fromEnv,
		},
		"a variable naming a missing file is an error, not a fallback": {
			env: filepath.Join(installedDir, "gone"), path: both, installed: installed,
			wantErr: []string{"TIERCACHE_REDIS_SERVER", "gone", "bash hack/ensure-redis.sh"},
		},
		"a variable naming a file that cannot run is an error": {
			env: notExecutable, path: both, installed: installed,
			wantErr: []string{"TIERCACHE_REDIS_SERVER", "bash hack/ensure-redis.sh"},
		},
		"without the variable the one on PATH wins": {
			path: both, installed: installed, want: onPath,
		},
		"the installed one is found when PATH lacks it": {
			path: pathDir, installed: installed, want: installed,
		},
		"none is an error naming how to install it": {
			path: pathDir, installed: filepath.Join(installedDir, "missing"),
			wantErr: []string{"bash hack/ensure-redis.sh env", "TIERCACHE_REDIS_SERVER", "make test", "missing"},
		},
		"an installed file that cannot run is not found": {
			path: pathDir, installed: notExecutable,
			wantErr: []string{"bash hack/ensure-redis.sh"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_ = os.Remove(ran) // each case on its own
			t.Setenv("PATH", tc.path)
			got, err := findBinary(tc.env, tc.installed)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("findBinary = %q, %v; want %q", got, err, tc.want)
				}
			} else {
				if err == nil {
					t.Fatalf("findBinary = %q, want an error", got)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %q", err, s)
					}
				}
			}
			if b, err := os.ReadFile(ran); err == nil {
				t.Fatalf("findBinary ran %s", b)
			}
		})
	}
}
