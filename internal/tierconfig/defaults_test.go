package tierconfig_test

import (
	"testing"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// TestLibraryFallbacksAreTheConfigDefaults: the stores fill a zero option
// with a default of their own (they cannot import the config model); the
// sidecar always passes the config's value, but the two must not drift.
func TestLibraryFallbacksAreTheConfigDefaults(t *testing.T) {
	c := tierconfig.Config{L2: tierconfig.L2{Addresses: []string{"redis:6379"}}}.WithDefaults()
	tests := map[string]struct{ library, config any }{
		"l2's timeout is l2.timeout's default":        {l2.DefaultTimeout, c.L2.Timeout.Std()},
		"the layered store's timeout is l2.timeout's": {store.DefaultTimeout, c.L2.Timeout.Std()},
		"the body store's largest object is bodyStore.maxObjectSize's default": {
			int64(bodystore.DefaultMaxObject), int64(c.BodyMaxObjectSize()),
		},
	}
	for name, tt := range tests {
		if tt.library != tt.config {
			t.Errorf("%s: library %v, config %v", name, tt.library, tt.config)
		}
	}
}
