// Command krewplugin packs the kubectl plugin (kubectl-tiercache) for a
// release: one tar.gz archive per platform, holding the binary and the
// LICENSE, and the krew plugin manifest generated from them (the file a
// krew-index pull request adds as plugins/tiercache.yaml). `make release`
// (hack/release.sh) runs it on the binaries it cross-builds, then runs it
// again with -check on what it wrote. It is tooling, not part of the
// product.
//
//	krewplugin -o bin/release/0.1.0 -version 0.1.0 -license LICENSE \
//		-url https://github.com/tiercache/tiercache/releases/download/v0.1.0 \
//		-platform linux/amd64=bin/linux-amd64/kubectl-tiercache ...
//	krewplugin -check bin/release/0.1.0/tiercache.krew.yaml -platform linux/amd64 ...
//
// Why not GoReleaser, which builds such archives and krew manifests for
// most kubectl plugins: it was tried here (v2.17.0, the newest this
// machine's Go runs). It builds from the Go module proxy, but a cold
// `go install` fetched 310 modules (cloud SDKs, signing, every
// announcer) and took 11 min 37 s on a loaded 2-core machine, for a
// 123 MB binary; and it runs offline in snapshot mode (10.5 s warm for
// the four archives, checksums and krew manifest, reproducible). What
// decided it: the module proxy this project builds from serves every
// GoReleaser version only as a copy that is not an approved release
// (its package list says so, and to prefer another module where one
// fits), and we would use a small part of it: archives and a manifest.
// This command is that part, on the standard library and krew's
// published manifest schema, reproducible like `make image` (the same
// binaries give the same archive bytes, so the same sha256 in the
// manifest), with a -check of the manifest against the archives that
// `make release` runs. docs/development.md, "Releases", records the
// trial.
//
// The archives are named kubectl-tiercache_VERSION_OS_ARCH.tar.gz; every
// entry is owned by 0:0 at SOURCE_DATE_EPOCH (0 when unset), the binary
// 0755 and the LICENSE 0644, and the gzip header carries no name or
// time (default compression: level 9 took three times as long for 1%
// less).
// The manifest is krew.googlecontainertools.github.com/v1alpha2 Plugin
// "tiercache", version "v"+VERSION, one platform per archive selected by
// os and arch, its uri the -url prefix and the archive's name, its sha256
// the archive's.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/version"
)

func main() {
	err := run(os.Args[1:], os.Getenv, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "krewplugin:", err)
		os.Exit(1)
	}
}

// run parses the flags, then packs (or, with -check, checks) the plugin.
func run(args []string, getenv func(string) string, logw io.Writer) error {
	c, err := parseFlags(args, getenv, logw)
	if err != nil {
		return err
	}
	if c.check != "" {
		if err := check(c.check, c.platformNames()); err != nil {
			return fmt.Errorf("%s: %w", c.check, err)
		}
		fmt.Fprintf(logw, "krewplugin: %s matches its archives\n", c.check)
		return nil
	}
	written, err := pack(c)
	if err != nil {
		return err
	}
	for _, p := range written {
		fmt.Fprintf(logw, "krewplugin: wrote %s\n", p)
	}
	return nil
}

// config is one run of the command.
type config struct {
	out       string // the directory the archives and the manifest go to
	version   string // semver, without a leading v
	url       string // the download prefix of the archives, without a trailing /
	license   string // the LICENSE file put into every archive
	platforms []platform
	epoch     time.Time
	// check, when set, is a manifest to check against its archives
	// instead of packing.
	check string
}

func (c config) platformNames() []string {
	names := make([]string, len(c.platforms))
	for i, p := range c.platforms {
		names[i] = p.String()
	}
	return names
}

// platform is an OS/architecture and the plugin binary built for it.
type platform struct {
	os, arch string
	bin      string // empty with -check
}

func (p platform) String() string { return p.os + "/" + p.arch }

type platformsFlag struct {
	list []platform
}

func (f *platformsFlag) String() string { return fmt.Sprint(f.list) }

func (f *platformsFlag) Set(v string) error {
	osArch, bin, hasBin := strings.Cut(v, "=")
	goos, arch, ok := strings.Cut(osArch, "/")
	if !ok || goos == "" || arch == "" || strings.Contains(arch, "/") || (hasBin && bin == "") {
		return fmt.Errorf("%q: want OS/ARCH=BINARY (linux/amd64=bin/linux-amd64/kubectl-tiercache), or OS/ARCH with -check", v)
	}
	for _, p := range f.list {
		if p.os == goos && p.arch == arch {
			return fmt.Errorf("%s given twice", osArch)
		}
	}
	f.list = append(f.list, platform{os: goos, arch: arch, bin: bin})
	return nil
}

// parseFlags turns the command line into a config.
func parseFlags(args []string, getenv func(string) string, logw io.Writer) (config, error) {
	fs := flag.NewFlagSet("krewplugin", flag.ContinueOnError)
	fs.SetOutput(logw)
	var c config
	fs.StringVar(&c.out, "o", "", "the directory to write the archives and "+manifestName+" into (required)")
	fs.StringVar(&c.version, "version", "", "the release's version, semver without a leading v: 0.1.0 (required)")
	fs.StringVar(&c.url, "url", "", "where the archives are downloaded from: the manifest's uri is this, a /, and the archive's name (required)")
	fs.StringVar(&c.license, "license", "", "the LICENSE file to put into every archive (required)")
	fs.StringVar(&c.check, "check", "", "check this manifest against the archives next to it instead of packing: every -platform OS/ARCH selected once, sha256s, bin")
	var platforms platformsFlag
	fs.Var(&platforms, "platform", "OS/ARCH=BINARY: an archive of BINARY for this platform (repeatable; at least one); OS/ARCH with -check")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	c.platforms = platforms.list
	if len(c.platforms) == 0 {
		return config{}, errors.New("-platform: at least one is required")
	}
	if c.check != "" {
		for _, p := range c.platforms {
			if p.bin != "" {
				return config{}, fmt.Errorf("-platform %s=%s: -check takes OS/ARCH only", p, p.bin)
			}
		}
		return c, nil
	}
	switch {
	case c.out == "":
		return config{}, errors.New("-o: required")
	case c.version == "":
		return config{}, errors.New("-version: required")
	case c.url == "":
		return config{}, errors.New("-url: required")
	case c.license == "":
		return config{}, errors.New("-license: required")
	}
	for _, p := range c.platforms {
		if p.bin == "" {
			return config{}, fmt.Errorf("-platform %s: the binary is required (OS/ARCH=BINARY)", p)
		}
	}
	// krew parses "v"+version with the semver parser of
	// k8s.io/apimachinery, and refuses the manifest otherwise.
	if strings.HasPrefix(c.version, "v") {
		return config{}, fmt.Errorf("-version %q: without the leading v (the manifest adds it)", c.version)
	}
	if _, err := version.ParseSemantic(c.version); err != nil {
		return config{}, fmt.Errorf("-version %q: not a semantic version: %w", c.version, err)
	}
	c.url = strings.TrimSuffix(c.url, "/")
	epoch, err := sourceDateEpoch(getenv("SOURCE_DATE_EPOCH"))
	if err != nil {
		return config{}, err
	}
	c.epoch = epoch
	return c, nil
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH (reproducible-builds.org):
// seconds since 1970, the time of every archive entry; empty means 0.
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
