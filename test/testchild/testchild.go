// Package testchild runs a test's body in a child process of the test
// binary that runs that test alone. It is for tests that change
// process-wide state (a resource limit, a mount, the Go runtime's soft
// memory limit) or measure it (the heap), which the other tests of the
// same binary would disturb, or be disturbed by. It is a test harness
// (only _test.go files import it), not part of the product.
package testchild

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// env names, in the child, the test it runs.
const env = "TIERCACHE_TEST_CHILD"

// ran is what the child logs once its checks have run: a child that ran
// none (its test filtered out, say) must not pass for one that passed.
const ran = "testchild: the child's checks ran"

// Run runs child as the body of t's test in a child process of the test
// binary that runs only that test (t must be a top-level test), and fails
// t unless the child passed and ran child to its end. setup, when not
// nil, completes the command first (more environment, SysProcAttr). In
// the child itself, Run just calls child.
func Run(t *testing.T, setup func(*exec.Cmd), child func(t *testing.T)) {
	t.Helper()
	if os.Getenv(env) == t.Name() {
		child(t)
		t.Log(ran)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=3m")
	cmd.Env = append(os.Environ(), env+"="+t.Name())
	if setup != nil {
		setup(cmd)
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), ran) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}
