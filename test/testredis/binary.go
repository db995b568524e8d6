// Package testredis starts throwaway redis-server processes for tests: a
// standalone server, a Redis Cluster of N masters, and a Sentinel watching a
// server. Tests run against the real thing (STYLE.md, "Real peers in
// tests"), on free loopback ports, with data in the test's temporary
// directory and no persistence.
//
// Every process is killed when its test ends (t.Cleanup) and, on Linux, when
// the test binary dies (Pdeathsig); every wait is bounded. A missing
// redis-server is a test failure, never a skip: CI must not pass by running
// none of the Redis tests. The binary is installed by hack/ensure-redis.sh,
// which `make test` runs first and which this package runs itself when
// redis-server is not on PATH.
package testredis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

const ensureScript = "hack/ensure-redis.sh"

// installTimeout bounds a run of hack/ensure-redis.sh (apt-get update and
// install, or waiting for another package's test binary doing the same).
const installTimeout = 10 * time.Minute

// Binary returns the path of redis-server. When it is not on PATH it runs
// hack/ensure-redis.sh (found by walking up from the working directory,
// which `go test` sets to the package directory) and uses the path that
// prints. The error says how to install it by hand. Suitable for TestMain:
//
//	func TestMain(m *testing.M) {
//		if _, err := testredis.Binary(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		os.Exit(m.Run())
//	}
func Binary() (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	script, err := findUp(ensureScript)
	if err != nil {
		return "", fmt.Errorf("testredis: redis-server is not on PATH and %s was not found (%v); run `bash %s` from the repository root",
			ensureScript, err, ensureScript)
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", script)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testredis: redis-server is not on PATH and `bash %s` failed: %v\n%s", ensureScript, err, tail(stderr.String(), 2000))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	p := strings.TrimSpace(lines[len(lines)-1])
	if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		return "", fmt.Errorf("testredis: `bash %s` printed %q, which is not an executable redis-server; run it by hand and check its output", ensureScript, p)
	}
	return p, nil
}

// findUp looks for rel in the working directory and each of its parents.
func findUp(rel string) (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("not in the working directory or any parent")
		}
		dir = parent
	}
}

// tail returns at most the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
