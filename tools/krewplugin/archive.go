package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// binName is the plugin's executable: kubectl finds a plugin by this
// name on PATH, and krew links it there.
const binName = "kubectl-" + pluginName

// archiveName is the file name of one platform's archive.
func archiveName(version string, p platform) string {
	return fmt.Sprintf("%s_%s_%s_%s.tar.gz", binName, version, p.os, p.arch)
}

// member is one file of an archive.
type member struct {
	name string
	mode int64
	data []byte
}

// writeArchive writes the members, in the order given, as a gzipped tar
// at out (replaced only once complete) and returns its sha256 in hex.
// Every entry is owned by 0:0 with no user names, at mtime; the gzip
// header has no name and no time: the same members give the same bytes.
func writeArchive(out string, members []member, mtime time.Time) (sum string, err error) {
	f, err := os.CreateTemp(filepath.Dir(out), ".krewplugin-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	h := sha256.New()
	zw, err := gzip.NewWriterLevel(f, gzip.DefaultCompression)
	if err != nil {
		f.Close()
		return "", err
	}
	tw := tar.NewWriter(zw)
	for _, m := range members {
		hdr := &tar.Header{
			Typeflag: tar.TypeReg,
			Name:     m.name,
			Mode:     m.mode,
			Size:     int64(len(m.data)),
			ModTime:  mtime,
			Format:   tar.FormatUSTAR,
		}
		if err = tw.WriteHeader(hdr); err != nil {
			break
		}
		if _, err = tw.Write(m.data); err != nil {
			break
		}
	}
	err = errors.Join(err, tw.Close(), zw.Close())
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		_, err = f.Seek(0, 0)
	}
	if err == nil {
		_, err = io.Copy(h, f)
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return "", fmt.Errorf("writing %s: %w", out, err)
	}
	if err = os.Rename(f.Name(), out); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
