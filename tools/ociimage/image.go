package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// epoch is every file's time in the layer and the archive: a build is
// reproducible when nothing in it depends on when it ran.
var epoch = time.Unix(0, 0).UTC()

type imageFile struct{ src, dst string }

type imageSpec struct {
	out, name, entrypoint string
	files                 []imageFile
}

func (s imageSpec) validate() error {
	switch {
	case s.out == "":
		return errors.New("-o: required")
	case s.name == "":
		return errors.New("-name: required")
	case !strings.HasPrefix(s.entrypoint, "/"):
		return errors.New("-entrypoint: must be an absolute path")
	case len(s.files) == 0:
		return errors.New("-file: at least one is required")
	}
	if _, err := name.NewTag(s.name, name.StrictValidation); err != nil {
		return fmt.Errorf("-name: %w", err)
	}
	return nil
}

// write builds the image and writes it to s.out as an OCI layout tar.
func (s imageSpec) write() error {
	img, err := s.image()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(filepath.Dir(s.out), ".ociimage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	tag, _ := name.NewTag(s.name, name.StrictValidation)
	err = p.AppendImage(img,
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}),
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          tag.Name(),
			"org.opencontainers.image.ref.name": tag.TagStr(),
		}))
	if err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	return tarDir(dir, s.out)
}

func (s imageSpec) image() (v1.Image, error) {
	layerTar, err := s.layer()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{CreatedBy: "ociimage", Created: v1.Time{Time: epoch}}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = []string{s.entrypoint}
	cf.Config.Env = []string{"PATH=/"}
	return mutate.ConfigFile(img, cf)
}

// layer is the uncompressed layer: each file, executable, owned by root,
// with the directories above it.
func (s imageSpec) layer() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	files := append([]imageFile(nil), s.files...)
	sort.Slice(files, func(i, j int) bool { return files[i].dst < files[j].dst })
	for _, f := range files {
		data, err := os.ReadFile(f.src)
		if err != nil {
			return nil, err
		}
		rel := strings.TrimPrefix(filepath.Clean(f.dst), "/")
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			if dirs[d] {
				break
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o755, Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// tarDir writes the files under dir into the tar file out, sorted, with
// fixed times, through a temporary file renamed into place.
func tarDir(dir, out string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(paths)
	tmp, err := os.CreateTemp(filepath.Dir(out), ".ociimage-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	tw := tar.NewWriter(tmp)
	for _, p := range paths {
		if err := addFile(tw, dir, p); err != nil {
			tmp.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), out)
}

func addFile(tw *tar.Writer, dir, p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(dir, p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, ModTime: epoch})
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: fi.Size(), ModTime: epoch}); err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(tw, f)
	return err
}
