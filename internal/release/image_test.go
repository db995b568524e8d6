package release

import (
	"bytes"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tiercache/tiercache/test/testimage"
)

// TestMakeImageIsTheDockerfilesImage builds the images with `make image`
// twice and holds them to the Dockerfile: the files its final stage
// copies, byte for byte what `make build-release` builds and static, at
// the paths it copies them to, and nothing else at the root; its USER and
// ENTRYPOINT; the chart's image repository; and the same digest both
// times. The demo origin's image, the real-node e2e's app, is held to the
// same user and to a static binary.
func TestMakeImageIsTheDockerfilesImage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: not running make image")
	}
	root := repoRoot(t)
	d := readDockerfile(t, root)
	const version = "0.0.0-test"
	arch := runtime.GOARCH
	repo := chartImageRepository(t, root)

	first, second, release := t.TempDir(), t.TempDir(), t.TempDir()
	for _, out := range []string{first, second} {
		makeIn(t, root, "image", "IMAGE_OUT="+out, "VERSION="+version, "IMAGE_ARCH="+arch)
	}
	makeIn(t, root, "build-release", "RELEASE_DIR="+release, "VERSION="+version)

	product := "tiercache-" + version + "-linux-" + arch + ".oci.tar"
	demo := "demo-origin-" + version + "-linux-" + arch + ".oci.tar"
	for _, name := range []string{product, demo} {
		a, err := os.ReadFile(filepath.Join(first, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(second, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: two runs of make image differ: not reproducible", name)
		}
	}

	// The product image against the Dockerfile.
	a := testimage.Open(t, filepath.Join(first, product))
	if got, want := a.Entry.Annotations["io.containerd.image.name"], repo+":"+version; got != want {
		t.Errorf("the image is named %q, want %q (the chart's image.repository, VERSION)", got, want)
	}
	img := a.Images["linux/"+arch]
	if img == nil {
		t.Fatalf("no linux/%s image in %s", arch, product)
	}
	cfg := testimage.Config(t, img).Config
	if cfg.User != d.user {
		t.Errorf("user %q, the Dockerfile's USER is %q", cfg.User, d.user)
	}
	if !slices.Equal(cfg.Entrypoint, d.entrypoint) {
		t.Errorf("entrypoint %q, the Dockerfile's ENTRYPOINT is %q", cfg.Entrypoint, d.entrypoint)
	}
	files := testimage.Files(t, img)
	var atRoot, copied []string
	for name := range files {
		if !strings.Contains(name, "/") {
			atRoot = append(atRoot, "/"+name)
		}
	}
	for dst, src := range d.copies {
		copied = append(copied, dst)
		f, ok := files[strings.TrimPrefix(dst, "/")]
		if !ok {
			t.Errorf("the image has no %s (the Dockerfile copies %s there)", dst, src)
			continue
		}
		if f.Header.Mode != 0o755 || f.Header.Uid != 0 {
			t.Errorf("%s: mode %o uid %d, want 0755 owned by root as COPY leaves it", dst, f.Header.Mode, f.Header.Uid)
		}
		built, err := os.ReadFile(filepath.Join(release, path.Base(src)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Data, built) {
			t.Errorf("%s differs from what make build-release builds as %s", dst, src)
		}
		checkStaticBinary(t, writeTemp(t, dst, f.Data))
	}
	sort.Strings(atRoot)
	sort.Strings(copied)
	if !slices.Equal(atRoot, copied) {
		t.Errorf("files at the image's root %q, the Dockerfile copies %q", atRoot, copied)
	}

	// The demo origin's image.
	a = testimage.Open(t, filepath.Join(first, demo))
	img = a.Images["linux/"+arch]
	if img == nil {
		t.Fatalf("no linux/%s image in %s", arch, demo)
	}
	cfg = testimage.Config(t, img).Config
	if cfg.User != d.user || !slices.Equal(cfg.Entrypoint, []string{"/demo-origin"}) {
		t.Errorf("demo origin: user %q entrypoint %q, want %q and /demo-origin", cfg.User, cfg.Entrypoint, d.user)
	}
	f, ok := testimage.Files(t, img)["demo-origin"]
	if !ok {
		t.Fatal("the demo origin's image has no /demo-origin")
	}
	checkStaticBinary(t, writeTemp(t, "/demo-origin", f.Data))
}

// chartImageRepository reads image.repository from the chart's values.
func chartImageRepository(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "charts", "tiercache", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Image struct {
			Repository string `json:"repository"`
		} `json:"image"`
	}
	if err := yaml.Unmarshal(b, &v); err != nil || v.Image.Repository == "" {
		t.Fatalf("values.yaml: image.repository: %q, %v", v.Image.Repository, err)
	}
	return v.Image.Repository
}

// writeTemp writes a file taken out of an image (named p there) to disk,
// executable, for the checks that read files.
func writeTemp(t *testing.T, p string, data []byte) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), path.Base(p))
	if err := os.WriteFile(out, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestMakeBuildBuildsEveryBinaryStatic: `make build` builds every command
// and tool with CGO off, so that bin/demo-origin (and any other of its
// outputs) goes into an image as built (a cgo build links it to the
// machine's libc). The go command is a stand-in that records each build's
// CGO_ENABLED; the environment says 1, which the Makefile must override.
func TestMakeBuildBuildsEveryBinaryStatic(t *testing.T) {
	root := repoRoot(t)
	dir := t.TempDir()
	log := filepath.Join(dir, "builds")
	fakeGo := filepath.Join(dir, "go")
	script := "#!/bin/sh\necho \"CGO_ENABLED=${CGO_ENABLED-unset} $*\" >>" + log + "\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("make", "build", "GO="+fakeGo)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	builds := strings.Split(strings.TrimSpace(string(b)), "\n")
	for _, l := range builds {
		if !strings.HasPrefix(l, "CGO_ENABLED=0 ") {
			t.Errorf("make build: %s: want CGO_ENABLED=0", l)
		}
	}
	for _, want := range []string{"./tools/demo-origin", "./cmd/sidecar", "./cmd/operator", "./cmd/kubectl-tiercache"} {
		if !strings.Contains(string(b), " "+want+"\n") && !strings.HasSuffix(string(b), " "+want+"\n") {
			t.Errorf("make build did not build %s:\n%s", want, b)
		}
	}
}
