package render

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// carried is a CacheTier setting as the sidecar's config must show it:
// check sees it in the rendered config, wire in the pushed JSON.
type carried struct {
	spec  v1alpha1.CacheTierSpec
	check func(tierconfig.Config) bool
	wire  string
}

// expectCarried renders each setting of tests alone and expects it in
// the pushed config, and a tier without any of them to push a config
// that names none (the config it pushed before they existed).
func expectCarried(t *testing.T, tests map[string]carried) {
	t.Helper()
	for name, tt := range tests {
		t.Run(name+" is carried when set", func(t *testing.T) {
			c, err := Redacted(tier(tt.spec))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c) {
				t.Fatalf("rendered config %+v", c)
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

// The choice switches of spec.defaults reach the sidecar's config, and a
// tier that leaves them off pushes the config it pushed before they
// existed.
func TestChoiceSwitchesAreCarried(t *testing.T) {
	expectCarried(t, map[string]carried{
		"updateFromHead": {v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{UpdateFromHead: true}},
			func(c tierconfig.Config) bool { return c.Defaults.UpdateFromHead }, `"updateFromHead":true`},
		"forwardClientValidators": {v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{ForwardClientValidators: true}},
			func(c tierconfig.Config) bool { return c.Defaults.ForwardClientValidators }, `"forwardClientValidators":true`},
		"storePostResponses": {v1alpha1.CacheTierSpec{Defaults: v1alpha1.DefaultsSpec{StorePostResponses: true}},
			func(c tierconfig.Config) bool { return c.Defaults.StorePostResponses }, `"storePostResponses":true`},
	})
}

// spec.origin.requestBuffer and streamRequestBodies reach the sidecar's
// config, and a tier that leaves them unset pushes the config it pushed
// before they existed.
func TestRequestBufferingIsCarried(t *testing.T) {
	expectCarried(t, map[string]carried{
		"requestBuffer": {v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{RequestBuffer: qty("256Ki")}},
			func(c tierconfig.Config) bool { return c.Origin.RequestBuffer == 256*tierconfig.Ki }, `"requestBuffer":"256Ki"`},
		"streamRequestBodies": {v1alpha1.CacheTierSpec{Origin: v1alpha1.OriginSpec{StreamRequestBodies: true}},
			func(c tierconfig.Config) bool { return c.Origin.StreamRequestBodies }, `"streamRequestBodies":true`},
	})
}
