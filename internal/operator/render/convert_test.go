package render

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
)

// notInTheConfig are the CacheTier fields that never reach the sidecar's
// config (convert.go's byhand list says why): Secrets travel as files,
// and these shape the pod.
var notInTheConfig = []string{
	"sidecar", "l2.passwordSecretRef", "l2.tls.caSecretRef",
	"purge.tokenSecretRef", "bodyStore.size", "bodyStore.medium",
}

// TestEverySettingReachesTheConfig sets each field of the CacheTier spec
// alone (the sections, list elements and pointers around it present in
// both) and expects the converted config's JSON, what the sidecar gets,
// to change: so a new CacheTier setting is carried, generated or by
// hand, without a test of its own.
func TestEverySettingReachesTheConfig(t *testing.T) {
	var n int
	settings(reflect.TypeFor[v1alpha1.CacheTierSpec](), nil, "", func(name string, path []int) {
		n++
		t.Run(name, func(t *testing.T) {
			var off, on v1alpha1.CacheTierSpec
			at(reflect.ValueOf(&off).Elem(), path)
			set(t, at(reflect.ValueOf(&on).Elem(), path))
			if a, b := convertJSON(t, off), convertJSON(t, on); a == b {
				t.Errorf("setting spec.%s does not change the config: %s", name, a)
			}
		})
	})
	if n < 60 {
		t.Fatalf("only %d settings found", n)
	}
}

func convertJSON(t *testing.T, spec v1alpha1.CacheTierSpec) string {
	t.Helper()
	c, err := convert(spec)
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return string(js)
}

var quantityType = reflect.TypeFor[resource.Quantity]()

// settings calls yield with the name and field-index path of every leaf
// of t: through structs, pointers to structs and lists of structs (their
// one element).
func settings(t reflect.Type, path []int, name string, yield func(string, []int)) {
	for i := range t.NumField() {
		f := t.Field(i)
		js, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		n := strings.TrimPrefix(name+"."+js, ".")
		if slices.Contains(notInTheConfig, n) {
			continue
		}
		p := append(slices.Clone(path), i)
		ft := f.Type
		if ft.Kind() == reflect.Pointer || ft.Kind() == reflect.Slice {
			ft = ft.Elem()
			if f.Type.Kind() == reflect.Slice {
				n += "[]"
			}
		}
		if ft.Kind() == reflect.Struct && ft != quantityType {
			settings(ft, p, n, yield)
			continue
		}
		yield(n, p)
	}
}

// at allocates the pointers and the one list element along path in v
// and returns the leaf.
func at(v reflect.Value, path []int) reflect.Value {
	for _, i := range path {
		v = v.Field(i)
		switch {
		case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Struct:
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
			v = v.Index(0)
		case v.Kind() == reflect.Pointer && v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem() != quantityType:
			v.Set(reflect.New(v.Type().Elem()))
			v = v.Elem()
		}
	}
	return v
}

// set gives a leaf a value that its zero does not mean.
func set(t *testing.T, v reflect.Value) {
	if v.Kind() == reflect.Pointer {
		v.Set(reflect.New(v.Type().Elem()))
		if v.Type().Elem().Kind() == reflect.Bool {
			return // a switch set to false, where unset means its default
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == quantityType:
		v.Set(reflect.ValueOf(resource.MustParse("3Ki")))
	case v.Type() == reflect.TypeFor[v1alpha1.Duration]():
		v.SetString("3s")
	case v.Kind() == reflect.String:
		v.SetString("x")
	case v.Kind() == reflect.Bool:
		v.SetBool(true)
	case v.CanInt():
		v.SetInt(7)
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.String:
		v.Set(reflect.ValueOf([]string{"x"}).Convert(v.Type()))
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Int32:
		v.Set(reflect.ValueOf([]int32{7}).Convert(v.Type()))
	default:
		t.Fatalf("no value for a %s", v.Type())
	}
}

// TestEmptyRequestHeaderListsKeepTheConfig: requestHeaders.allow and
// allowUnderscoredNames written as empty lists render the config (and
// hash) of a tier that leaves them out, as they did before the type was
// shared with the sidecar config (whose deep copy keeps an empty list).
func TestEmptyRequestHeaderListsKeepTheConfig(t *testing.T) {
	want := convertJSON(t, v1alpha1.CacheTierSpec{})
	got := convertJSON(t, v1alpha1.CacheTierSpec{RequestHeaders: v1alpha1.RequestHeadersSpec{
		Allow: []string{}, AllowUnderscoredNames: []string{},
	}})
	if got != want {
		t.Errorf("empty lists render\n%s\nwant\n%s", got, want)
	}
}
