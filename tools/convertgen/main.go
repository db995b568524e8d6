// Command convertgen writes the conversion from the CacheTier's spec
// (internal/api/v1alpha1) to the sidecar's config model
// (internal/tierconfig) for every field that maps one to one, so that a
// new setting needs no hand-written conversion and no test of its own
// that the conversion carries it. It is tooling, run by hack/generate.sh
// (make generate), not part of the product.
//
// It type-checks both packages from the go command's export data, walks
// the destination struct from the root pair (-root Src=Dst) and pairs
// fields by Go name. A pair converts when the types are identical (a
// copy: values, cloned slices and pointers, DeepCopy for structs that
// have it), are both integers or both strings (a Go conversion), are
// named by a "via" directive (a method of the hand-written converter,
// given the field's config-model path for its error), or are structs,
// pointers to structs or slices of structs that pair in turn (a function
// each). Every other field of either side must be named by a "byhand"
// directive with the reason: convertgen fails on a field that is neither
// converted nor listed, and on a listed field that does not exist, so a
// CacheTier field can never be dropped on the way to the sidecar
// unnoticed.
//
// The directives are comment lines of the -hand file, beside the code
// that does what they say:
//
//	//convertgen:via <src type> <dst type> <converter method>
//	//convertgen:byhand <pkg>.<Type>.<Field> <reason>
//
// Types are written as Go would with package names ("*resource.Quantity",
// "v1alpha1.Duration").
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "convertgen:", err)
		os.Exit(1)
	}
}

// run parses args, generates and writes the output file.
func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("convertgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	src := fs.String("src", "", "import path of the source package (the API types)")
	dst := fs.String("dst", "", "import path of the destination package (the config model)")
	root := fs.String("root", "", "the root pair, SrcType=DstType")
	hand := fs.String("hand", "", "Go file of the output package holding the directives")
	out := fs.String("out", "", "file to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	srcRoot, dstRoot, ok := strings.Cut(*root, "=")
	if *src == "" || *dst == "" || !ok || *hand == "" || *out == "" {
		return errors.New("-src, -dst, -root Src=Dst, -hand and -out are required")
	}
	text, err := os.ReadFile(*hand)
	if err != nil {
		return err
	}
	dirs, err := parseDirectives(string(text))
	if err != nil {
		return fmt.Errorf("%s: %w", *hand, err)
	}
	pkgs, err := load(".", *src, *dst)
	if err != nil {
		return err
	}
	code, err := generate(input{
		src: pkgs[*src], dst: pkgs[*dst], srcRoot: srcRoot, dstRoot: dstRoot,
		pkgName: packageName(string(text)), dirs: dirs,
	})
	if err != nil {
		return err
	}
	return os.WriteFile(*out, code, 0o644)
}
