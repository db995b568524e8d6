package render

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestTargetedCacheControlIsCarried(t *testing.T) {
	tests := map[string]struct {
		spec       *v1alpha1.TargetedCacheControlSpec
		want       *tierconfig.TargetedCacheControl
		wantFields []string // what the sidecar obeys
		wire       string   // in the rendered JSON; "" means the setting is absent
	}{
		"an unset setting renders nothing, so the pushed config is unchanged": {
			wantFields: []string{"CDN-Cache-Control"},
		},
		"an empty list renders as an empty list (off), not as unset": {
			spec: &v1alpha1.TargetedCacheControlSpec{Fields: []string{}}, want: &tierconfig.TargetedCacheControl{Fields: []string{}},
			wantFields: []string{}, wire: `"targetedCacheControl":{"fields":[]}`,
		},
		"a list and strip are carried in order": {
			spec:       &v1alpha1.TargetedCacheControlSpec{Fields: []string{"Tiercache-Cache-Control", "CDN-Cache-Control"}, Strip: true},
			want:       &tierconfig.TargetedCacheControl{Fields: []string{"Tiercache-Cache-Control", "CDN-Cache-Control"}, Strip: true},
			wantFields: []string{"Tiercache-Cache-Control", "CDN-Cache-Control"},
			wire:       `"targetedCacheControl":{"fields":["Tiercache-Cache-Control","CDN-Cache-Control"],"strip":true}`,
		},
		"strip alone keeps the default list": {
			spec: &v1alpha1.TargetedCacheControlSpec{Strip: true}, want: &tierconfig.TargetedCacheControl{Strip: true},
			wantFields: []string{"CDN-Cache-Control"}, wire: `"targetedCacheControl":{"strip":true}`,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Redacted(tier(v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{TargetedCacheControl: tt.spec}}))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.Defaults.TargetedCacheControl; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rendered %+v, want %+v", got, tt.want)
			}
			if got := c.Defaults.TargetedFields(); !reflect.DeepEqual(got, tt.wantFields) {
				t.Errorf("the sidecar obeys %q, want %q", got, tt.wantFields)
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wire == "" && strings.Contains(string(js), "targetedCacheControl") || !strings.Contains(string(js), tt.wire) {
				t.Errorf("the pushed config is\n%s\nwant it to carry %q", js, tt.wire)
			}
		})
	}
}

// A CacheTier written as YAML or sent as JSON by a Go client keeps an
// empty list empty: omitzero on the API type, not omitempty.
func TestAnEmptyTargetListSurvivesTheCacheTiersWireForm(t *testing.T) {
	var ct v1alpha1.CacheTier
	if err := yaml.Unmarshal([]byte("spec: {defaults: {targetedCacheControl: {fields: []}}}"), &ct); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(ct.Spec.Defaults)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"targetedCacheControl":{"fields":[]}`) {
		t.Fatalf("the empty list was lost on the way out: %s", js)
	}
	var back v1alpha1.DefaultsSpec
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	if f := back.DeepCopy().TargetedCacheControl.Fields; f == nil || len(f) != 0 {
		t.Fatalf("the empty list came back as %#v", f)
	}
}

func TestInvalidTargetedFieldsNameTheCacheTierField(t *testing.T) {
	cases := map[string]struct {
		fields           []string
		field, substring string
	}{
		"Cache-Control is refused on its entry": {
			fields: []string{"cache-control"}, field: "spec.defaults.targetedCacheControl.fields[0]", substring: "must not be Cache-Control",
		},
		"a case-insensitive duplicate is refused on the later entry": {
			fields: []string{"CDN-Cache-Control", "cdn-cache-control"},
			field:  "spec.defaults.targetedCacheControl.fields[1]", substring: "duplicates fields[0]",
		},
		"nine names are refused on the list": {
			fields: []string{"a", "b", "c", "d", "e", "f", "g", "h", "i"},
			field:  "spec.defaults.targetedCacheControl.fields", substring: "at most 8",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			spec := v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{
				TargetedCacheControl: &v1alpha1.TargetedCacheControlSpec{Fields: tc.fields},
			}}
			_, err := Redacted(tier(spec))
			for _, e := range FieldErrors(err) {
				if e.Field == tc.field && strings.Contains(e.Error(), tc.substring) {
					return
				}
			}
			t.Errorf("no error on %s containing %q; got %v", tc.field, tc.substring, FieldErrors(err).ToAggregate())
		})
	}
}
