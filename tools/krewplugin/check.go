package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// check holds the manifest at p to the archives next to it, as krew
// would use them: it is a valid krew manifest; each of want (OS/ARCH) is
// selected by exactly one platform and no platform selects anything
// else; each platform's archive, named by the last part of its uri, has
// the sha256 the manifest gives; and installing it (its files copied, as
// krew does) gives an executable bin.
func check(p string, want []string) error {
	m, err := readManifest(p)
	if err != nil {
		return err
	}
	used := make([]bool, len(m.Spec.Platforms))
	for _, w := range want {
		goos, arch, _ := strings.Cut(w, "/")
		var matched []int
		for i, pl := range m.Spec.Platforms {
			ok, err := selects(pl.Selector, goos, arch)
			if err != nil {
				return fmt.Errorf("spec.platforms[%d].selector: %w", i, err)
			}
			if ok {
				matched = append(matched, i)
				used[i] = true
			}
		}
		if len(matched) != 1 {
			return fmt.Errorf("%s is selected by %d platforms (%v), want 1", w, len(matched), matched)
		}
	}
	if i := slices.Index(used, false); i >= 0 {
		return fmt.Errorf("spec.platforms[%d] selects none of %v", i, want)
	}
	for i, pl := range m.Spec.Platforms {
		if err := checkArchive(filepath.Dir(p), pl); err != nil {
			return fmt.Errorf("spec.platforms[%d]: %w", i, err)
		}
	}
	return nil
}

// selects reports whether sel matches a machine's os and arch labels,
// with the selector semantics krew uses (k8s.io/apimachinery labels).
func selects(sel *metav1.LabelSelector, goos, arch string) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return false, err
	}
	return s.Matches(labels.Set{"os": goos, "arch": arch}), nil
}

// checkArchive checks one platform's archive, found in dir.
func checkArchive(dir string, pl krewPlatform) error {
	u, err := url.Parse(pl.URI)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("uri %q: want an https URL", pl.URI)
	}
	name := path.Base(u.Path)
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("uri %q: %w", pl.URI, err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != pl.Sha256 {
		return fmt.Errorf("%s: sha256 %s, the manifest says %s", name, got, pl.Sha256)
	}
	entries, err := readArchive(b)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// krew copies each file operation's from (here a name at the
	// archive's root) to its to (here the installation's root); without
	// files it copies everything.
	installed := entries
	if pl.Files != nil {
		installed = map[string]*tar.Header{}
		for _, f := range pl.Files {
			h, ok := entries[f.From]
			if !ok {
				return fmt.Errorf("%s: files: %s is not in the archive", name, f.From)
			}
			if f.To != "." {
				return fmt.Errorf("%s: files: %s to %s: this check knows installs to . only", name, f.From, f.To)
			}
			installed[f.From] = h
		}
	}
	h, ok := installed[pl.Bin]
	switch {
	case !ok:
		return fmt.Errorf("%s: bin %s is not installed from the archive", name, pl.Bin)
	case h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0:
		return fmt.Errorf("%s: bin %s is not an executable file (mode %o)", name, pl.Bin, h.Mode)
	}
	return nil
}

// readArchive reads a tar.gz's headers, by name.
func readArchive(b []byte) (map[string]*tar.Header, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	entries := map[string]*tar.Header{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return entries, nil
		}
		if err != nil {
			return nil, err
		}
		entries[path.Clean(h.Name)] = h
	}
}
