package render

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/operator/inject"
)

// TestCRDDefaultsAreTheConfigDefaults holds the CRD to the Go defaults it
// cannot import: every +kubebuilder:default marker and every "(default X"
// a field's doc promises must be what a CacheTier that leaves the field
// unset really gets (rendered by Redacted, so through tierconfig's
// defaults, or the operator's own for the sidecar's ports and volume). A
// default changed on one side only fails here.
func TestCRDDefaultsAreTheConfigDefaults(t *testing.T) {
	schema := crdSpecSchema(t)
	c, err := Redacted(tier(v1alpha1.CacheTierSpec{L2: &v1alpha1.L2Spec{Addresses: []string{"redis:6379"}}}))
	if err != nil {
		t.Fatal(err)
	}
	unsetMedium, err := BodyVolume(v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi")}})
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		path   string
		marker bool // a +kubebuilder:default marker, else the doc's "default X"
		want   any  // the default: a string as the CRD writes it, or a time.Duration
	}{
		"l1.maxSize is the config's":      {path: "l1.maxSize", want: c.L1.MaxSize.String()},
		"l1.maxEntrySize is the config's": {path: "l1.maxEntrySize", want: c.L1.MaxEntrySize.String()},
		"l1.shards is the config's":       {path: "l1.shards", want: strconv.Itoa(c.L1.Shards)},
		"l2.mode is the config's":         {path: "l2.mode", marker: true, want: c.L2.Mode},
		"l2.timeout is the config's":      {path: "l2.timeout", want: c.L2.Timeout.Std()},
		"l2.maxBodySize is the config's":  {path: "l2.maxBodySize", want: c.L2MaxBodySize().String()},
		"l2.warmStart.maxEntries is the config's": {
			path: "l2.warmStart.maxEntries", want: strconv.Itoa(c.L2.WarmStart.MaxEntries),
		},
		"l2.warmStart.maxBytes is the config's for a large L1": {
			path: "l2.warmStart.maxBytes", want: c.L2.WarmStart.MaxBytes.String(),
		},
		"l2.warmStart.timeout is the config's": {path: "l2.warmStart.timeout", want: c.L2.WarmStart.Timeout.Std()},
		"bodyStore.medium is what an unset medium renders to": {
			path: "bodyStore.medium", marker: true, want: string(v1alpha1.BodyStoreDisk),
		},
		"bodyStore.threshold is the config's":     {path: "bodyStore.threshold", want: c.BodyThreshold().String()},
		"bodyStore.maxObjectSize is the config's": {path: "bodyStore.maxObjectSize", want: c.BodyMaxObjectSize().String()},
		"origin.timeout is the config's":          {path: "origin.timeout", want: c.Origin.Timeout.Std()},
		"origin.responseHeaderTimeout is the config's": {
			path: "origin.responseHeaderTimeout", want: c.Origin.ResponseHeaderTimeout.Std(),
		},
		"origin.idleTimeout is the config's":   {path: "origin.idleTimeout", want: c.Origin.IdleTimeout.Std()},
		"origin.requestBuffer is the config's": {path: "origin.requestBuffer", want: c.RequestBufferSize().String()},
		"defaults.heuristicPercent is the config's fraction": {
			path: "defaults.heuristicPercent", want: fmt.Sprint(c.Defaults.HeuristicFraction * 100),
		},
		"defaults.heuristicMaxTTL is the config's": {path: "defaults.heuristicMaxTTL", want: c.Defaults.HeuristicMaxTTL.Std()},
		"defaults.hitForMissTTL is the config's":   {path: "defaults.hitForMissTTL", want: c.Defaults.HitForMissTTL.Std()},
		"defaults.staleIfUnreachable is the config's": {
			path: "defaults.staleIfUnreachable", want: c.Defaults.StaleIfUnreachableWindow(),
		},
		"coalescing.enabled is the config's": {path: "coalescing.enabled", want: strconv.FormatBool(c.Coalescing.IsEnabled())},
		"coalescing.timeout is the config's": {path: "coalescing.timeout", want: c.Coalescing.Timeout.Std()},
		"sidecar.port is the injector's":     {path: "sidecar.port", want: strconv.Itoa(int(inject.DefaultPort))},
		"sidecar.adminPort is the injector's": {
			path: "sidecar.adminPort", want: strconv.Itoa(int(inject.DefaultAdminPort)),
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			prop := schemaAt(t, schema, tt.path)
			if tt.marker {
				if got := fmt.Sprint(prop["default"]); got != tt.want {
					t.Errorf("spec.%s: the CRD's default is %q, the Go default %q", tt.path, got, tt.want)
				}
				return
			}
			desc, _ := prop["description"].(string)
			desc = strings.Join(strings.Fields(desc), " ")
			if !saysDefault(desc, tt.want) {
				t.Errorf("spec.%s: the CRD's doc %q does not say \"default %v\", the Go default", tt.path, desc, tt.want)
			}
		})
	}
	t.Run("an unset bodyStore.medium renders as Disk", func(t *testing.T) {
		disk, err := BodyVolume(v1alpha1.CacheTierSpec{BodyStore: &v1alpha1.BodyStoreSpec{Size: qty("1Gi"), Medium: v1alpha1.BodyStoreDisk}})
		if err != nil || disk != unsetMedium {
			t.Errorf("medium Disk renders %+v (%v), unset %+v", disk, err, unsetMedium)
		}
	})
}

// docDefault matches a field doc's "default X" ("Default 10m;", "(default
// 60s, at most 10m)", "default the smaller of 64Mi and ...").
var docDefault = regexp.MustCompile(`(?i)\bdefault (?:the smaller of )?([0-9A-Za-z.]+)`)

// saysDefault reports whether the doc desc promises want as its default:
// the same text, or for a duration the same length of time ("60s" is
// time.Minute).
func saysDefault(desc string, want any) bool {
	for _, m := range docDefault.FindAllStringSubmatch(desc, -1) {
		switch w := want.(type) {
		case string:
			if m[1] == w {
				return true
			}
		case time.Duration:
			if d, err := time.ParseDuration(m[1]); err == nil && d == w {
				return true
			}
		}
	}
	return false
}

// crdSpecSchema is the OpenAPI schema of spec in the generated CRD.
func crdSpecSchema(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../../config/crd/tiercache.io_cachetiers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema map[string]any `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil || len(crd.Spec.Versions) != 1 {
		t.Fatalf("CRD: %v (%d versions)", err, len(crd.Spec.Versions))
	}
	return schemaAt(t, crd.Spec.Versions[0].Schema.OpenAPIV3Schema, "spec")
}

// schemaAt walks properties down a dotted path.
func schemaAt(t *testing.T, s map[string]any, path string) map[string]any {
	t.Helper()
	for _, name := range strings.Split(path, ".") {
		props, _ := s["properties"].(map[string]any)
		next, ok := props[name].(map[string]any)
		if !ok {
			t.Fatalf("the CRD has no property %s (of %s)", name, path)
		}
		s = next
	}
	return s
}
