package main

import (
	"archive/tar"
	"bytes"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// nonroot is distroless' nonroot user and group, the image's USER: the
// uid the chart and the injected sidecar run as (runAsNonRoot needs it
// numeric).
const nonroot = 65532

// entry is one tar entry of a layer: name is relative to the root, and
// a directory's ends in "/".
type entry struct {
	name     string
	mode     int64 // permission bits, with the sticky bit for /tmp
	uid, gid int
	data     []byte
}

func (e entry) isDir() bool { return strings.HasSuffix(e.name, "/") }

// baseDirs are the top-level directories of the base layer; no command
// may take their names.
var baseDirs = map[string]bool{"etc": true, "home": true, "tmp": true}

// distroless/static's passwd and group, trimmed to what a program may
// look up: root, nobody and nonroot.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
	// Go's resolver reads hosts' order from here (files, then DNS, also
	// without the file; it is here for any other reader).
	nsswitch = "passwd: files\ngroup: files\nhosts: files dns\n"
)

// caBundlePath is where distroless (and Debian, and Go's crypto/x509 on
// Linux) keep the CA bundle; SSL_CERT_FILE names it too.
const caBundlePath = "etc/ssl/certs/ca-certificates.crt"

// baseEntries is the first layer of every image: the part of
// distroless/static:nonroot that Tiercache's commands use.
func baseEntries() []entry {
	return []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte(nsswitch)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: caBundlePath, mode: 0o644, data: caBundle()},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot, gid: nonroot},
		{name: "tmp/", mode: 0o1777},
	}
}

// caBundle is the Mozilla NSS roots of golang.org/x/crypto's
// x509roots/fallback, as PEM, in the bundle's order: pinned by go.sum,
// so the layer is the same on every machine and changes only with that
// module's version. Roots that NSS trusts only for certificates issued
// before a date are left out: a PEM file cannot carry that constraint,
// and without it they would be trusted for everything.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		// Encoding into a bytes.Buffer cannot fail.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// commandEntries reads the commands of one platform: each -file from
// the platform's directory, at the image's root, 0755, owned by root
// (as Docker's COPY without --chown leaves them).
func commandEntries(p platform, files []file) ([]entry, error) {
	var es []entry
	for _, f := range files {
		src := filepath.Join(p.dir, f.src)
		fi, err := os.Stat(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s: %s is not a regular file", p, src)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		es = append(es, entry{name: strings.TrimPrefix(f.dst, "/"), mode: 0o755, data: data})
	}
	return es, nil
}

// layerTar writes entries as an uncompressed tar, sorted by name, each
// with the time given and nothing taken from the machine (no user
// names, no access or change times), so equal entries give equal bytes.
func layerTar(entries []entry, mtime time.Time) ([]byte, error) {
	es := append([]entry(nil), entries...)
	sort.Slice(es, func(i, j int) bool { return es[i].name < es[j].name })
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i, e := range es {
		if i > 0 && es[i-1].name == e.name {
			return nil, fmt.Errorf("%s: in the layer twice", e.name)
		}
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime, // whole seconds: no PAX records
		}
		if e.isDir() {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
