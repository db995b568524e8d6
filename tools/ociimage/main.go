// Command ociimage packs files into a single-layer OCI image archive (an
// OCI image layout in a tar file) that `ctr images import` loads and tags
// from its io.containerd.image.name annotation: how test/testnode and
// hack/node-tools.sh make images without Docker. It is tooling, not part of
// the product. The same inputs give the same archive (fixed times, sorted
// entries), so digests are reproducible.
//
//	ociimage -o pause.tar -name tiercache.local/pause:1 -file bin/pause:/pause -entrypoint /pause
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}

// fileFlags collects -file SRC:DST pairs.
type fileFlags []imageFile

func (f *fileFlags) String() string { return fmt.Sprint(*f) }

func (f *fileFlags) Set(v string) error {
	src, dst, ok := strings.Cut(v, ":")
	if !ok || src == "" || !strings.HasPrefix(dst, "/") {
		return fmt.Errorf("want SRC:/DST, got %q", v)
	}
	*f = append(*f, imageFile{src: src, dst: dst})
	return nil
}

func run(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("ociimage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var spec imageSpec
	var files fileFlags
	fs.StringVar(&spec.out, "o", "", "the archive to write")
	fs.StringVar(&spec.name, "name", "", "the image's name and tag (tiercache.local/NAME:TAG)")
	fs.StringVar(&spec.entrypoint, "entrypoint", "", "the entrypoint, an absolute path in the image")
	fs.Var(&files, "file", "SRC:/DST, a file to put into the image, executable (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	spec.files = files
	if err := spec.validate(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return spec.write()
}
