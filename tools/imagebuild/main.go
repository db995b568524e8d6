// Command imagebuild writes Tiercache's container images as OCI image
// archives, without a container engine: `make image` runs it on the
// static binaries of `make build-release` (and on the demo origin's) to
// make the image the Dockerfile describes, so that a machine with no
// Docker (CI, the real-node e2e) can build, test and push it. It is
// tooling, not part of the product.
//
// An image is two layers. The first is the same for every image and
// platform: what Tiercache uses of distroless/static:nonroot, the
// Dockerfile's base (the passwd and group entries of root, nobody and
// nonroot 65532, nsswitch.conf, a world-writable /tmp, nonroot's home,
// and the CA certificates, taken from Go's pinned copy of the Mozilla NSS
// roots (golang.org/x/crypto/x509roots/fallback/bundle), so that every
// machine writes the same bytes whatever its own certificates). The
// second holds the commands, one file per -file flag. The config runs as
// 65532:65532 with the entrypoint given; no time zone data is included
// (no Tiercache command reads a zone).
//
// The output is reproducible: every time in it is SOURCE_DATE_EPOCH
// (0 when unset), every tar entry is sorted, owned by 0:0 or 65532:65532
// with fixed modes, and the same inputs give byte-identical archives, so
// the same digests. The archive is an OCI image layout in a tar file
// (oci-layout, index.json, blobs/sha256/...), the form `ctr images
// import`, `kind load image-archive` and `skopeo copy oci-archive:` read;
// index.json names the image in the io.containerd.image.name annotation
// (the full reference) and org.opencontainers.image.ref.name (its tag).
// One -platform gives an index.json that points at that platform's image
// manifest; several give one image index with a manifest per platform,
// as a multi-platform push needs.
//
// With -bare the image is one layer, the -file commands alone, run as
// root with PATH=/: how hack/node-tools.sh packs the real-node harness's
// pause and CoreDNS images (CoreDNS binds port 53, and neither reads
// anything of the base), and how test/testnode packs a test's command.
//
//	imagebuild -bare -o pause.tar -name tiercache.local/pause:1 \
//		-platform linux/amd64=bin -file /pause=pause -entrypoint /pause
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

func main() {
	err := run(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

// run parses the flags, builds the images and writes the archive.
func run(args []string, getenv func(string) string, logw io.Writer) error {
	s, out, err := parseFlags(args, getenv, logw)
	if err != nil {
		return err
	}
	digest, err := writeArchive(s, out)
	if err != nil {
		return err
	}
	fmt.Fprintf(logw, "imagebuild: wrote %s: %s %s\n", out, s.ref.Name(), digest)
	return nil
}

// spec is one image, for one or more platforms.
type spec struct {
	ref        name.Tag
	platforms  []platform
	files      []file   // sorted by path in the image
	entrypoint string   // an absolute path in the image, one of files
	args       []string // the config's Cmd: default arguments
	epoch      time.Time
	// annotations of every image manifest (org.opencontainers.image.*).
	annotations map[string]string
	// bare leaves out the base layer: the commands run as root.
	bare bool
}

// platform is an OS/architecture and the directory its commands come from.
type platform struct {
	os, arch string
	dir      string
}

func (p platform) String() string { return p.os + "/" + p.arch }

// file is a command: dst in the image, src the name of the file in each
// platform's directory.
type file struct {
	dst, src string
}

type platformsFlag []platform

func (f *platformsFlag) String() string { return fmt.Sprint(*f) }

func (f *platformsFlag) Set(v string) error {
	osArch, dir, ok := strings.Cut(v, "=")
	goos, arch, ok2 := strings.Cut(osArch, "/")
	if !ok || !ok2 || goos == "" || arch == "" || dir == "" || strings.Contains(arch, "/") {
		return fmt.Errorf("%q: want OS/ARCH=DIR (linux/amd64=bin/image/linux-amd64)", v)
	}
	for _, p := range *f {
		if p.os == goos && p.arch == arch {
			return fmt.Errorf("%s given twice", osArch)
		}
	}
	*f = append(*f, platform{os: goos, arch: arch, dir: dir})
	return nil
}

type filesFlag []file

func (f *filesFlag) String() string { return fmt.Sprint(*f) }

func (f *filesFlag) Set(v string) error {
	dst, src, ok := strings.Cut(v, "=")
	if !ok || src == "" || strings.Contains(src, "/") || !path.IsAbs(dst) || path.Clean(dst) != dst || path.Dir(dst) != "/" {
		return fmt.Errorf("%q: want /NAME=FILE: a file of each platform's directory, copied to the image's root", v)
	}
	if baseDirs[strings.TrimPrefix(dst, "/")] {
		return fmt.Errorf("%q: %s is a directory of the base layer", v, dst)
	}
	for _, e := range *f {
		if e.dst == dst {
			return fmt.Errorf("%s given twice", dst)
		}
	}
	*f = append(*f, file{dst: dst, src: src})
	return nil
}

type argsFlag []string

func (f *argsFlag) String() string { return fmt.Sprint(*f) }

func (f *argsFlag) Set(v string) error { *f = append(*f, v); return nil }

// parseFlags turns the command line into a spec and the output path.
func parseFlags(args []string, getenv func(string) string, logw io.Writer) (spec, string, error) {
	fs := flag.NewFlagSet("imagebuild", flag.ContinueOnError)
	fs.SetOutput(logw)
	out := fs.String("o", "", "the OCI image archive to write (required)")
	ref := fs.String("name", "", "the image's reference, with a tag: ghcr.io/tiercache/tiercache:0.1.0 (required)")
	entrypoint := fs.String("entrypoint", "", "the command the image runs: one of the -file paths (required)")
	source := fs.String("source", "", "org.opencontainers.image.source of the manifests (optional)")
	bare := fs.Bool("bare", false, "one layer, the -file commands alone, run as root with PATH=/: no distroless base layer")
	var platforms platformsFlag
	fs.Var(&platforms, "platform", "OS/ARCH=DIR: build for this platform, its commands from DIR (repeatable; at least one)")
	var files filesFlag
	fs.Var(&files, "file", "/NAME=FILE: copy FILE of each platform's DIR to /NAME, mode 0755 (repeatable; at least one)")
	var cmdArgs argsFlag
	fs.Var(&cmdArgs, "arg", "a default argument of the entrypoint, the config's Cmd (repeatable)")
	if err := fs.Parse(args); err != nil {
		return spec{}, "", err
	}
	if fs.NArg() > 0 {
		return spec{}, "", fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch {
	case *out == "":
		return spec{}, "", errors.New("-o: required")
	case *ref == "":
		return spec{}, "", errors.New("-name: required")
	case len(platforms) == 0:
		return spec{}, "", errors.New("-platform: at least one is required")
	case len(files) == 0:
		return spec{}, "", errors.New("-file: at least one is required")
	}
	// A full reference with an explicit tag: it is what the runtime will
	// know the image by, so no defaults are filled in silently.
	tag, err := name.NewTag(*ref, name.StrictValidation)
	if err != nil {
		return spec{}, "", fmt.Errorf("-name %q: %w", *ref, err)
	}
	sort.Slice(files, func(i, j int) bool { return files[i].dst < files[j].dst })
	found := false
	for _, f := range files {
		found = found || f.dst == *entrypoint
	}
	if !found {
		return spec{}, "", fmt.Errorf("-entrypoint %q: must be one of the -file paths", *entrypoint)
	}
	epoch, err := sourceDateEpoch(getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return spec{}, "", err
	}
	anns := map[string]string{
		"org.opencontainers.image.version": tag.TagStr(),
		"org.opencontainers.image.created": epoch.Format(time.RFC3339),
	}
	if *source != "" {
		anns["org.opencontainers.image.source"] = *source
	}
	return spec{
		ref:         tag,
		platforms:   platforms,
		files:       files,
		entrypoint:  *entrypoint,
		args:        cmdArgs,
		epoch:       epoch,
		annotations: anns,
		bare:        *bare,
	}, *out, nil
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org):
// seconds since 1970, the time of every entry and of the image; empty
// means 0.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	secs, err := strconv.ParseInt(v, 10, 64)
	if err != nil || secs < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want a number of seconds since 1970", v)
	}
	return time.Unix(secs, 0).UTC(), nil
}
