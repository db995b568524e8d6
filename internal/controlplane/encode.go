package controlplane

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Type URLs on the wire.
const (
	// ResourceTypeURL is the xDS type of the one resource per tier.
	ResourceTypeURL = resourcev3.ExtensionConfigType
	// SidecarConfigTypeURL names the config model inside the TypedStruct.
	SidecarConfigTypeURL = "tiercache.io/v1alpha1/SidecarConfig"
	// typedStructTypeURL is the Any type of TypedExtensionConfig.typed_config.
	typedStructTypeURL = resourcev3.APITypePrefix + "xds.type.v3.TypedStruct"
)

// ErrDecode classifies every error of Decode: the resource is not a
// Tiercache sidecar config, or its config is invalid.
var ErrDecode = errors.New("invalid sidecar config resource")

// Version is the version a config travels under: the hex sha256 of the
// canonical JSON of c with defaults filled in. Equal configs have equal
// versions in every process, whatever spelling they came in, and a config
// loaded from a file (tierconfig.Load fills defaults) has the version it
// was pushed with.
func Version(c tierconfig.Config) string { return c.WithDefaults().Hash() }

// ValidateTierKey checks a "<namespace>/<tier>" key: a namespace name (a
// DNS label) and a CacheTier name (a DNS subdomain of at most 63
// characters, as the CRD allows). Keys become metric labels, Lease
// annotations and log fields: they must stay short whatever a client
// sends.
func ValidateTierKey(key string) error {
	ns, tier, ok := strings.Cut(key, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(tier) > 63 || len(validation.IsDNS1123Subdomain(tier)) > 0 {
		return fmt.Errorf("tier key %.80q: must be <namespace>/<tier>, a namespace name and a CacheTier name of at most 63 characters", key)
	}
	return nil
}

// Encode renders c (defaults filled in, not validated) as the resource
// named name: a TypedExtensionConfig whose typed_config is a TypedStruct of
// type SidecarConfigTypeURL holding the JSON form of c. version is
// Version(c).
func Encode(name string, c tierconfig.Config) (res *corev3.TypedExtensionConfig, version string, err error) {
	if err := ValidateTierKey(name); err != nil {
		return nil, "", fmt.Errorf("encode: %w", err)
	}
	c = c.WithDefaults()
	js, err := json.Marshal(c)
	if err != nil {
		return nil, "", fmt.Errorf("encode %s: %w", name, err)
	}
	var st structpb.Struct
	if err := protojson.Unmarshal(js, &st); err != nil {
		return nil, "", fmt.Errorf("encode %s: JSON to Struct: %w", name, err)
	}
	ts, err := anypb.New(&xdstypev3.TypedStruct{TypeUrl: SidecarConfigTypeURL, Value: &st})
	if err != nil {
		return nil, "", fmt.Errorf("encode %s: %w", name, err)
	}
	return &corev3.TypedExtensionConfig{Name: name, TypedConfig: ts}, c.Hash(), nil
}

// Decode checks that resource is a Tiercache sidecar config, converts its
// Struct back to JSON and parses it with tierconfig.Parse, which fills
// defaults and runs Validate. Every error wraps ErrDecode and says what is
// wrong; a validation failure also carries the tierconfig.FieldErrors.
func Decode(resource *anypb.Any) (tierconfig.Config, error) {
	_, c, err := decodeNamed(resource)
	return c, err
}

func decodeNamed(resource *anypb.Any) (string, tierconfig.Config, error) {
	fail := func(format string, args ...any) (string, tierconfig.Config, error) {
		return "", tierconfig.Config{}, fmt.Errorf("%w: "+format, append([]any{ErrDecode}, args...)...)
	}
	if resource == nil {
		return fail("resource is missing")
	}
	if resource.GetTypeUrl() != ResourceTypeURL {
		return fail("resource type is %q, want %q", resource.GetTypeUrl(), ResourceTypeURL)
	}
	var tec corev3.TypedExtensionConfig
	if err := proto.Unmarshal(resource.GetValue(), &tec); err != nil {
		return fail("TypedExtensionConfig does not unmarshal: %v", err)
	}
	name := tec.GetName()
	if tec.GetTypedConfig() == nil {
		return fail("%s: typed_config is missing", name)
	}
	if got := tec.GetTypedConfig().GetTypeUrl(); got != typedStructTypeURL {
		return fail("%s: typed_config type is %q, want %q", name, got, typedStructTypeURL)
	}
	var ts xdstypev3.TypedStruct
	if err := proto.Unmarshal(tec.GetTypedConfig().GetValue(), &ts); err != nil {
		return fail("%s: TypedStruct does not unmarshal: %v", name, err)
	}
	if ts.GetTypeUrl() != SidecarConfigTypeURL {
		return fail("%s: TypedStruct type_url is %q, want %q", name, ts.GetTypeUrl(), SidecarConfigTypeURL)
	}
	if ts.GetValue() == nil {
		return fail("%s: TypedStruct value is missing", name)
	}
	js, err := protojson.Marshal(ts.GetValue())
	if err != nil {
		return fail("%s: Struct to JSON: %v", name, err)
	}
	c, err := tierconfig.Parse(js)
	if err != nil {
		return "", tierconfig.Config{}, fmt.Errorf("%w: %s: %w", ErrDecode, name, err)
	}
	return name, c, nil
}
