package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
)

// load type-checks the packages at paths from the export data the go
// command writes for them (go list -export), run in dir.
func load(dir string, paths ...string) (map[string]*types.Package, error) {
	args := append([]string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}, paths...)
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -export: %w\n%s", err, stderr.String())
	}
	exports := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(line, "\t")
		exports[path] = file
	}
	imp := importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file := exports[path]
		if file == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
	pkgs := map[string]*types.Package{}
	for _, p := range paths {
		pkg, err := imp.Import(p)
		if err != nil {
			return nil, err
		}
		pkgs[p] = pkg
	}
	return pkgs, nil
}

// directives are what the -hand file says.
type directives struct {
	// via: "src type\tdst type" → the converter method between them.
	via map[string]string
	// byHand: "pkg.Type.Field" → why it is converted by hand.
	byHand map[string]string
}

// parseDirectives reads the //convertgen: lines of a Go file's comments.
func parseDirectives(src string) (directives, error) {
	d := directives{via: map[string]string{}, byHand: map[string]string{}}
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.ParseComments)
	if err != nil {
		return d, err
	}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if err := d.add(c); err != nil {
				return d, err
			}
		}
	}
	return d, nil
}

// add records one comment if it is a directive.
func (d directives) add(c *ast.Comment) error {
	rest, ok := strings.CutPrefix(c.Text, "//convertgen:")
	if !ok {
		return nil
	}
	verb, rest, _ := strings.Cut(rest, " ")
	fields := strings.Fields(rest)
	switch {
	case verb == "via" && len(fields) == 3:
		d.via[fields[0]+"\t"+fields[1]] = fields[2]
	case verb == "byhand" && len(fields) >= 2 && strings.Count(fields[0], ".") == 2:
		if _, dup := d.byHand[fields[0]]; dup {
			return fmt.Errorf("%s is listed twice", fields[0])
		}
		d.byHand[fields[0]] = strings.Join(fields[1:], " ")
	default:
		return fmt.Errorf("bad directive %q: want //convertgen:via <src type> <dst type> <method> or //convertgen:byhand <pkg>.<Type>.<Field> <reason>", c.Text)
	}
	return nil
}

// packageName is the package clause of a Go file.
func packageName(src string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", src, parser.PackageClauseOnly)
	if err != nil {
		return ""
	}
	return f.Name.Name
}
