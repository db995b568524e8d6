package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dstSrc is a config model: a size, a duration, a struct shared with
// the API by alias (with controller-gen's DeepCopyInto), nested structs.
const dstSrc = `package dst

type Size int64
type Duration int64

type Shared struct{ Names []string }

func (in *Shared) DeepCopyInto(out *Shared) { *out = *in }

type Config struct {
	L1     L1      ` + "`json:\"l1\"`" + `
	Rules  []Rule  ` + "`json:\"rules\"`" + `
	Shared Shared  ` + "`json:\"shared\"`" + `
	On     *bool   ` + "`json:\"on,omitempty\"`" + `
	Mode   string  ` + "`json:\"mode\"`" + `
	Secret string  ` + "`json:\"secret\"`" + `
}

type L1 struct {
	MaxSize Size ` + "`json:\"maxSize\"`" + `
	Shards  int  ` + "`json:\"shards\"`" + `
}

type Rule struct {
	TTL  *Duration ` + "`json:\"ttl\"`" + `
	Tags []string  ` + "`json:\"tags\"`" + `
}
`

// srcSrc is the API: its own Quantity and Duration, the shared type by
// alias, an optional section, a named string and a field of its own.
const srcSrc = `package src

import "example.com/dst"

type Quantity struct{ v int64 }
type Duration string
type Mode string
type Shared = dst.Shared

type Spec struct {
	L1     *L1Spec
	Rules  []Rule
	Shared Shared
	On     *bool
	Mode   Mode
	Pod    string
}

type L1Spec struct {
	MaxSize *Quantity
	Shards  int32
}

type Rule struct {
	TTL  *Duration
	Tags []string
}
`

const directivesText = `package render

//convertgen:via src.Duration dst.Duration duration
//convertgen:via *src.Quantity dst.Size size
//convertgen:byhand src.Spec.Pod the pod's shape
//convertgen:byhand dst.Config.Secret a secret value
`

// check type-checks the test config model and src as the API over it.
func check(t *testing.T, src string) input {
	t.Helper()
	fset := token.NewFileSet()
	typecheck := func(path, text string, imp types.Importer) *types.Package {
		f, err := parser.ParseFile(fset, path+".go", text, 0)
		if err != nil {
			t.Fatal(err)
		}
		pkg, err := (&types.Config{Importer: imp}).Check(path, fset, []*ast.File{f}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pkg
	}
	dst := typecheck("example.com/dst", dstSrc, nil)
	srcPkg := typecheck("example.com/src", src, importerFunc(func(path string) (*types.Package, error) {
		if path == dst.Path() {
			return dst, nil
		}
		return nil, fmt.Errorf("no package %s", path)
	}))
	return input{src: srcPkg, dst: dst, srcRoot: "Spec", dstRoot: "Config", pkgName: "render"}
}

type importerFunc func(string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }

func directivesOf(t *testing.T, text string) directives {
	t.Helper()
	d, err := parseDirectives(text)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestFieldsThatMapOneToOneAreConverted(t *testing.T) {
	in := check(t, srcSrc)
	in.dirs = directivesOf(t, directivesText)
	out, err := generate(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		// an optional section: a function of its own, when set
		"if in.L1 != nil {\n\t\tcv.l1Spec(path+\"l1.\", in.L1, &out.L1)",
		// a list of structs: element by element, the index in the path
		"cv.rule(fmt.Sprintf(\"%srules[%d].\", path, i), &in.Rules[i], &v)",
		// a shared type: its deep copy
		"in.Shared.DeepCopyInto(&out.Shared)",
		// a shared pointer and a list of values: copied
		"v := *in.On", "out.Tags = slices.Clone(in.Tags)",
		// a named string and a narrower integer: a Go conversion
		"out.Mode = string(in.Mode)", "out.Shards = int(in.Shards)",
		// via: the converter's method, given the config-model path
		"out.MaxSize = cv.size(path+\"maxSize\", in.MaxSize)",
		"v := cv.duration(path+\"ttl\", *in.TTL)",
	} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
	for _, listed := range []string{"Pod", "Secret"} {
		if bytes.Contains(out, []byte("."+listed)) {
			t.Errorf("the output converts %s, which is listed byhand:\n%s", listed, out)
		}
	}
}

func TestAFieldNeitherConvertedNorListedFails(t *testing.T) {
	tests := map[string]struct {
		src, directives, want string
	}{
		"a new API field without a config field": {
			src:        strings.Replace(srcSrc, "Pod    string", "Pod    string\n\tNew bool", 1),
			directives: directivesText,
			want:       "src.Spec.New: dst.Config has no field of that name",
		},
		"a config field without an API field": {
			src:        srcSrc,
			directives: strings.Replace(directivesText, "//convertgen:byhand dst.Config.Secret a secret value\n", "", 1),
			want:       "dst.Config.Secret: src.Spec has no field of that name",
		},
		"a field whose types no rule converts": {
			src:        strings.Replace(srcSrc, "Shards  int32", "Shards  float64", 1),
			directives: directivesText,
			want:       "src.L1Spec.Shards (float64) → dst.L1.Shards (int): no rule converts these types",
		},
		"a type without its via directive": {
			src:        srcSrc,
			directives: strings.Replace(directivesText, "//convertgen:via src.Duration dst.Duration duration\n", "", 1),
			want:       "src.Rule.TTL (*src.Duration) → dst.Rule.TTL (*dst.Duration): no rule converts these types",
		},
		"a listed field that does not exist": {
			src:        srcSrc,
			directives: directivesText + "//convertgen:byhand src.Spec.Gone it was removed\n",
			want:       "src.Spec.Gone is listed //convertgen:byhand but is no field of a converted struct",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			in := check(t, tt.src)
			in.dirs = directivesOf(t, tt.directives)
			out, err := generate(in)
			if err == nil {
				t.Fatalf("generated without an error:\n%s", out)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want it to say %q", err, tt.want)
			}
		})
	}
}

func TestBadDirectivesAreRefused(t *testing.T) {
	for name, text := range map[string]string{
		"via without a method":  "package p\n//convertgen:via a.B c.D\n",
		"byhand without reason": "package p\n//convertgen:byhand a.B.C\n",
		"byhand not a field":    "package p\n//convertgen:byhand a.B why\n",
		"unknown verb":          "package p\n//convertgen:skip a.B.C why\n",
		"listed twice":          "package p\n//convertgen:byhand a.B.C why\n//convertgen:byhand a.B.C why\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parseDirectives(text); err == nil {
				t.Errorf("%q was accepted", text)
			}
		})
	}
}

// TestTheRenderConversionIsCurrent generates the operator's conversion
// from the real packages (as hack/generate.sh does) and expects the
// committed file.
func TestTheRenderConversionIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	hand := filepath.Join(root, "internal", "operator", "render", "convert.go")
	out := filepath.Join(t.TempDir(), "out.go")
	err := run([]string{
		"-src", "github.com/tiercache/tiercache/internal/api/v1alpha1",
		"-dst", "github.com/tiercache/tiercache/internal/tierconfig",
		"-root", "CacheTierSpec=Config", "-hand", hand, "-out", out,
	}, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(root, "internal", "operator", "render", "zz_generated.convert.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("internal/operator/render/zz_generated.convert.go is stale: run make generate")
	}
}
