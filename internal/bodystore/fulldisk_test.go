package bodystore

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/tiercache/tiercache/internal/metrics"
)

// fullDiskDirEnv names, in the child process, the directory to mount the
// small filesystem on.
const fullDiskDirEnv = "BODYSTORE_TEST_FULL_DISK_DIR"

// TestAFullDiskBreaksTheWriter fills a real filesystem: a 1 MiB tmpfs. The
// test binary re-runs itself in a private mount namespace (Go makes the
// child's mounts private when it unshares CLONE_NEWNS) and mounts the
// tmpfs there, so the mount is never visible outside the child and
// disappears with it, even if the child crashes. A size rlimit would give
// EFBIG instead of the ENOSPC a full emptyDir gives; this is the real
// error. It needs CAP_SYS_ADMIN, which the test machine (root) has.
func TestAFullDiskBreaksTheWriter(t *testing.T) {
	if dir := os.Getenv(fullDiskDirEnv); dir != "" {
		fullDiskChild(t, dir)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs in a private mount namespace needs root")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAFullDiskBreaksTheWriter$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), fullDiskDirEnv+"="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "full disk checks ran") {
		t.Fatalf("child: %v\n%s", err, out)
	}
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	if strings.Contains(string(mounts), dir) {
		t.Fatalf("the child's tmpfs on %s is visible outside it", dir)
	}
}

func fullDiskChild(t *testing.T, dir string) {
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a 1 MiB tmpfs on %s: %v", dir, err)
	}
	defer syscall.Unmount(dir, 0)

	for _, hint := range []int64{2 << 20, -1} {
		// A budget far above the disk: the disk, not the budget, runs out.
		s, m := testStore(t, Options{Dir: dir, MaxBytes: 64 << 20})
		kept := body(1, 100<<10)
		keptRef := put(t, s, "GET h/kept", kept, int64(len(kept)))

		w, err := s.Create("GET h/big", hint)
		if err != nil {
			t.Fatal(err)
		}
		f := w.Follow()
		chunk := body(2, 64<<10)
		var werr error
		for range 64 { // 4 MiB at most, the disk holds 1
			if _, werr = w.Write(chunk); werr != nil {
				break
			}
		}
		if !errors.Is(werr, syscall.ENOSPC) {
			t.Fatalf("hint %d: writing 4 MiB to a 1 MiB disk = %v, want ENOSPC", hint, werr)
		}
		if _, err := w.Write(chunk); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("hint %d: a write after the writer broke = %v, want the same ENOSPC", hint, err)
		}
		r := waitResult(t, readAllAsync(f))
		if !errors.Is(r.err, ErrAborted) || !errors.Is(r.err, syscall.ENOSPC) {
			t.Fatalf("hint %d: the follower got %v, want ErrAborted with ENOSPC", hint, r.err)
		}
		_ = f.Close()
		if _, err := w.Commit(meta("GET h/big")); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("hint %d: Commit of the broken writer = %v, want ENOSPC", hint, err)
		}
		w.Abort()

		if names := files(t, dir); len(names) != 1 || names[0] != fileName(keptRef.ID, bodySuffix) {
			t.Fatalf("hint %d: files after the failed fill %q, want only the kept body", hint, names)
		}
		committed, n, reserved := s.Usage()
		if n != 1 || reserved != 0 || committed != fileSize("GET h/kept", len(kept)) {
			t.Fatalf("hint %d: usage %d bytes in %d files, %d reserved; want the kept body only", hint, committed, n, reserved)
		}
		if got := errorsCounted(t, m, metrics.BodyOpWrite); got != 1 {
			t.Fatalf("hint %d: errors_total{op=write} = %v, want 1", hint, got)
		}
		if got := read(t, s, "GET h/kept", keptRef); !bytes.Equal(got, kept) {
			t.Fatalf("hint %d: the committed body changed", hint)
		}
		// The space came back: a new body fits.
		_ = put(t, s, "GET h/after", body(3, 200<<10), 200<<10)
		must(t, s.Close())
		for _, name := range files(t, dir) {
			must(t, os.Remove(dir+"/"+name))
		}
	}
	t.Log("full disk checks ran")
}
