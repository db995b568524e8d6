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
