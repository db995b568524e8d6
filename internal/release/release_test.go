package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/tiercache/tiercache/test/testimage"
)

const (
	releaseVersion = "1.2.3-rc.1"
	releaseURL     = "https://downloads.example.com/tiercache/v" + releaseVersion
)

var pluginPlatforms = []string{"darwin/amd64", "darwin/arm64", "linux/amd64", "linux/arm64"}

// standInGo is a go command for `make release` that compiles nothing of
// the product: a build of ./cmd/... writes a small file that names the
// package and the GOOS, GOARCH and CGO_ENABLED it was built for, and logs
// its arguments; anything else (the tools release.sh builds and runs)
// goes to the real go. The release then runs its real packing, image,
// chart and checking steps on those stand-ins in seconds.
const standInGo = `#!/bin/sh
case " $* " in
*" ./cmd/"*) ;;
*) exec "$REAL_GO" "$@" ;;
esac
out= pkg= prev=
for a in "$@"; do
	[ "$prev" = -o ] && out=$a
	case "$a" in ./cmd/*) pkg=$a ;; esac
	prev=$a
done
echo "GOOS=$GOOS GOARCH=$GOARCH CGO_ENABLED=$CGO_ENABLED $*" >>"$BUILD_LOG"
printf 'stand-in %s %s/%s\n' "$pkg" "$GOOS" "$GOARCH" >"$out"
`

// standIn is what standInGo writes for a package and platform.
func standIn(pkg, platform string) string { return "stand-in ./cmd/" + pkg + " " + platform + "\n" }

// runMakeRelease runs make release with the stand-in go into a new
// directory and returns it, the build log and make's output.
func runMakeRelease(t *testing.T, root string, args ...string) (out string, builds []string, output []byte, err error) {
	t.Helper()
	realGo, lerr := exec.LookPath("go")
	if lerr != nil {
		t.Fatal(lerr)
	}
	dir := t.TempDir()
	fakeGo := filepath.Join(dir, "go")
	if err := os.WriteFile(fakeGo, []byte(standInGo), 0o755); err != nil {
		t.Fatal(err)
	}
	out = filepath.Join(dir, "release", releaseVersion)
	log := filepath.Join(dir, "builds")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", append([]string{"release", "GO=" + fakeGo, "RELEASE_OUT=" + out,
		"RELEASE_URL=" + releaseURL, "REVISION=" + testRevision}, args...)...)
	cmd.Dir = root
	cmd.WaitDelay = 10 * time.Second
	cmd.Env = append(os.Environ(), "REAL_GO="+realGo, "BUILD_LOG="+log)
	output, err = cmd.CombinedOutput()
	if b, rerr := os.ReadFile(log); rerr == nil {
		builds = strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	return out, builds, output, err
}

// TestMakeReleaseWritesEveryArtifact runs `make release` on stand-in
// binaries (the real release cross-compiles seven commands, minutes
// even warm) and holds what it writes: the files and nothing else,
// SHA256SUMS over them, the builds (static, trimmed, stamped, for each
// platform), the krew manifest against the archives as krew would read
// them, the image index with both platforms, and the packaged chart,
// whose default image is the release's.
func TestMakeReleaseWritesEveryArtifact(t *testing.T) {
	root := repoRoot(t)
	helm := os.Getenv("HELM")
	if helm == "" {
		msg := "HELM is not set: make release packages the chart with it (make test sets it; or `set -a; eval \"$(bash hack/k8s-tools.sh env)\"; set +a`)"
		if os.Getenv("TIERCACHE_REQUIRE_ENVTEST") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	chartBefore, err := os.ReadFile(filepath.Join(root, "charts", "tiercache", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out, builds, output, err := runMakeRelease(t, root, "VERSION="+releaseVersion)
	if err != nil {
		t.Fatalf("make release: %v\n%s", err, output)
	}

	// The files, and nothing else (no work or staging directory left).
	chart := "tiercache-" + releaseVersion + ".tgz"
	index := "tiercache-" + releaseVersion + ".oci.tar"
	want := []string{"SHA256SUMS", "tiercache.krew.yaml", chart, index}
	for _, p := range pluginPlatforms {
		want = append(want, "kubectl-tiercache_"+releaseVersion+"_"+strings.ReplaceAll(p, "/", "_")+".tar.gz")
	}
	slices.Sort(want)
	var got []string
	entries, err := os.ReadDir(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, want) {
		t.Errorf("make release wrote %q, want %q", got, want)
	}
	if siblings, _ := filepath.Glob(out + ".*"); len(siblings) > 0 {
		t.Errorf("left behind: %q", siblings)
	}

	sums := checkSums(t, out, want)
	checkBuilds(t, builds)
	checkKrewManifest(t, root, out, sums)

	// The image: both platforms under one index, named for the release,
	// each with that platform's binaries.
	a := testimage.Open(t, filepath.Join(out, index))
	repo := chartImageRepository(t, root)
	if got, want := a.Entry.Annotations["io.containerd.image.name"], repo+":"+releaseVersion; got != want {
		t.Errorf("the index is named %q, want %q", got, want)
	}
	if !a.Entry.MediaType.IsIndex() {
		t.Errorf("index.json names a %s, want an image index", a.Entry.MediaType)
	}
	var platforms []string
	for p := range a.Images {
		platforms = append(platforms, p)
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Fatalf("the index holds %q, want linux/amd64 and linux/arm64", platforms)
	}
	for p, img := range a.Images {
		files := testimage.Files(t, img)
		for _, cmd := range []string{"sidecar", "operator"} {
			if got := string(files["tiercache-"+cmd].Data); got != standIn(cmd, p) {
				t.Errorf("%s: /tiercache-%s is %q, want make build-release's for %s", p, cmd, got, p)
			}
		}
	}

	// The chart: version and appVersion are the release's, and its
	// default image (image.tag empty: the appVersion) is the release's.
	meta, values := readChart(t, filepath.Join(out, chart))
	if meta.Version != releaseVersion || meta.AppVersion != releaseVersion {
		t.Errorf("packaged chart: version %q appVersion %q, want %q", meta.Version, meta.AppVersion, releaseVersion)
	}
	if values.Image.Tag != "" || values.Image.Repository != repo {
		t.Errorf("packaged values: image %+v, want the repository %q and an empty tag (the appVersion)", values.Image, repo)
	}
	image := repo + ":" + releaseVersion
	rendered := helmTemplate(t, helm, filepath.Join(out, chart))
	for _, w := range []string{"image: " + image + "\n", "--sidecar-image=" + image + "\n"} {
		if !strings.Contains(rendered, w) {
			t.Errorf("helm template of the packaged chart has no %q", strings.TrimSpace(w))
		}
	}
	if chartAfter, err := os.ReadFile(filepath.Join(root, "charts", "tiercache", "Chart.yaml")); err != nil || !bytes.Equal(chartAfter, chartBefore) {
		t.Errorf("make release changed charts/tiercache/Chart.yaml (%v)", err)
	}
}

// TestMakeReleaseRefusesAVersionThatIsNotSemver: before the first tag
// git describe gives a bare commit, which neither helm nor krew takes
// as a version: make release says so before it builds anything.
func TestMakeReleaseRefusesAVersionThatIsNotSemver(t *testing.T) {
	root := repoRoot(t)
	for _, v := range []string{"8273840", "8273840-dirty", "1.2", "1.2.3+build.5", "01.2.3"} {
		out, builds, output, err := runMakeRelease(t, root, "VERSION="+v)
		if err == nil || !strings.Contains(string(output), "not a semantic version") {
			t.Errorf("make release VERSION=%s: %v, want a refusal naming the version:\n%s", v, err, output)
		}
		if len(builds) > 0 {
			t.Errorf("make release VERSION=%s built %q before refusing", v, builds)
		}
		if _, err := os.Stat(filepath.Dir(out)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("make release VERSION=%s left %s (%v)", v, filepath.Dir(out), err)
		}
	}
}

// checkSums: SHA256SUMS has one line per artifact, in sha256sum's
// format, with each file's sum; it returns the sums by name.
func checkSums(t *testing.T, dir string, files []string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]string{}
	for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		sum, name, ok := strings.Cut(l, "  ")
		if !ok {
			t.Fatalf("SHA256SUMS: %q is not sha256sum's format", l)
		}
		if _, dup := listed[name]; dup {
			t.Errorf("SHA256SUMS: %s listed twice", name)
		}
		listed[name] = sum
	}
	sums := map[string]string{}
	for _, name := range files {
		if name != "SHA256SUMS" {
			sums[name] = fileSum(t, filepath.Join(dir, name))
		}
	}
	if !maps.Equal(listed, sums) {
		t.Errorf("SHA256SUMS lists %v, the files' sums are %v", listed, sums)
	}
	return sums
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// checkBuilds: every product binary the release built is static
// (CGO_ENABLED=0), trimmed and stripped, stamped with the version and
// the revision, and built once for each platform it ships on.
func checkBuilds(t *testing.T, builds []string) {
	t.Helper()
	want := map[string]bool{}
	for _, p := range pluginPlatforms {
		want["./cmd/kubectl-tiercache "+p] = true
	}
	for _, arch := range []string{"amd64", "arm64"} {
		want["./cmd/sidecar linux/"+arch] = true
		want["./cmd/operator linux/"+arch] = true
	}
	got := map[string]bool{}
	for _, b := range builds {
		f := strings.Fields(b)
		if len(f) < 4 {
			t.Errorf("build log line %q", b)
			continue
		}
		platform := strings.TrimPrefix(f[0], "GOOS=") + "/" + strings.TrimPrefix(f[1], "GOARCH=")
		pkg := f[len(f)-1]
		got[pkg+" "+platform] = true
		for _, w := range []string{"CGO_ENABLED=0 ", " -trimpath ", " -s -w ", "version.version=" + releaseVersion + " ", "version.revision=" + testRevision} {
			if !strings.Contains(b, w) {
				t.Errorf("%s for %s: built without %q: %s", pkg, platform, strings.TrimSpace(w), b)
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("built %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
}

// The krew manifest as krew reads it (sigs.k8s.io/krew pkg/index).
type krewManifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string `json:"version"`
		ShortDescription string `json:"shortDescription"`
		Platforms        []struct {
			Selector *metav1.LabelSelector `json:"selector"`
			URI      string                `json:"uri"`
			Sha256   string                `json:"sha256"`
			Files    []struct{ From, To string }
			Bin      string `json:"bin"`
		} `json:"platforms"`
	} `json:"spec"`
}

// checkKrewManifest: a krew v1alpha2 Plugin named tiercache at the
// release's version; each platform selected by exactly one entry, whose
// uri is RELEASE_URL and the archive's name and whose sha256 is the
// archive's (and SHA256SUMS'); installing it as krew does (its files,
// then bin) gives that platform's plugin binary, executable, beside the
// LICENSE.
func checkKrewManifest(t *testing.T, root, dir string, sums map[string]string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "tiercache.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var m krewManifest
	if err := yaml.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "tiercache" {
		t.Errorf("krew manifest: %s %s %s", m.APIVersion, m.Kind, m.Metadata.Name)
	}
	if m.Spec.Version != "v"+releaseVersion || m.Spec.ShortDescription == "" {
		t.Errorf("krew manifest: version %q (want v%s), shortDescription %q", m.Spec.Version, releaseVersion, m.Spec.ShortDescription)
	}
	license, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Spec.Platforms) != len(pluginPlatforms) {
		t.Errorf("krew manifest: %d platforms, want %d", len(m.Spec.Platforms), len(pluginPlatforms))
	}
	for _, p := range pluginPlatforms {
		goos, arch, _ := strings.Cut(p, "/")
		found := -1
		for i, pl := range m.Spec.Platforms {
			sel, err := metav1.LabelSelectorAsSelector(pl.Selector)
			if err != nil {
				t.Fatalf("platform %d: selector: %v", i, err)
			}
			if sel.Matches(labels.Set{"os": goos, "arch": arch}) {
				if found >= 0 {
					t.Errorf("%s is selected by platforms %d and %d", p, found, i)
				}
				found = i
			}
		}
		if found < 0 {
			t.Errorf("%s: no platform of the krew manifest selects it", p)
			continue
		}
		pl := m.Spec.Platforms[found]
		name := "kubectl-tiercache_" + releaseVersion + "_" + goos + "_" + arch + ".tar.gz"
		if pl.URI != releaseURL+"/"+name {
			t.Errorf("%s: uri %q, want %q", p, pl.URI, releaseURL+"/"+name)
		}
		if pl.Sha256 != sums[name] {
			t.Errorf("%s: sha256 %s, the archive's is %s", p, pl.Sha256, sums[name])
		}
		files := readTarGz(t, filepath.Join(dir, name))
		installed := map[string]tarFile{}
		for _, f := range pl.Files {
			if f.To != "." {
				t.Errorf("%s: files: %s to %s, want the installation's root", p, f.From, f.To)
			}
			installed[f.From] = files[f.From]
		}
		bin, ok := installed[pl.Bin]
		switch {
		case !ok || bin.hdr == nil:
			t.Errorf("%s: bin %s is not installed from the archive", p, pl.Bin)
		case bin.hdr.Mode&0o111 == 0 || string(bin.data) != standIn("kubectl-tiercache", p):
			t.Errorf("%s: bin %s mode %o %q, want %s's plugin, executable", p, pl.Bin, bin.hdr.Mode, bin.data, p)
		}
		if l, ok := installed["LICENSE"]; !ok || !bytes.Equal(l.data, license) {
			t.Errorf("%s: the archive installs no LICENSE, or another", p)
		}
	}
}

type tarFile struct {
	hdr  *tar.Header
	data []byte
}

func readTarGz(t *testing.T, p string) map[string]tarFile {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	files := map[string]tarFile{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = tarFile{h, b}
	}
}

type chartMeta struct {
	Version    string `json:"version"`
	AppVersion string `json:"appVersion"`
}

type chartValues struct {
	Image struct {
		Repository string `json:"repository"`
		Tag        string `json:"tag"`
	} `json:"image"`
}

// readChart reads Chart.yaml and values.yaml out of a packaged chart.
func readChart(t *testing.T, p string) (chartMeta, chartValues) {
	t.Helper()
	files := readTarGz(t, p)
	var meta chartMeta
	var values chartValues
	if err := yaml.Unmarshal(files["tiercache/Chart.yaml"].data, &meta); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(files["tiercache/values.yaml"].data, &values); err != nil {
		t.Fatal(err)
	}
	return meta, values
}

// helmTemplate renders a chart with its defaults.
func helmTemplate(t *testing.T, helm, chart string) string {
	t.Helper()
	home := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "template", "tiercache", chart, "--namespace", "tiercache-system")
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home, "HELM_CACHE_HOME="+home, "HELM_DATA_HOME="+home)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v\n%s", chart, err, stderr.String())
	}
	return string(out)
}
