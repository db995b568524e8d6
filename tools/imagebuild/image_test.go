package main

import (
	"archive/tar"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/tiercache/tiercache/test/testimage"
)

func TestOnePlatformIsOneNamedImage(t *testing.T) {
	dir := platformDir(t, map[string]string{"demo-origin": "demo"})
	a := testimage.Open(t, buildArchive(t, nil, "-name", "ghcr.io/tiercache/demo-origin:1.2.3",
		"-platform", "linux/amd64="+dir, "-file", "/demo-origin=demo-origin", "-entrypoint", "/demo-origin",
		"-arg=--listen=:8081"))

	if a.Entry.MediaType != types.OCIManifestSchema1 {
		t.Errorf("index.json lists a %s, want the image manifest itself", a.Entry.MediaType)
	}
	img := namedImage(t, a, "ghcr.io/tiercache/demo-origin:1.2.3", "linux/amd64")
	cf := testimage.Config(t, img)
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
	}
	c := cf.Config
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if !slices.Equal(c.Entrypoint, []string{"/demo-origin"}) || !slices.Equal(c.Cmd, []string{"--listen=:8081"}) {
		t.Errorf("entrypoint %q, cmd %q", c.Entrypoint, c.Cmd)
	}
	if c.WorkingDir != "/home/nonroot" || !slices.Contains(c.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("working dir %q, env %q: want distroless nonroot's", c.WorkingDir, c.Env)
	}
	if cf.Created.Unix() != 0 || len(cf.History) != 2 || cf.History[1].Created.Unix() != 0 {
		t.Errorf("created %v, history %v: want two layers, all at SOURCE_DATE_EPOCH (0)", cf.Created, cf.History)
	}

	files := testimage.Files(t, img)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{"demo-origin", "etc/", "etc/group", "etc/nsswitch.conf", "etc/passwd", "etc/ssl/", "etc/ssl/certs/",
		"etc/ssl/certs/ca-certificates.crt", "home/", "home/nonroot/", "tmp/"}
	if !slices.Equal(names, want) {
		t.Errorf("files %q, want %q", names, want)
	}
	for name, w := range map[string]struct {
		mode     int64
		uid, gid int
	}{
		"demo-origin":   {0o755, 0, 0},
		"etc/passwd":    {0o644, 0, 0},
		"home/nonroot/": {0o700, 65532, 65532},
		"tmp/":          {0o1777, 0, 0},
	} {
		h := files[name].Header
		if h.Mode != w.mode || h.Uid != w.uid || h.Gid != w.gid || h.Uname != "" || h.ModTime.Unix() != 0 {
			t.Errorf("%s: mode %o %d:%d (%q) at %v, want mode %o %d:%d at 0", name, h.Mode, h.Uid, h.Gid, h.Uname, h.ModTime, w.mode, w.uid, w.gid)
		}
	}
	if string(files["demo-origin"].Data) != "demo" {
		t.Errorf("/demo-origin holds %q, not the platform's file", files["demo-origin"].Data)
	}
	if !strings.Contains(string(files["etc/passwd"].Data), "\nnonroot:x:65532:65532:") ||
		!strings.Contains(string(files["etc/group"].Data), "\nnonroot:x:65532:") {
		t.Errorf("passwd/group name no nonroot 65532:\n%s%s", files["etc/passwd"].Data, files["etc/group"].Data)
	}
	checkCABundle(t, files["etc/ssl/certs/ca-certificates.crt"])
}

// checkCABundle: PEM certificates only, all CAs, and enough of them to
// be the public roots.
func checkCABundle(t *testing.T, f testimage.File) {
	t.Helper()
	if f.Header.Typeflag != tar.TypeReg {
		t.Fatal("no CA bundle")
	}
	n := 0
	for rest := f.Data; len(rest) > 0; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			t.Fatalf("the CA bundle has something other than PEM after %d certificates", n)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil || !c.IsCA {
			t.Fatalf("certificate %d: %v (CA: %v)", n, err, err == nil && c.IsCA)
		}
		n++
	}
	if n < 100 {
		t.Errorf("the CA bundle has %d certificates; the NSS roots are about 150", n)
	}
}

func TestSeveralPlatformsAreOneIndex(t *testing.T) {
	amd := platformDir(t, map[string]string{"tiercache-sidecar": "amd64 sidecar"})
	arm := platformDir(t, map[string]string{"tiercache-sidecar": "arm64 sidecar"})
	archive := buildArchive(t, nil, "-name", "ghcr.io/tiercache/tiercache:1.2.3",
		"-platform", "linux/amd64="+amd, "-platform", "linux/arm64="+arm,
		"-file", "/tiercache-sidecar=tiercache-sidecar", "-entrypoint", "/tiercache-sidecar")
	a := testimage.Open(t, archive)

	if a.Entry.MediaType != types.OCIImageIndex {
		t.Fatalf("index.json lists a %s, want an image index of the platforms", a.Entry.MediaType)
	}
	if got := a.Entry.Annotations["io.containerd.image.name"]; got != "ghcr.io/tiercache/tiercache:1.2.3" {
		t.Errorf("the index is named %q", got)
	}
	if len(a.Images) != 2 {
		t.Fatalf("images %v, want linux/amd64 and linux/arm64", a.Images)
	}
	for p, want := range map[string]string{"linux/amd64": "amd64 sidecar", "linux/arm64": "arm64 sidecar"} {
		img := a.Images[p]
		if img == nil {
			t.Fatalf("no %s image", p)
		}
		if cf := testimage.Config(t, img); cf.OS+"/"+cf.Architecture != p {
			t.Errorf("%s image's config says %s/%s", p, cf.OS, cf.Architecture)
		}
		if got := string(testimage.Files(t, img)["tiercache-sidecar"].Data); got != want {
			t.Errorf("%s image's /tiercache-sidecar holds %q, want %q", p, got, want)
		}
	}
	// The index's descriptors are image-spec 1.0's fields alone, which
	// every copier keeps: no artifactType.
	index := rawBlob(t, archive, a.Entry.Digest)
	var im struct{ Manifests []map[string]any }
	if err := json.Unmarshal(index, &im); err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		for k := range d {
			if !slices.Contains([]string{"mediaType", "size", "digest", "platform"}, k) {
				t.Errorf("the index's descriptor has %s: %s", k, index)
			}
		}
	}
	// The base layer is one blob, shared by both.
	base := func(p string) string {
		ls, err := a.Images[p].Layers()
		if err != nil {
			t.Fatal(err)
		}
		d, err := ls[0].Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	if base("linux/amd64") != base("linux/arm64") {
		t.Error("the platforms' base layers differ")
	}
}

// namedImage checks that index.json names a's image ref as ctr images
// import and BuildKit do, and returns the image of platform.
func namedImage(t *testing.T, a *testimage.Archive, ref, platform string) v1.Image {
	t.Helper()
	if got := a.Entry.Annotations["io.containerd.image.name"]; got != ref {
		t.Errorf("io.containerd.image.name %q, want the full reference %q (ctr images import tags with it)", got, ref)
	}
	_, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/"):], ":")
	if got := a.Entry.Annotations["org.opencontainers.image.ref.name"]; got != tag {
		t.Errorf("org.opencontainers.image.ref.name %q, want the tag %q", got, tag)
	}
	img := a.Images[platform]
	if img == nil {
		t.Fatalf("no %s image: %v", platform, a.Images)
	}
	return img
}

// A -bare image is what the real-node harness imports into containerd
// (hack/node-tools.sh's pause and CoreDNS, test/testnode's test
// commands): the commands alone in one layer, run as root, named for
// ctr images import, and the same bytes from the same inputs.
func TestABareImageIsTheCommandsAloneRunAsRoot(t *testing.T) {
	dir := platformDir(t, map[string]string{"pause": "pause binary"})
	args := []string{"-bare", "-name", "tiercache.local/pause:1",
		"-platform", "linux/amd64=" + dir, "-file", "/pause=pause", "-entrypoint", "/pause"}
	a := testimage.Open(t, buildArchive(t, nil, args...))
	img := namedImage(t, a, "tiercache.local/pause:1", "linux/amd64")
	cf := testimage.Config(t, img)
	c := cf.Config
	if c.User != "" || c.WorkingDir != "" || !slices.Equal(c.Env, []string{"PATH=/"}) || !slices.Equal(c.Entrypoint, []string{"/pause"}) {
		t.Errorf("user %q, working dir %q, env %q, entrypoint %q: want root, none, PATH=/, /pause", c.User, c.WorkingDir, c.Env, c.Entrypoint)
	}
	if len(cf.History) != 1 || len(cf.RootFS.DiffIDs) != 1 {
		t.Errorf("history %v, diff IDs %v: want one layer", cf.History, cf.RootFS.DiffIDs)
	}
	files := testimage.Files(t, img)
	if len(files) != 1 || string(files["pause"].Data) != "pause binary" || files["pause"].Header.Mode != 0o755 {
		t.Errorf("files %v, want /pause alone, 0755", files)
	}

	buildTwice(t, dir, args...)
}

// rawBlob reads the blob of digest d out of an archive's tar, as written.
func rawBlob(t *testing.T, archive string, d v1.Hash) []byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no blob %s (%v)", archive, d, err)
		}
		if h.Name == "blobs/"+d.Algorithm+"/"+d.Hex {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}
