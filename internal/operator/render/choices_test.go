package render

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// The choice switches of spec.defaults reach the sidecar's config, and a
// tier that leaves them off pushes the config it pushed before they
// existed.
func TestChoiceSwitchesAreCarried(t *testing.T) {
	tests := map[string]struct {
		spec  v1alpha1.DefaultsSpec
		check func(tierconfig.Defaults) bool
		wire  string
	}{
		"updateFromHead": {v1alpha1.DefaultsSpec{UpdateFromHead: true},
			func(d tierconfig.Defaults) bool { return d.UpdateFromHead }, `"updateFromHead":true`},
		"forwardClientValidators": {v1alpha1.DefaultsSpec{ForwardClientValidators: true},
			func(d tierconfig.Defaults) bool { return d.ForwardClientValidators }, `"forwardClientValidators":true`},
		"storePostResponses": {v1alpha1.DefaultsSpec{StorePostResponses: true},
			func(d tierconfig.Defaults) bool { return d.StorePostResponses }, `"storePostResponses":true`},
	}
	for name, tt := range tests {
		t.Run(name+" is carried when on", func(t *testing.T) {
			c, err := Redacted(tier(v1alpha1.CacheTierSpec{Defaults: tt.spec}))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c.Defaults) {
				t.Fatalf("rendered defaults %+v", c.Defaults)
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(js), tt.wire) {
				t.Errorf("the pushed config is\n%s\nwant it to carry %s", js, tt.wire)
			}
		})
	}
	t.Run("none travels when off", func(t *testing.T) {
		c, err := Redacted(tier(v1alpha1.CacheTierSpec{}))
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		for name := range tests {
			if strings.Contains(string(js), `"`+name+`"`) {
				t.Errorf("the pushed config of a tier that does not set %s names it:\n%s", name, js)
			}
		}
	})
}

// spec.origin.requestBuffer and streamRequestBodies reach the sidecar's
// config, and a tier that leaves them unset pushes the config it pushed
// before they existed.
func TestRequestBufferingIsCarried(t *testing.T) {
	tests := map[string]struct {
		spec  v1alpha1.OriginSpec
		check func(tierconfig.Origin) bool
		wire  string
	}{
		"requestBuffer": {v1alpha1.OriginSpec{RequestBuffer: qty("256Ki")},
			func(o tierconfig.Origin) bool { return o.RequestBuffer == 256*tierconfig.Ki }, `"requestBuffer":"256Ki"`},
		"streamRequestBodies": {v1alpha1.OriginSpec{StreamRequestBodies: true},
			func(o tierconfig.Origin) bool { return o.StreamRequestBodies }, `"streamRequestBodies":true`},
	}
	for name, tt := range tests {
		t.Run(name+" is carried when set", func(t *testing.T) {
			c, err := Redacted(tier(v1alpha1.CacheTierSpec{Origin: tt.spec}))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c.Origin) {
				t.Fatalf("rendered origin %+v", c.Origin)
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(js), tt.wire) {
				t.Errorf("the pushed config is\n%s\nwant it to carry %s", js, tt.wire)
			}
		})
	}
	t.Run("none travels when unset", func(t *testing.T) {
		c, err := Redacted(tier(v1alpha1.CacheTierSpec{}))
		if err != nil {
			t.Fatal(err)
		}
		js, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		for name := range tests {
			if strings.Contains(string(js), `"`+name+`"`) {
				t.Errorf("the pushed config of a tier that does not set %s names it:\n%s", name, js)
			}
		}
	})
}
