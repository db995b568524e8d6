package tierconfig

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestTargetedCacheControlSettings(t *testing.T) {
	tests := map[string]struct {
		doc        string
		wantFields []string
		wantStrip  bool
		wantPolicy []string // canonical, in every rule's policy
		wantDrop   []string // Compiled.StripTargeted
	}{
		"an unset setting obeys CDN-Cache-Control and forwards it": {
			doc: "", wantFields: []string{"CDN-Cache-Control"}, wantPolicy: []string{"Cdn-Cache-Control"},
		},
		"strip alone keeps the default fields and strips them": {
			doc:        "defaults: {targetedCacheControl: {strip: true}}",
			wantFields: []string{"CDN-Cache-Control"}, wantStrip: true,
			wantPolicy: []string{"Cdn-Cache-Control"}, wantDrop: []string{"Cdn-Cache-Control"},
		},
		"null fields mean the default fields": {
			doc: "defaults: {targetedCacheControl: {fields: null}}", wantFields: []string{"CDN-Cache-Control"},
			wantPolicy: []string{"Cdn-Cache-Control"},
		},
		"an empty list turns targeted fields off": {
			doc: "defaults: {targetedCacheControl: {fields: []}}", wantFields: []string{},
		},
		"a custom list keeps its order and is canonicalized for the request path": {
			doc:        "defaults: {targetedCacheControl: {fields: [tiercache-cache-control, CDN-Cache-Control], strip: true}}",
			wantFields: []string{"tiercache-cache-control", "CDN-Cache-Control"}, wantStrip: true,
			wantPolicy: []string{"Tiercache-Cache-Control", "Cdn-Cache-Control"},
			wantDrop:   []string{"Tiercache-Cache-Control", "Cdn-Cache-Control"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc + "\nrules: [{name: a, match: {pathPrefix: /a/}, ttl: 1m}]"))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Defaults.TargetedFields(); !reflect.DeepEqual(got, tt.wantFields) {
				t.Errorf("TargetedFields() = %q, want %q", got, tt.wantFields)
			}
			if got := c.Defaults.StripTargeted(); got != tt.wantStrip {
				t.Errorf("StripTargeted() = %v, want %v", got, tt.wantStrip)
			}
			cc, err := Compile(c)
			if err != nil {
				t.Fatal(err)
			}
			for _, path := range []string{"/a/x", "/elsewhere"} {
				if got := cc.Match("", path, nil).Policy.TargetedFields; !reflect.DeepEqual(got, tt.wantPolicy) {
					t.Errorf("policy of %s: TargetedFields = %q, want %q", path, got, tt.wantPolicy)
				}
			}
			if !reflect.DeepEqual(cc.StripTargeted, tt.wantDrop) {
				t.Errorf("StripTargeted = %q, want %q", cc.StripTargeted, tt.wantDrop)
			}
		})
	}
}

func TestTargetedCacheControlValidation(t *testing.T) {
	const at = "defaults.targetedCacheControl."
	tests := map[string]struct {
		fields []string
		strip  bool
		want   []string // errors, none for a valid setting
	}{
		"eight distinct names are allowed": {
			fields: []string{"A", "B", "C", "D", "E", "F", "G", "CDN-Cache-Control"},
		},
		"an empty list without strip is allowed": {fields: []string{}},
		"nine names are refused": {
			fields: []string{"A", "B", "C", "D", "E", "F", "G", "H", "I"},
			want:   []string{at + "fields: must have at most 8 names (got 9)"},
		},
		"a name that is not a token is refused, naming its index": {
			fields: []string{"CDN-Cache-Control", "My Cache-Control"},
			want:   []string{at + `fields[1]: not a valid HTTP field name (got "My Cache-Control")`},
		},
		"an empty name is refused": {
			fields: []string{""}, want: []string{at + `fields[0]: not a valid HTTP field name (got "")`},
		},
		"a name with a colon is refused": {
			fields: []string{"CDN-Cache-Control:"}, want: []string{at + `fields[0]: not a valid HTTP field name (got "CDN-Cache-Control:")`},
		},
		"Cache-Control itself is refused in any case": {
			fields: []string{"cache-CONTROL"},
			want:   []string{at + `fields[0]: must not be Cache-Control, which targeted fields override (got "cache-CONTROL")`},
		},
		"a duplicate differing only in case is refused, naming the first": {
			fields: []string{"CDN-Cache-Control", "Tiercache-Cache-Control", "cdn-cache-control"},
			want:   []string{at + `fields[2]: duplicates fields[0] (names are case-insensitive) (got "cdn-cache-control")`},
		},
		"strip with an empty list is refused": {
			fields: []string{}, strip: true,
			want: []string{at + "strip: strips nothing: fields is empty, which turns targeted fields off"},
		},
		"every problem is reported at once": {
			fields: []string{"a b", "Cache-Control", "x", "X"},
			want: []string{
				at + `fields[0]: not a valid HTTP field name (got "a b")`,
				at + `fields[1]: must not be Cache-Control, which targeted fields override (got "Cache-Control")`,
				at + `fields[3]: duplicates fields[2] (names are case-insensitive) (got "X")`,
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			c.Defaults.TargetedCacheControl = &TargetedCacheControl{Fields: tt.fields, Strip: tt.strip}
			var got []string
			for _, fe := range FieldErrors(c.Validate()) {
				got = append(got, fe.Error())
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("Validate errors\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

// A tier that does not set targetedCacheControl pushes the JSON it pushed
// before the setting existed (an older sidecar NACKs a field it does not
// know); an empty list and an unset one stay different on the wire.
func TestUnsetTargetedCacheControlStaysOffTheWire(t *testing.T) {
	js, err := json.Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(js), "targetedCacheControl") {
		t.Fatalf("the default config names targetedCacheControl:\n%s", js)
	}
	for doc, want := range map[string]string{
		"defaults: {targetedCacheControl: {fields: []}}":      `"targetedCacheControl":{"fields":[]}`,
		"defaults: {targetedCacheControl: {strip: true}}":     `"targetedCacheControl":{"strip":true}`,
		"defaults: {targetedCacheControl: {fields: [X-CC]}}":  `"targetedCacheControl":{"fields":["X-CC"]}`,
		"defaults: {targetedCacheControl: {fields: null}}":    `"targetedCacheControl":{}`,
		"defaults: {targetedCacheControl: {strip: false}}":    `"targetedCacheControl":{}`,
		"defaults: {targetedCacheControl: {fields: [a, B]}} ": `"targetedCacheControl":{"fields":["a","B"]}`,
	} {
		c, err := Parse([]byte(doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", doc, err)
		}
		js, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(js), want) {
			t.Errorf("%q travels as\n%s\nwant it to contain %s", doc, js, want)
		}
		back, err := Parse(js)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, c) || back.Hash() != c.Hash() {
			t.Errorf("%q: the round trip changed the config: %+v, want %+v", doc,
				back.Defaults.TargetedCacheControl, c.Defaults.TargetedCacheControl)
		}
	}
}

func TestParseTargetedCacheControlErrorsNameTheField(t *testing.T) {
	tests := map[string]struct{ doc, want string }{
		"a misspelt field is named with its path": {
			"defaults: {targetedCacheControl: {feilds: [A]}}",
			`defaults.targetedCacheControl.feilds: unknown field (did you mean "fields"?)`,
		},
		"a single name instead of a list is refused": {
			"defaults: {targetedCacheControl: {fields: CDN-Cache-Control}}",
			`defaults.targetedCacheControl.fields: must be a list (got string "CDN-Cache-Control")`,
		},
		"a number in the list is refused with its index": {
			"defaults: {targetedCacheControl: {fields: [A, 7]}}",
			`defaults.targetedCacheControl.fields[1]: must be a string (got number 7)`,
		},
		"a bad name is refused at validation": {
			"defaults: {targetedCacheControl: {fields: [Cache-Control]}}",
			`defaults.targetedCacheControl.fields[0]: must not be Cache-Control`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse(%q) = %v, want an error containing %q", tt.doc, err, tt.want)
			}
		})
	}
}

// Compile's result shares nothing with the config it was given.
func TestCompiledTargetedFieldsAreNotChangedThroughTheCallersConfig(t *testing.T) {
	c := Default()
	c.Defaults.TargetedCacheControl = &TargetedCacheControl{Fields: []string{"X-A"}, Strip: true}
	cc, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	c.Defaults.TargetedCacheControl.Fields[0] = "X-B"
	c.Defaults.TargetedCacheControl.Strip = false
	if got := cc.Config.Defaults.TargetedCacheControl; got.Fields[0] != "X-A" || !got.Strip {
		t.Fatalf("the compiled config changed with the caller's: %+v", got)
	}
}
