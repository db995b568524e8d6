package testnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// TestOverlappingNodesLeaveTheMachinesSysctls: a node that starts while
// another lives saves that one's values (the machine's, not kubelet's),
// and a node that stops while another lives puts nothing back; the last
// one does. The saved values name a sysctl that does not exist, so a
// restore that happens is seen as its error and changes nothing.
func TestOverlappingNodesLeaveTheMachinesSysctls(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	mkNode := func(pid int) string {
		work := filepath.Join(os.TempDir(), prefix+strconv.Itoa(pid))
		if err := os.Mkdir(work, 0o755); err != nil {
			t.Fatal(err)
		}
		return work
	}
	machines := "kernel/tiercache_test_no_such_sysctl=1\n"
	live := mkNode(other.Process.Pid)
	if err := os.WriteFile(filepath.Join(live, "sysctls"), []byte(machines), 0o644); err != nil {
		t.Fatal(err)
	}
	mine := mkNode(os.Getpid())
	file := filepath.Join(mine, "sysctls")

	if err := saveSysctls(file); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(file); string(b) != machines {
		t.Fatalf("saved %q while another node lives; want its values %q", b, machines)
	}
	if err := restoreSysctls(file); err != nil {
		t.Fatalf("restored while another node lives: %v", err)
	}

	// The other node is gone: this one is the last, and restores.
	_ = other.Process.Kill()
	_ = other.Wait()
	if err := restoreSysctls(file); err == nil {
		t.Fatal("the last node did not restore (no error writing the sysctl that does not exist)")
	}
}
