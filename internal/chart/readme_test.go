package chart

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// valueDoc is one documented value: the "# -- ..." comment block right
// above its key in values.yaml.
type valueDoc struct {
	path, desc string
	def        any
}

var valuesKey = regexp.MustCompile(`^(\s*)([A-Za-z0-9_]+):`)

// valuesDocs reads the documented values of values.yaml, in file order.
// A comment starting with "-- " documents the key that follows it; lines
// inside lists are not keys of the values tree and are skipped.
func valuesDocs(t *testing.T, src []byte) ([]valueDoc, map[string]any) {
	t.Helper()
	var values map[string]any
	if err := yaml.Unmarshal(src, &values); err != nil {
		t.Fatal(err)
	}
	type level struct {
		indent int
		key    string
	}
	var (
		stack   []level
		comment []string
		docs    []valueDoc
	)
	for _, l := range strings.Split(string(src), "\n") {
		s := strings.TrimSpace(l)
		switch {
		case s == "":
			comment = nil
			continue
		case strings.HasPrefix(s, "#"):
			c := strings.TrimSpace(strings.TrimPrefix(s, "#"))
			if rest, ok := strings.CutPrefix(c, "-- "); ok {
				comment = []string{rest}
			} else if comment != nil {
				comment = append(comment, c)
			}
			continue
		}
		m := valuesKey.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		var keys []string
		for _, lv := range stack {
			keys = append(keys, lv.key)
		}
		keys = append(keys, m[2])
		stack = append(stack, level{indent, m[2]})
		def, ok := lookupValue(values, keys)
		if !ok {
			comment = nil
			continue // a key inside a list item
		}
		if comment != nil {
			docs = append(docs, valueDoc{path: strings.Join(keys, "."), desc: strings.Join(comment, " "), def: def})
		}
		comment = nil
	}
	return docs, values
}

func lookupValue(values map[string]any, keys []string) (any, bool) {
	var v any = values
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// leaves lists the paths of values that are not maps with keys (scalars,
// lists and empty maps), sorted.
func leaves(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var out []string
	for k, c := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, leaves(p, c)...)
	}
	sort.Strings(out)
	return out
}

// valuesTable renders the README table of the documented values.
func valuesTable(docs []valueDoc) string {
	esc := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;")
	var b strings.Builder
	b.WriteString("| Key | Default | Description |\n|---|---|---|\n")
	for _, d := range docs {
		def, _ := json.Marshal(d.def)
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", d.path, strings.ReplaceAll(string(def), "|", `\|`), esc.Replace(d.desc))
	}
	return b.String()
}

// TestReadmeValues: every value in values.yaml is documented (itself or a
// parent carries a "# -- " comment), and the README's values table is the
// one generated from values.yaml (-update rewrites it).
func TestReadmeValues(t *testing.T) {
	dir := chartDir(t)
	src, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	docs, values := valuesDocs(t, src)
	documented := map[string]bool{}
	for _, d := range docs {
		documented[d.path] = true
	}
	for _, leaf := range leaves("", values) {
		ok := false
		for p := leaf; p != ""; {
			if documented[p] {
				ok = true
				break
			}
			i := strings.LastIndex(p, ".")
			if i < 0 {
				break
			}
			p = p[:i]
		}
		if !ok {
			t.Errorf("values.yaml: %s has no \"# -- \" comment (on it or a parent)", leaf)
		}
	}

	readmePath := filepath.Join(dir, "README.md")
	readme, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- values:begin -->\n", "<!-- values:end -->"
	before, rest, ok1 := strings.Cut(string(readme), begin)
	current, after, ok2 := strings.Cut(rest, end)
	if !ok1 || !ok2 {
		t.Fatalf("README.md lacks the %q ... %q markers", strings.TrimSpace(begin), end)
	}
	want := valuesTable(docs)
	if current == want {
		return
	}
	if *update {
		if err := os.WriteFile(readmePath, []byte(before+begin+want+end+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("charts/tiercache/README.md's values table is out of date: go test ./internal/chart -run TestReadmeValues -update")
}
