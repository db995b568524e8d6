package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// writeArchive builds the images of s, writes them as an OCI image
// layout in a tar file at out (replaced only once complete), and returns
// the digest of what index.json names: the image, or the index of
// platforms.
func writeArchive(s spec, out string) (v1.Hash, error) {
	idx, err := build(s)
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	digest := im.Manifests[0].Digest

	// go-containerregistry writes the layout as a directory; next to out,
	// so that the rename below stays on one file system.
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".imagebuild-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer os.RemoveAll(tmp)
	dir := filepath.Join(tmp, "layout")
	if _, err := layout.Write(dir, idx); err != nil {
		return v1.Hash{}, fmt.Errorf("writing the OCI layout: %w", err)
	}
	part := filepath.Join(tmp, "archive.tar")
	if err := tarDir(dir, part, s.epoch); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Chmod(part, 0o644); err != nil {
		return v1.Hash{}, err
	}
	if err := os.Rename(part, out); err != nil {
		return v1.Hash{}, err
	}
	return digest, nil
}

// tarDir writes dir's tree to the tar file out: entries in lexical
// order, directories 0755 and files 0644, owned by 0:0, all at mtime.
func tarDir(dir, out string, mtime time.Time) (err error) {
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	// WalkDir visits in lexical order.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime}
		switch {
		case d.IsDir():
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
			return tw.WriteHeader(h)
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return err
			}
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, fi.Size()
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			return copyFile(tw, p)
		default:
			return fmt.Errorf("%s: not a file or directory", p)
		}
	})
	return errors.Join(err, tw.Close())
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
