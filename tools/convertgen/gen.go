package main

import (
	"bytes"
	"errors"
	"fmt"
	"go/format"
	"go/types"
	"reflect"
	"slices"
	"strings"
)

// input is what one generation needs.
type input struct {
	src, dst         *types.Package
	srcRoot, dstRoot string
	pkgName          string
	dirs             directives
}

// pair is a source struct and the destination struct it converts into.
type pair struct{ src, dst *types.Named }

// generator collects the functions of the output and what went wrong.
type generator struct {
	input
	queue   []pair
	queued  map[*types.Named]*types.Named
	used    map[string]bool
	imports map[string]bool
	funcs   []string
	errs    []error
}

// generate returns the formatted output file, or every field that is
// neither converted nor listed.
func generate(in input) ([]byte, error) {
	if in.src == nil || in.dst == nil {
		return nil, errors.New("source or destination package not loaded")
	}
	g := &generator{input: in, queued: map[*types.Named]*types.Named{}, used: map[string]bool{}, imports: map[string]bool{}}
	src, dst := g.named(in.src, in.srcRoot), g.named(in.dst, in.dstRoot)
	if src == nil || dst == nil {
		return nil, errors.Join(g.errs...)
	}
	g.enqueue(src, dst)
	for len(g.queue) > 0 {
		p := g.queue[0]
		g.queue = g.queue[1:]
		g.funcs = append(g.funcs, g.pairFunc(p))
	}
	for key := range g.dirs.byHand {
		if !g.used[key] {
			g.fail("%s is listed //convertgen:byhand but is no field of a converted struct", key)
		}
	}
	if len(g.errs) > 0 {
		slices.SortFunc(g.errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
		return nil, errors.Join(g.errs...)
	}
	return g.file()
}

func (g *generator) fail(format string, args ...any) {
	g.errs = append(g.errs, fmt.Errorf(format, args...))
}

// named looks up a struct type of pkg by name.
func (g *generator) named(pkg *types.Package, name string) *types.Named {
	obj, _ := pkg.Scope().Lookup(name).(*types.TypeName)
	if obj == nil {
		g.fail("%s.%s: no such type", pkg.Name(), name)
		return nil
	}
	n, _ := types.Unalias(obj.Type()).(*types.Named)
	if n == nil {
		g.fail("%s.%s: not a named type", pkg.Name(), name)
	}
	return n
}

// enqueue schedules the function converting src into dst, once.
func (g *generator) enqueue(src, dst *types.Named) {
	if _, ok := g.queued[src]; ok {
		return
	}
	g.queued[src] = dst
	g.queue = append(g.queue, pair{src, dst})
}

// funcName is the converter method of a pair: the source type's name,
// lowerCamel.
func funcName(src *types.Named) string {
	n := src.Obj().Name()
	return strings.ToLower(n[:1]) + n[1:]
}

// key names a field as the byhand directive does: pkg.Type.Field.
func key(t *types.Named, f *types.Var) string {
	return t.Obj().Pkg().Name() + "." + t.Obj().Name() + "." + f.Name()
}

// listed reports whether a field is converted by hand, and marks the
// directive used.
func (g *generator) listed(t *types.Named, f *types.Var) bool {
	k := key(t, f)
	_, ok := g.dirs.byHand[k]
	if ok {
		g.used[k] = true
	}
	return ok
}

// pairFunc writes the function of one pair: a statement per destination
// field, in the destination's order (the order errors come in).
func (g *generator) pairFunc(p pair) string {
	ss, sok := p.src.Underlying().(*types.Struct)
	ds, dok := p.dst.Underlying().(*types.Struct)
	if !sok || !dok {
		g.fail("%s → %s: both must be structs", g.directiveType(p.src), g.directiveType(p.dst))
		return ""
	}
	srcFields := map[string]*types.Var{}
	for f := range ss.Fields() {
		srcFields[f.Name()] = f
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// %s converts %s.%s into %s.%s.\n", funcName(p.src), p.src.Obj().Pkg().Name(), p.src.Obj().Name(), p.dst.Obj().Pkg().Name(), p.dst.Obj().Name())
	fmt.Fprintf(&b, "func (cv *converter) %s(path string, in *%s, out *%s) {\n", funcName(p.src), g.typeString(p.src), g.typeString(p.dst))
	matched := map[string]bool{}
	for i := range ds.NumFields() {
		df := ds.Field(i)
		sf := srcFields[df.Name()]
		if sf != nil {
			matched[sf.Name()] = true
		}
		handDst := g.listed(p.dst, df)
		if sf != nil && (g.listed(p.src, sf) || handDst) || sf == nil && handDst {
			continue
		}
		if sf == nil {
			g.fail("%s: %s has no field of that name; convert it by hand and list it (//convertgen:byhand %s <reason>)", key(p.dst, df), g.directiveType(p.src), key(p.dst, df))
			continue
		}
		g.fieldStmt(&b, p, sf, df, jsonName(ds.Tag(i), df.Name()))
	}
	for f := range ss.Fields() {
		if !matched[f.Name()] && !g.listed(p.src, f) {
			g.fail("%s: %s has no field of that name; convert it by hand and list it (//convertgen:byhand %s <reason>)", key(p.src, f), g.directiveType(p.dst), key(p.src, f))
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// fieldStmt writes the statement that converts one field.
func (g *generator) fieldStmt(b *strings.Builder, p pair, sf, df *types.Var, json string) {
	in, out := "in."+sf.Name(), "out."+df.Name()
	stmt, ok := g.convert(in, out, json, sf.Type(), df.Type())
	if !ok {
		g.fail("%s (%s) → %s (%s): no rule converts these types; convert it by hand and list it (//convertgen:byhand %s <reason>)",
			key(p.src, sf), g.directiveType(sf.Type()), key(p.dst, df), g.directiveType(df.Type()), key(p.src, sf))
		return
	}
	b.WriteString(stmt)
	b.WriteString("\n")
}

// convert returns the statement that converts in (of type st) into out
// (of type dt); json is the field's name in the config-model path.
func (g *generator) convert(in, out, json string, st, dt types.Type) (string, bool) {
	path := fmt.Sprintf("path+%q", json)
	if m, ok := g.via(st, dt); ok {
		return fmt.Sprintf("%s = cv.%s(%s, %s)", out, m, path, in), true
	}
	sp, sIsPtr := st.(*types.Pointer)
	dp, dIsPtr := dt.(*types.Pointer)
	if sIsPtr && dIsPtr {
		if m, ok := g.via(sp.Elem(), dp.Elem()); ok {
			return fmt.Sprintf("if %s != nil {\nv := cv.%s(%s, *%s)\n%s = &v\n}", in, m, path, in, out), true
		}
	}
	if types.Identical(st, dt) {
		return g.copy(in, out, st)
	}
	if sameKind(st, dt) {
		return fmt.Sprintf("%s = %s(%s)", out, g.typeString(dt), in), true
	}
	return g.nested(in, out, json, st, dt)
}

// via is the converter method a directive names for st → dt.
func (g *generator) via(st, dt types.Type) (string, bool) {
	m, ok := g.dirs.via[g.directiveType(st)+"\t"+g.directiveType(dt)]
	return m, ok
}

// copy copies a value of a type both sides share.
func (g *generator) copy(in, out string, t types.Type) (string, bool) {
	switch u := t.Underlying().(type) {
	case *types.Basic:
		return fmt.Sprintf("%s = %s", out, in), true
	case *types.Slice:
		if _, ok := u.Elem().Underlying().(*types.Basic); ok {
			g.imports["slices"] = true
			return fmt.Sprintf("%s = slices.Clone(%s)", out, in), true
		}
	case *types.Pointer:
		if _, ok := u.Elem().Underlying().(*types.Basic); ok {
			return fmt.Sprintf("if %s != nil {\nv := *%s\n%s = &v\n}", in, in, out), true
		}
		if hasDeepCopy(u.Elem()) {
			return fmt.Sprintf("%s = %s.DeepCopy()", out, in), true
		}
	case *types.Struct:
		if hasDeepCopy(t) {
			return fmt.Sprintf("%s.DeepCopyInto(&%s)", in, out), true
		}
	}
	return "", false
}

// nested converts a struct, a pointer to one or a slice of them through
// the function of their pair.
func (g *generator) nested(in, out, json string, st, dt types.Type) (string, bool) {
	dn := namedStruct(dt)
	if dn == nil {
		return g.nestedSlice(in, out, json, st, dt)
	}
	if sn := namedStruct(st); sn != nil {
		g.enqueue(sn, dn)
		return fmt.Sprintf("cv.%s(path+%q, &%s, &%s)", funcName(sn), json+".", in, out), true
	}
	if sp, ok := st.(*types.Pointer); ok {
		if sn := namedStruct(sp.Elem()); sn != nil {
			g.enqueue(sn, dn)
			return fmt.Sprintf("if %s != nil {\ncv.%s(path+%q, %s, &%s)\n}", in, funcName(sn), json+".", in, out), true
		}
	}
	return "", false
}

// nestedSlice converts a slice of structs element by element; the
// elements' paths carry their index ("rules[2].").
func (g *generator) nestedSlice(in, out, json string, st, dt types.Type) (string, bool) {
	ss, sok := st.(*types.Slice)
	ds, dok := dt.(*types.Slice)
	if !sok || !dok {
		return "", false
	}
	sn, dn := namedStruct(ss.Elem()), namedStruct(ds.Elem())
	if sn == nil || dn == nil {
		return "", false
	}
	g.enqueue(sn, dn)
	g.imports["fmt"] = true
	return fmt.Sprintf("for i := range %s {\nvar v %s\ncv.%s(fmt.Sprintf(\"%%s%s[%%d].\", path, i), &%s[i], &v)\n%s = append(%s, v)\n}",
		in, g.typeString(dn), funcName(sn), json, in, out, out), true
}

// namedStruct is t as a named struct type, or nil.
func namedStruct(t types.Type) *types.Named {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return nil
	}
	if _, ok := n.Underlying().(*types.Struct); !ok {
		return nil
	}
	return n
}

// hasDeepCopy reports whether *t has controller-gen's DeepCopyInto.
func hasDeepCopy(t types.Type) bool {
	n := namedStruct(t)
	if n == nil {
		return false
	}
	obj, _, _ := types.LookupFieldOrMethod(types.NewPointer(n), true, n.Obj().Pkg(), "DeepCopyInto")
	_, ok := obj.(*types.Func)
	return ok
}

// sameKind reports whether a Go conversion carries st into dt without
// changing what it means: integer to integer, string to string.
func sameKind(st, dt types.Type) bool {
	sb, sok := st.Underlying().(*types.Basic)
	db, dok := dt.Underlying().(*types.Basic)
	if !sok || !dok {
		return false
	}
	ints := types.IsInteger
	return sb.Info()&ints != 0 && db.Info()&ints != 0 ||
		sb.Info()&types.IsString != 0 && db.Info()&types.IsString != 0
}

// jsonName is a field's name in the JSON form (and so in the
// config-model path of its errors).
func jsonName(tag, field string) string {
	name, _, _ := strings.Cut(reflect.StructTag(tag).Get("json"), ",")
	if name == "" {
		return field
	}
	return name
}

// typeString writes t as the output file refers to it, recording the
// imports it needs.
func (g *generator) typeString(t types.Type) string {
	return types.TypeString(t, func(p *types.Package) string {
		g.imports[p.Path()] = true
		return p.Name()
	})
}

// directiveType writes t as directives do: package names, no imports.
func (g *generator) directiveType(t types.Type) string {
	return types.TypeString(t, func(p *types.Package) string { return p.Name() })
}

// file assembles and formats the output.
func (g *generator) file() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by tools/convertgen. DO NOT EDIT.\n\n")
	fmt.Fprintf(&b, "package %s\n\nimport (\n", g.pkgName)
	paths := make([]string, 0, len(g.imports))
	for p := range g.imports {
		paths = append(paths, p)
	}
	// The standard library first, then the rest, as goimports groups them.
	std := func(p string) bool { return !strings.Contains(strings.Split(p, "/")[0], ".") }
	slices.SortFunc(paths, func(a, b string) int {
		if std(a) != std(b) {
			if std(a) {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for i, p := range paths {
		if i > 0 && std(paths[i-1]) != std(p) {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%q\n", p)
	}
	b.WriteString(")\n")
	for _, f := range g.funcs {
		b.WriteString("\n" + f)
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the output: %w\n%s", err, b.Bytes())
	}
	return out, nil
}
