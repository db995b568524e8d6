package sidecar

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Body directory: where a sidecar keeps bodies above the tier's
// bodyStore.threshold as files (package bodystore). In a pod it is the
// emptyDir the operator injects; standalone, any directory. Without one
// the sidecar behaves as before the body store existed.

const (
	// minBodyDirSize is the smallest budget worth a body store.
	minBodyDirSize = 1 << 20
	// probeName is created and removed in the directory at start to prove
	// it is writable (a read-only mount or a missing permission shows here,
	// not at the first fill).
	probeName = ".tiercache-probe"
)

// parseBodyDirSize parses --body-dir-size: a size such as 2Gi, or 0/empty
// for automatic (resolved at start against the free space).
func parseBodyDirSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	v, err := tierconfig.ParseSize(s)
	if err != nil {
		return 0, fmt.Errorf("--body-dir-size (or TIERCACHE_BODY_DIR_SIZE): %w", err)
	}
	if v != 0 && v < minBodyDirSize {
		return 0, fmt.Errorf("--body-dir-size (or TIERCACHE_BODY_DIR_SIZE): must be 0 (automatic) or at least 1Mi (got %s)", v)
	}
	return int64(v), nil
}

// prepareBodyDir makes dir (0700) when it is missing, checks that it is a
// directory the sidecar can write in (it creates and removes a probe
// file) and returns the budget: size, or when size is 0, 90% of the free
// space of dir's filesystem as free reports it. Every error names
// --body-dir, the path and the reason.
func prepareBodyDir(dir string, size int64, free func(string) (int64, error)) (int64, error) {
	fail := func(format string, args ...any) (int64, error) {
		return 0, fmt.Errorf("--body-dir %s: "+format, append([]any{dir}, args...)...)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail("cannot create the directory: %v", err)
	}
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fail("%v", err)
	case !fi.IsDir():
		return fail("not a directory")
	}
	probe := filepath.Join(dir, probeName)
	f, err := os.OpenFile(probe, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fail("not writable: %v", err)
	}
	_, werr := f.Write([]byte("ok"))
	cerr := f.Close()
	rerr := os.Remove(probe)
	if err := errors.Join(werr, cerr, rerr); err != nil {
		return fail("not writable: %v", err)
	}
	if size > 0 {
		return size, nil
	}
	avail, err := free(dir)
	if err != nil {
		return fail("cannot read the free space for an automatic --body-dir-size: %v", err)
	}
	auto := autoBodyDirSize(avail)
	if auto < minBodyDirSize {
		return fail("only %s free: 90%% of it is below the 1Mi minimum; free space or give --body-dir-size", tierconfig.Size(max(avail, 0)))
	}
	return auto, nil
}

// autoBodyDirSize is the budget when --body-dir-size is 0 or unset: 90%
// of avail, the free space of the body directory's filesystem at start
// (the rest is left for the filesystem's other users and the store's own
// slack: temporary files, trailers), in whole Ki so that it prints as a
// size a person can read back.
func autoBodyDirSize(avail int64) int64 {
	if avail <= 0 {
		return 0
	}
	v := avail/10*9 + avail%10*9/10
	return v &^ (1<<10 - 1)
}
