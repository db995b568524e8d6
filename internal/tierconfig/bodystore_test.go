package tierconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBodyStoreLimits(t *testing.T) {
	tests := map[string]struct {
		c                           Config
		threshold, maxObject, maxL2 Size
	}{
		"an unset body store takes the defaults": {
			c:         Default(),
			threshold: DefaultBodyThreshold, maxObject: Gi, maxL2: 16 * Mi,
		},
		"set fields win over the defaults": {
			c: func() Config {
				c := Default()
				c.BodyStore = BodyStore{Threshold: 256 * Ki, MaxObjectSize: 8 * Gi}
				c.L2.MaxBodySize = 64 * Mi
				return c
			}(),
			threshold: 256 * Ki, maxObject: 8 * Gi, maxL2: 64 * Mi,
		},
		"the default threshold is capped at a smaller l1.maxEntrySize": {
			c:         Config{L1: L1{MaxSize: Mi, Shards: 256}}.WithDefaults(),
			threshold: 4 * Ki, maxObject: Gi, maxL2: 16 * Mi,
		},
		"a config without defaults filled still has a threshold": {
			c:         Config{},
			threshold: DefaultBodyThreshold, maxObject: Gi, maxL2: 16 * Mi,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := tt.c.BodyThreshold(); got != tt.threshold {
				t.Errorf("BodyThreshold() = %s, want %s", got, tt.threshold)
			}
			if got := tt.c.BodyMaxObjectSize(); got != tt.maxObject {
				t.Errorf("BodyMaxObjectSize() = %s, want %s", got, tt.maxObject)
			}
			if got := tt.c.L2MaxBodySize(); got != tt.maxL2 {
				t.Errorf("L2MaxBodySize() = %s, want %s", got, tt.maxL2)
			}
		})
	}
}

// A tier that does not use the body store must push the JSON it pushed
// before the body store existed: an older sidecar refuses (NACKs) a config
// naming a field it does not know.
func TestUnsetBodyStoreFieldsStayOffTheWire(t *testing.T) {
	c := Config{L2: L2{Addresses: []string{"redis:6379"}}}.WithDefaults()
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{`"bodyStore"`, `"maxBodySize"`, `"threshold"`, `"maxObjectSize"`} {
		if strings.Contains(string(js), name) {
			t.Errorf("the defaulted config names %s:\n%s", name, js)
		}
	}
	// Set, they travel and parse back.
	c.BodyStore = BodyStore{Threshold: 128 * Ki}
	c.L2.MaxBodySize = 8 * Mi
	js, err = json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(js), `"bodyStore":{"threshold":"128Ki"}`) || !strings.Contains(string(js), `"maxBodySize":"8Mi"`) {
		t.Fatalf("set fields missing from the wire form:\n%s", js)
	}
	back, err := Parse(js)
	if err != nil {
		t.Fatal(err)
	}
	if back.BodyStore != c.BodyStore || back.L2.MaxBodySize != c.L2.MaxBodySize || back.Hash() != c.Hash() {
		t.Fatalf("round trip changed the body store: %+v, l2.maxBodySize %s", back.BodyStore, back.L2.MaxBodySize)
	}
}

func TestParseBodyStoreErrorsNameTheField(t *testing.T) {
	tests := map[string]struct{ doc, want string }{
		"a misspelt body store field is named with its path": {
			"bodyStore: {treshold: 1Mi}", `bodyStore.treshold: unknown field (did you mean "threshold"?)`,
		},
		"a malformed threshold is named with its path": {
			"bodyStore: {threshold: 1.5Xi}", `bodyStore.threshold: invalid size "1.5Xi"`,
		},
		"a negative size is refused at parse": {
			"bodyStore: {maxObjectSize: -1Gi}", `bodyStore.maxObjectSize: invalid size "-1Gi": must not be negative`,
		},
		"a too small threshold is refused at validation": {
			"bodyStore: {threshold: 100}", `bodyStore.threshold: must be >= 1Ki (got 100)`,
		},
		"an L2 max body size too large is refused": {
			"l2: {addresses: ['r:6379'], maxBodySize: 1Gi}", `l2.maxBodySize: must be <= 512Mi`,
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

func TestRequestBufferSize(t *testing.T) {
	for name, tt := range map[string]struct {
		o    Origin
		want Size
	}{
		"unset: 1Mi":                 {Origin{}, Mi},
		"set":                        {Origin{RequestBuffer: 256 * Ki}, 256 * Ki},
		"streamRequestBodies: none":  {Origin{StreamRequestBodies: true}, 0},
		"streaming wins over a size": {Origin{RequestBuffer: 256 * Ki, StreamRequestBodies: true}, 0},
	} {
		if got := (Config{Origin: tt.o}).RequestBufferSize(); got != tt.want {
			t.Errorf("%s: RequestBufferSize() = %s, want %s", name, got, tt.want)
		}
	}
}
