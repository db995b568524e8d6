package tierconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// checkShape walks the decoded JSON against Config's type and reports every
// unknown field, wrongly typed value and malformed size or duration with
// its full path. encoding/json would stop at the first problem, name an
// unknown field without its path, match field names case-insensitively,
// and return a size error without saying which field it was in.
func checkShape(js []byte) error {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("config: must be an object (got %s)", jsonKind(v))
	}
	var errs []error
	checkValue(&errs, "", v, reflect.TypeFor[Config]())
	return errors.Join(errs...)
}

var (
	sizeType     = reflect.TypeFor[Size]()
	durationType = reflect.TypeFor[Duration]()
)

func checkValue(errs *[]error, path string, v any, t reflect.Type) {
	if v == nil { // null: leaves the field unset
		return
	}
	bad := func(format string, args ...any) {
		*errs = append(*errs, &FieldError{Field: path, Message: fmt.Sprintf(format, args...)})
	}
	switch t {
	case sizeType:
		var err error
		switch v := v.(type) {
		case string:
			_, err = ParseSize(v)
		case json.Number:
			_, err = ParseSize(v.String())
		default:
			bad("must be a size such as \"512Mi\" (got %s)", jsonKind(v))
		}
		if err != nil {
			bad("%v", err)
		}
		return
	case durationType:
		var err error
		switch v := v.(type) {
		case string:
			_, err = durationFromJSON(v, true)
		case json.Number:
			_, err = durationFromJSON(v.String(), false)
		default:
			bad("must be a duration such as \"30s\" (got %s)", jsonKind(v))
		}
		if err != nil {
			bad("%v", err)
		}
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		checkValue(errs, path, v, t.Elem())
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			bad("must be an object (got %s)", jsonKind(v))
			return
		}
		fields := jsonFields(t)
		for _, k := range slices.Sorted(maps.Keys(m)) {
			sub := joinPath(path, k)
			f, ok := fields[k]
			if !ok {
				msg := "unknown field"
				if s := suggest(k, fields); s != "" {
					msg += fmt.Sprintf(" (did you mean %q?)", s)
				}
				*errs = append(*errs, &FieldError{Field: sub, Message: msg})
				continue
			}
			checkValue(errs, sub, m[k], f.Type)
		}
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			bad("must be a list (got %s)", jsonKind(v))
			return
		}
		for i, e := range s {
			checkValue(errs, fmt.Sprintf("%s[%d]", path, i), e, t.Elem())
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			bad("must be an object (got %s)", jsonKind(v))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(m)) {
			checkValue(errs, path+"["+strconv.Quote(k)+"]", m[k], t.Elem())
		}
	case reflect.String:
		if _, ok := v.(string); !ok {
			bad("must be a string (got %s)", jsonKind(v))
		}
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			bad("must be true or false (got %s)", jsonKind(v))
		}
	case reflect.Int:
		n, ok := v.(json.Number)
		if !ok {
			bad("must be an integer (got %s)", jsonKind(v))
		} else if _, err := n.Int64(); err != nil {
			bad("must be an integer (got %s)", n)
		}
	case reflect.Float64:
		n, ok := v.(json.Number)
		if !ok {
			bad("must be a number (got %s)", jsonKind(v))
		} else if _, err := n.Float64(); err != nil {
			bad("must be a number (got %s)", n)
		}
	default:
		// A field of a kind this walker does not know: let encoding/json
		// judge it.
	}
}

// jsonFields maps the JSON names of t's fields to the fields.
func jsonFields(t reflect.Type) map[string]reflect.StructField {
	fields := make(map[string]reflect.StructField, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f
	}
	return fields
}

// suggest returns the field name k was probably meant to be: one that
// differs only in case, else the closest within two edits.
func suggest(k string, fields map[string]reflect.StructField) string {
	best, bestDist := "", 3
	for _, name := range slices.Sorted(maps.Keys(fields)) {
		if strings.EqualFold(name, k) {
			return name
		}
		if d := editDistance(strings.ToLower(k), strings.ToLower(name)); d < bestDist {
			best, bestDist = name, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonKind describes a decoded JSON value for an error message.
func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", v)
	case json.Number:
		return "number " + v.String()
	case bool:
		return fmt.Sprintf("%t", v)
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	default:
		return fmt.Sprintf("%T", v)
	}
}
