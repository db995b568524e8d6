package v1alpha1_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

var update = flag.Bool("update", false, "rewrite docs/cachetier-reference.md from the CRD")

// TestReferenceIsGeneratedFromTheCRD keeps docs/cachetier-reference.md
// equal to what the CRD in config/crd says: every field, its type, its
// default, its validation and its description. Run with -update after
// `make generate`.
func TestReferenceIsGeneratedFromTheCRD(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "config", "crd", "tiercache.io_cachetiers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatal(err)
	}
	got := reference(crd)
	path := filepath.Join(root, "docs", "cachetier-reference.md")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run: go test ./internal/api/v1alpha1 -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/cachetier-reference.md is stale: run `go test ./internal/api/v1alpha1 -update` and commit it")
	}
}

func reference(crd apiextv1.CustomResourceDefinition) []byte {
	var b bytes.Buffer
	b.WriteString("# CacheTier reference\n\n")
	b.WriteString("<!-- Generated from config/crd by `go test ./internal/api/v1alpha1 -update`; do not edit. -->\n\n")
	v := crd.Spec.Versions[0]
	fmt.Fprintf(&b, "`%s/%s`, kind `%s`, namespaced, short name `%s`. ", crd.Spec.Group, v.Name, crd.Spec.Names.Kind, strings.Join(crd.Spec.Names.ShortNames, "`, `"))
	b.WriteString("[operator.md](operator.md) explains how the operator uses it; `kubectl explain ct.spec` shows the same text.\n\n")
	b.WriteString("| field | type | default | validation | description |\n|---|---|---|---|---|\n")
	schema := v.Schema.OpenAPIV3Schema
	for _, top := range []string{"spec", "status"} {
		walk(&b, top, schema.Properties[top], false)
	}
	return b.Bytes()
}

func walk(b *bytes.Buffer, path string, s apiextv1.JSONSchemaProps, required bool) {
	fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s |\n", path, typeOf(s), defaultOf(s), rules(s, required), cell(s.Description))
	props := s.Properties
	prefix := path + "."
	if s.Type == "array" && s.Items != nil && s.Items.Schema != nil {
		props = s.Items.Schema.Properties
		prefix = path + "[]."
		s = *s.Items.Schema
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	sort.Strings(names)
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	// Kubernetes' own types (resources, secret selectors) are documented
	// by Kubernetes; list their first level only.
	if strings.Contains(path, "resources") && path != "spec.sidecar.resources" {
		return
	}
	for _, n := range names {
		walk(b, prefix+n, props[n], req[n])
	}
}

func typeOf(s apiextv1.JSONSchemaProps) string {
	switch {
	case s.XIntOrString:
		return "quantity"
	case s.Type == "array" && s.Items != nil && s.Items.Schema != nil:
		return "[]" + s.Items.Schema.Type
	case s.Type == "":
		return "any"
	}
	return s.Type
}

func defaultOf(s apiextv1.JSONSchemaProps) string {
	if s.Default == nil {
		return ""
	}
	return "`" + string(s.Default.Raw) + "`"
}

func rules(s apiextv1.JSONSchemaProps, required bool) string {
	var r []string
	if required {
		r = append(r, "required")
	}
	if len(s.Enum) > 0 {
		var vals []string
		for _, e := range s.Enum {
			vals = append(vals, string(e.Raw))
		}
		r = append(r, "one of "+strings.Join(vals, ", "))
	}
	if s.Minimum != nil {
		r = append(r, fmt.Sprintf("≥ %g", *s.Minimum))
	}
	if s.Maximum != nil {
		r = append(r, fmt.Sprintf("≤ %g", *s.Maximum))
	}
	if s.MaxItems != nil {
		r = append(r, fmt.Sprintf("at most %d items", *s.MaxItems))
	}
	duration := slices.ContainsFunc(s.XValidations, isDurationRule)
	if s.MaxLength != nil && !duration {
		r = append(r, fmt.Sprintf("at most %d characters", *s.MaxLength))
	}
	switch {
	case s.XIntOrString:
		r = append(r, "a Kubernetes quantity (`64Mi`, `1Gi`)")
	case duration:
		r = append(r, "a duration (`30s`, `1h30m`, `7d`; d = 24h, w = 7d, y = 365d)")
	case s.Pattern != "":
		r = append(r, "pattern `"+s.Pattern+"`")
	}
	for _, v := range s.XValidations {
		if !isDurationRule(v) {
			r = append(r, v.Message)
		}
	}
	return cell(strings.Join(r, "; "))
}

// isDurationRule tells the rule of the Duration type.
func isDurationRule(v apiextv1.ValidationRule) bool {
	return strings.Contains(v.Rule, "(ns|us|µs|ms|s|m|h|d|w|y)")
}

func cell(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "\n", " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
