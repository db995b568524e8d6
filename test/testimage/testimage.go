// Package testimage reads the OCI image archives that `make image`
// (tools/imagebuild) writes, with go-containerregistry, the library that
// wrote them: a layout tar is unpacked, its index.json checked to name
// exactly one image, every blob validated against its digest, and each
// platform's image flattened into its files. It is a test harness (only
// _test.go files import it: tools/imagebuild's and internal/release's),
// not part of the product.
package testimage

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// Archive is one unpacked image archive.
type Archive struct {
	// Entry is index.json's one descriptor: an image manifest or an
	// image index, with the name annotations.
	Entry v1.Descriptor
	// Images holds the image of each platform ("linux/amd64").
	Images map[string]v1.Image
	// Names lists the archive's tar entries in their order.
	Names []string
}

// Open unpacks the archive at p into a temporary directory and reads it;
// any defect fails t.
func Open(t testing.TB, p string) *Archive {
	t.Helper()
	dir := t.TempDir()
	names, err := untar(p, dir)
	if err != nil {
		t.Fatalf("unpacking %s: %v", p, err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s: not an OCI image layout: %v", p, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatalf("%s: index.json: %v", p, err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("%s: index.json lists %d manifests, want 1 (the named image)", p, len(im.Manifests))
	}
	a := &Archive{Entry: im.Manifests[0], Images: map[string]v1.Image{}, Names: names}
	switch a.Entry.MediaType {
	case types.OCIManifestSchema1:
		img, err := idx.Image(a.Entry.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if a.Entry.Platform == nil {
			t.Fatalf("%s: index.json's image has no platform", p)
		}
		a.add(t, img, a.Entry.Platform)
	case types.OCIImageIndex:
		platforms, err := idx.ImageIndex(a.Entry.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if err := validate.Index(platforms); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		pm, err := platforms.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range pm.Manifests {
			img, err := platforms.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			a.add(t, img, d.Platform)
		}
	default:
		t.Fatalf("%s: index.json lists a %s", p, a.Entry.MediaType)
	}
	return a
}

func (a *Archive) add(t testing.TB, img v1.Image, p *v1.Platform) {
	t.Helper()
	if err := validate.Image(img); err != nil {
		t.Fatalf("image for %v: %v", p, err)
	}
	if p == nil {
		t.Fatal("an image without a platform")
	}
	a.Images[p.OS+"/"+p.Architecture] = img
}

// File is one file of an image's flattened file system.
type File struct {
	Header tar.Header
	Data   []byte
}

// Files flattens img (its layers applied in order) into its files, by
// path without a leading slash; directories end in "/".
func Files(t testing.TB, img v1.Image) map[string]File {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]File{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("extracting the image: %v", err)
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, tr); err != nil {
			t.Fatal(err)
		}
		name := strings.TrimPrefix(path.Clean("/"+h.Name), "/")
		if h.Typeflag == tar.TypeDir {
			name += "/"
		}
		files[name] = File{Header: *h, Data: b.Bytes()}
	}
}

// Config is img's config file.
func Config(t testing.TB, img v1.Image) *v1.ConfigFile {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	return cf
}

// untar unpacks the archive's directories and regular files (nothing
// else belongs in a layout) and returns the entries' names in order.
func untar(p, dir string) ([]string, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var names []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, nil
		}
		if err != nil {
			return nil, err
		}
		names = append(names, h.Name)
		if !filepath.IsLocal(h.Name) {
			return nil, errors.New(h.Name + ": outside the archive")
		}
		target := filepath.Join(dir, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return nil, err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				return nil, err
			}
		default:
			return nil, errors.New(h.Name + ": not a file or directory")
		}
	}
}
