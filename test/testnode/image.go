package testnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// buildTimeout bounds building one image's binary (warm cache: seconds).
const buildTimeout = 5 * time.Minute

// BuildImage compiles the Go command pkg (an import path in this module)
// statically and packs it as an OCI image archive named name (with a tag
// other than latest), its binary at /<base of pkg> and its entrypoint. It
// returns the archive's path, for Node.ImportImage.
func (n *Node) BuildImage(t testing.TB, pkg, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	dir := t.TempDir()
	bin := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testnode: go build %s: %v\n%s", pkg, err, out)
	}
	archive := filepath.Join(dir, filepath.Base(pkg)+".tar")
	dst := "/" + filepath.Base(pkg)
	err := run(ctx, filepath.Join(n.tools.Images, "bin", "imagebuild"), "-bare",
		"-o", archive, "-name", name, "-platform", "linux/"+runtime.GOARCH+"="+dir,
		"-file", dst+"="+filepath.Base(pkg), "-entrypoint", dst)
	if err != nil {
		t.Fatalf("testnode: %v", err)
	}
	return archive
}

// BuildHostImage packs files of this machine as a bare OCI image archive
// named name (a tag other than latest): files maps a name at the image's
// root to a path here (symbolic links followed), entrypoint is one of
// those names. The image runs as root with PATH=/ (imagebuild -bare); a
// dynamically linked command needs its libraries and ELF interpreter
// among the files. It returns the archive's path, for Node.ImportImage.
func (n *Node) BuildHostImage(t testing.TB, name string, files map[string]string, entrypoint string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	args := []string{"-bare", "-o", filepath.Join(dir, "image.tar"), "-name", name,
		"-platform", "linux/" + runtime.GOARCH + "=" + root, "-entrypoint", "/" + entrypoint}
	for dst, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatalf("testnode: image %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(root, dst), b, 0o755); err != nil {
			t.Fatalf("testnode: image %s: %v", name, err)
		}
		args = append(args, "-file", "/"+dst+"="+dst)
	}
	if err := run(ctx, append([]string{filepath.Join(n.tools.Images, "bin", "imagebuild")}, args...)...); err != nil {
		t.Fatalf("testnode: %v", err)
	}
	return filepath.Join(dir, "image.tar")
}

// KubeletDir is kubelet's root directory (--root-dir), in the node's
// mount namespace: pods' volumes are under pods/<uid>/volumes.
func (n *Node) KubeletDir() string { return n.l.path("kubelet") }
