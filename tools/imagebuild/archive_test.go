package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/test/testimage"
)

// platformDir writes files (name → content) into a new directory, as
// build-release writes a platform's commands.
func platformDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(c), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// buildArchive runs the command as make image does and returns the
// archive's path.
func buildArchive(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "image.oci.tar")
	var log bytes.Buffer
	if err := run(append([]string{"-o", out}, args...), func(k string) string { return env[k] }, &log); err != nil {
		t.Fatalf("imagebuild: %v\n%s", err, log.String())
	}
	if !strings.Contains(log.String(), "sha256:") {
		t.Errorf("the log does not name the digest: %q", log.String())
	}
	return out
}

// buildTwice builds args, changes what the machine says about the files
// of dir (their times and modes), builds again, fails t when the two
// archives differ, and returns their bytes.
func buildTwice(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	first, err := os.ReadFile(buildArchive(t, nil, args...))
	if err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if err := os.Chtimes(p, time.Now(), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	second, err := os.ReadFile(buildArchive(t, nil, args...))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Fatal("two builds of the same inputs differ")
	}
	return first
}

func TestTheSameInputsGiveTheSameArchive(t *testing.T) {
	dir := platformDir(t, map[string]string{"sidecar": "sidecar v1", "operator": "operator v1"})
	args := []string{"-name", "ghcr.io/tiercache/tiercache:1.2.3", "-platform", "linux/amd64=" + dir,
		"-file", "/tiercache-sidecar=sidecar", "-file", "/tiercache-operator=operator", "-entrypoint", "/tiercache-sidecar"}
	first := buildTwice(t, dir, args...)

	// The archive's own entries: sorted, owned by root, fixed modes, at
	// the epoch.
	a := testimage.Open(t, buildArchive(t, nil, args...))
	if !sort.StringsAreSorted(a.Names) {
		t.Errorf("archive entries not sorted: %v", a.Names)
	}
	for _, want := range []string{"oci-layout", "index.json", "blobs/sha256/"} {
		found := false
		for _, n := range a.Names {
			found = found || n == want
		}
		if !found {
			t.Errorf("the archive has no %s: %v", want, a.Names)
		}
	}

	// Another content or another epoch is another image.
	changed := platformDir(t, map[string]string{"sidecar": "sidecar v2", "operator": "operator v1"})
	other, err := os.ReadFile(buildArchive(t, nil, append(args[:2:2], append([]string{"-platform", "linux/amd64=" + changed}, args[4:]...)...)...))
	if err != nil {
		t.Fatal(err)
	}
	later, err := os.ReadFile(buildArchive(t, map[string]string{"SOURCE_DATE_EPOCH": "1700000000"}, args...))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(first, other) || bytes.Equal(first, later) {
		t.Error("a changed command or SOURCE_DATE_EPOCH gave the same archive")
	}
}

func TestTheArchiveIsWrittenWholeOrNotAtAll(t *testing.T) {
	out := filepath.Join(t.TempDir(), "image.oci.tar")
	if err := os.WriteFile(out, []byte("the previous archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run([]string{"-o", out, "-name", "ghcr.io/tiercache/tiercache:1.2.3", "-platform", "linux/amd64=" + t.TempDir(),
		"-file", "/missing=missing", "-entrypoint", "/missing"}, func(string) string { return "" }, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("error %v, want one naming the missing file", err)
	}
	if b, _ := os.ReadFile(out); string(b) != "the previous archive" {
		t.Errorf("a failed build changed the archive: %q", b)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".imagebuild-*"))
	if len(left) > 0 {
		t.Errorf("a failed build left %v", left)
	}
}
