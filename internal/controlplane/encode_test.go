package controlplane

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// richConfig is a valid config that uses most of the model.
func richConfig() tierconfig.Config {
	c := tierconfig.Default()
	c.L1 = tierconfig.L1{MaxSize: 64 * tierconfig.Mi, Shards: 64}
	c.L2 = tierconfig.L2{Addresses: []string{"redis-0:6379", "redis-1:6379"}, Mode: tierconfig.L2Cluster, KeyPrefix: "x"}
	c.Defaults.FallbackTTL = tierconfig.Duration(90 * time.Second)
	c.Defaults.HeuristicFraction = 0.25
	c.Rules = []tierconfig.Rule{
		{Name: "health", Match: tierconfig.Match{Path: "/healthz"}, Bypass: true},
		{Name: "api", Match: tierconfig.Match{Regex: `^/api/v\d+/`}, TTL: tierconfig.Duration(time.Minute),
			CacheKey: tierconfig.CacheKey{QueryExclude: []string{"utm_*"}, SortQuery: true, Headers: []string{"Accept-Language"}}},
	}
	c.Purge.Token = "0123456789abcdef0123"
	return c.WithDefaults()
}

// ttlConfig is a valid config told apart by its fallback TTL.
func ttlConfig(seconds int) tierconfig.Config {
	c := tierconfig.Default()
	c.Defaults.FallbackTTL = tierconfig.Duration(time.Duration(seconds) * time.Second)
	return c
}

// invalidConfig fails Validate: shards must be a power of two.
func invalidConfig() tierconfig.Config {
	c := tierconfig.Default()
	c.L1.Shards = 3
	return c
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func mustEncode(t testing.TB, name string, c tierconfig.Config) (*anypb.Any, string) {
	t.Helper()
	res, version, err := Encode(name, c)
	if err != nil {
		t.Fatal(err)
	}
	return mustAny(t, res), version
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	tests := map[string]tierconfig.Config{
		"the built-in default survives the wire": tierconfig.Default(),
		"a config using most fields survives":    richConfig(),
		"a partial config arrives with defaults": {Defaults: tierconfig.Defaults{NegativeTTL: tierconfig.Duration(5 * time.Second)}},
		"a disabled coalescer survives the wire": func() tierconfig.Config { c := tierconfig.Default(); c.Coalescing.Enabled = new(false); return c }(),
		"a rule's stale override survives the wire": func() tierconfig.Config {
			c := richConfig()
			c.Rules[1].StaleIfError = new(tierconfig.Duration(time.Hour))
			return c
		}(),
	}
	for name, c := range tests {
		t.Run(name, func(t *testing.T) {
			res, version, err := Encode("shop/frontend", c)
			if err != nil {
				t.Fatal(err)
			}
			if res.GetName() != "shop/frontend" {
				t.Errorf("name = %q, want shop/frontend", res.GetName())
			}
			if want := c.WithDefaults().Hash(); version != want || version != Version(c) {
				t.Errorf("version = %q, want the hash of the defaulted config %q", version, want)
			}
			back, err := Decode(mustAny(t, res))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(back, c.WithDefaults()) {
				t.Errorf("round trip changed the config:\n got %+v\nwant %+v", back, c.WithDefaults())
			}
			if Version(back) != version {
				t.Errorf("the decoded config has version %q, it was sent as %q", Version(back), version)
			}
		})
	}
}

func TestVersionIsStableAndDistinguishes(t *testing.T) {
	_, v1, err := Encode("a/b", ttlConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	_, again, _ := Encode("a/b", ttlConfig(1))
	_, v2, _ := Encode("a/b", ttlConfig(2))
	if v1 != again {
		t.Errorf("one config encodes to versions %q and %q", v1, again)
	}
	if v1 == v2 {
		t.Errorf("different configs share version %q", v1)
	}
	if len(v1) != 64 {
		t.Errorf("version %q is not a hex sha256", v1)
	}
}

func TestEncodeRefusesBadNames(t *testing.T) {
	for _, name := range []string{"", "frontend", "/frontend", "shop/", "a/b/c"} {
		if _, _, err := Encode(name, tierconfig.Default()); err == nil || !strings.Contains(err.Error(), "<namespace>/<tier>") {
			t.Errorf("Encode(%q) error = %v, want one naming <namespace>/<tier>", name, err)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	good, _ := mustEncode(t, "shop/frontend", tierconfig.Default())
	typedStruct := func(typeURL string, v *structpb.Struct) *anypb.Any {
		return mustAny(t, &corev3.TypedExtensionConfig{Name: "shop/frontend",
			TypedConfig: mustAny(t, &xdstypev3.TypedStruct{TypeUrl: typeURL, Value: v})})
	}
	structOf := func(m map[string]any) *structpb.Struct {
		s, err := structpb.NewStruct(m)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	invalid, _ := mustEncode(t, "shop/frontend", invalidConfig())

	tests := map[string]struct {
		res  *anypb.Any
		want []string // substrings of the error
	}{
		"a missing resource is refused": {nil, []string{"missing"}},
		"a resource of another xDS type names both types": {
			mustAny(t, &corev3.Node{Id: "x"}),
			[]string{"envoy.config.core.v3.Node", ResourceTypeURL},
		},
		"bytes that are not a TypedExtensionConfig are refused": {
			&anypb.Any{TypeUrl: ResourceTypeURL, Value: []byte{0xff, 0xff, 0xff}},
			[]string{"does not unmarshal"},
		},
		"a TypedExtensionConfig without typed_config is refused": {
			mustAny(t, &corev3.TypedExtensionConfig{Name: "shop/frontend"}),
			[]string{"shop/frontend", "typed_config is missing"},
		},
		"typed_config that is not a TypedStruct names both types": {
			mustAny(t, &corev3.TypedExtensionConfig{Name: "shop/frontend", TypedConfig: mustAny(t, wrapperspb.String("x"))}),
			[]string{"google.protobuf.StringValue", "xds.type.v3.TypedStruct"},
		},
		"a TypedStruct of another config type names both types": {
			typedStruct("example.com/Other", structOf(map[string]any{})),
			[]string{`"example.com/Other"`, SidecarConfigTypeURL},
		},
		"a TypedStruct without a value is refused": {
			typedStruct(SidecarConfigTypeURL, nil),
			[]string{"value is missing"},
		},
		"an unknown field is named with its path": {
			typedStruct(SidecarConfigTypeURL, structOf(map[string]any{"l1": map[string]any{"maxSzie": "1Mi"}})),
			[]string{"l1.maxSzie"},
		},
		"a value of the wrong JSON shape is named with its path": {
			typedStruct(SidecarConfigTypeURL, structOf(map[string]any{"rules": "all"})),
			[]string{"rules"},
		},
		"a malformed duration is named with its path": {
			typedStruct(SidecarConfigTypeURL, structOf(map[string]any{"origin": map[string]any{"timeout": "soon"}})),
			[]string{"origin.timeout"},
		},
		"a config that fails Validate names the field": {
			invalid,
			[]string{"shop/frontend", "l1.shards"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(tc.res)
			if err == nil {
				t.Fatal("Decode succeeded")
			}
			if !errors.Is(err, ErrDecode) {
				t.Errorf("error %v does not wrap ErrDecode", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	if _, err := Decode(good); err != nil {
		t.Fatalf("the well-formed resource the cases break does not decode: %v", err)
	}
}

func TestDecodeKeepsFieldErrors(t *testing.T) {
	res, _ := mustEncode(t, "shop/frontend", invalidConfig())
	_, err := Decode(res)
	fe := tierconfig.FieldErrors(err)
	if len(fe) != 1 || fe[0].Field != "l1.shards" {
		t.Fatalf("FieldErrors = %v, want one for l1.shards", fe)
	}
}

func TestTierKeysAreANamespaceAndACacheTierName(t *testing.T) {
	cases := map[string]struct {
		key string
		ok  bool
	}{
		"a namespace and a tier":                 {"shop/web", true},
		"a tier name with dots":                  {"shop/web.v2", true},
		"a tier name of 63 characters":           {"shop/" + strings.Repeat("a", 63), true},
		"a tier name of 64 characters":           {"shop/" + strings.Repeat("a", 64), false},
		"a tier name of 150 kB":                  {"shop/" + strings.Repeat("x", 150_000), false},
		"a namespace with a dot":                 {"sh.op/web", false},
		"upper case":                             {"Shop/web", false},
		"a third part":                           {"shop/web/x", false},
		"no namespace":                           {"/web", false},
		"no tier":                                {"shop/", false},
		"no slash":                               {"shopweb", false},
		"a glob character Redis would interpret": {"shop/w*", false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := ValidateTierKey(tc.key)
			if (err == nil) != tc.ok {
				t.Fatalf("ValidateTierKey(%.40q): %v, want ok=%v", tc.key, err, tc.ok)
			}
			if err != nil && len(err.Error()) > 300 {
				t.Errorf("the error repeats a long key: %d bytes", len(err.Error()))
			}
		})
	}
}
