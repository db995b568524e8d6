// Package testredis starts throwaway redis-server processes for tests: a
// standalone server, a Redis Cluster of N masters, and a Sentinel watching a
// server, plus a fault proxy (LatencyProxy) to put between a client and
// one. Tests run against the real thing (STYLE.md, "Real peers in
// tests"), on free loopback ports, with data in the test's temporary
// directory and no persistence. It is a test harness (only _test.go files
// import it), not part of the product.
//
// Every process is killed when its test ends (t.Cleanup) and, on Linux, when
// the test binary dies (Pdeathsig); every wait is bounded. A missing
// redis-server is a test failure, never a skip: CI must not pass by running
// none of the Redis tests. This package only finds the binary; it never
// installs anything. hack/ensure-redis.sh installs it into the tool cache,
// and every make target that runs tests needing it (test, test-unit,
// test-alloc, e2e, fuzz, fuzz-short, bench) runs that script first and
// passes its path in TIERCACHE_REDIS_SERVER.
package testredis

import (
	"fmt"
	"os"
	"os/exec"
)

// envVar names the variable that holds the path of the redis-server to
// run: the one hack/ensure-redis.sh printed (`eval "$(bash
// hack/ensure-redis.sh env)"` sets it).
const envVar = "TIERCACHE_REDIS_SERVER"

// installedPath is where Debian's redis-server package, installed
// system-wide, puts redis-server: a fallback for machines set up by hand,
// found even when PATH does not name /usr/bin.
const installedPath = "/usr/bin/redis-server"

// Binary returns the path of redis-server: $TIERCACHE_REDIS_SERVER when it
// is set (an error when it names no executable file: a stale path must not
// quietly fall back to another redis-server), else the one on PATH, else
// /usr/bin/redis-server. When there is none, the error names
// hack/ensure-redis.sh. Suitable for TestMain:
//
//	func TestMain(m *testing.M) {
//		if _, err := testredis.Binary(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		os.Exit(m.Run())
//	}
func Binary() (string, error) { return findBinary(os.Getenv(envVar), installedPath) }

// findBinary is Binary with the variable's value and the installed path as
// parameters (tests).
func findBinary(fromEnv, installed string) (string, error) {
	if fromEnv != "" {
		if isExecutable(fromEnv) {
			return fromEnv, nil
		}
		return "", fmt.Errorf("testredis: %s=%s is not an executable file; "+
			"run `bash hack/ensure-redis.sh` from the repository root and set %s to the path it prints "+
			"(`make test` does both)", envVar, fromEnv, envVar)
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if isExecutable(installed) {
		return installed, nil
	}
	return "", fmt.Errorf("testredis: no redis-server: %s is not set, and there is none on PATH or at %s; "+
		"from the repository root run `eval \"$(bash hack/ensure-redis.sh env)\"; export %s`, "+
		"which installs it into the tool cache (`make test` does that first)", envVar, installed, envVar)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
