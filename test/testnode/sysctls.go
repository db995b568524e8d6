package testnode

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Nodes of several processes may overlap (make test and make
// demo-cluster, two test binaries). kubelet sets the machine-wide sysctls
// at its start, so a node that started after another's kubelet would save
// kubelet's values as the machine's, and, stopping last, leave them. So
// the saves and restores take one lock: a node starting while another
// lives copies that one's saved file (the machine's values), and a node
// stopping while another lives leaves them to the last one.

// withSysctlLock runs f holding an exclusive flock on the temporary
// directory itself (a lock file would be left on the machine).
func withSysctlLock(f func() error) error {
	d, err := os.Open(os.TempDir())
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	defer unix.Flock(int(d.Fd()), unix.LOCK_UN) //nolint:errcheck // Close unlocks too
	return f()
}

// liveSysctls is the saved sysctls file of a node other than the one in
// work whose process is alive, or "".
func liveSysctls(work string) string {
	m, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*", "sysctls"))
	for _, f := range m {
		dir := filepath.Dir(f)
		if filepath.Clean(dir) == filepath.Clean(work) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(dir), prefix))
		if err == nil && alive(pid) {
			return f
		}
	}
	return ""
}
