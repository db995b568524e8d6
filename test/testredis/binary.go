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
// installs anything. hack/ensure-redis.sh installs it, and every make
// target that runs tests needing it (test, test-unit, e2e, fuzz, bench)
// runs that script first.
package testredis

import (
	"fmt"
	"os"
	"os/exec"
)

// installedPath is where hack/ensure-redis.sh puts redis-server (Debian's
// redis-server package): found even when PATH does not name /usr/bin.
const installedPath = "/usr/bin/redis-server"

// Binary returns the path of redis-server: the one on PATH, else the one
// hack/ensure-redis.sh installs. When there is neither, the error says to
// run `make test` or `bash hack/ensure-redis.sh`. Suitable for TestMain:
//
//	func TestMain(m *testing.M) {
//		if _, err := testredis.Binary(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		os.Exit(m.Run())
//	}
func Binary() (string, error) { return findBinary(installedPath) }

// findBinary is Binary with the installed path as a parameter (tests).
func findBinary(installed string) (string, error) {
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	if fi, err := os.Stat(installed); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return installed, nil
	}
	return "", fmt.Errorf("testredis: redis-server is neither on PATH nor at %s; "+
		"install it with `bash hack/ensure-redis.sh` from the repository root (`make test` does that first)", installed)
}
