package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}
	tests := map[string]struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		"the first retry waits at least half the initial delay": {0, 0, 50 * time.Millisecond},
		"the first retry waits less than the initial delay":     {0, 0.999, 99950 * time.Microsecond},
		"each failure doubles the delay":                        {2, 0, 200 * time.Millisecond},
		"the delay is capped at max":                            {10, 0.5, 750 * time.Millisecond},
		"a huge attempt count stays capped":                     {1 << 30, 0, 500 * time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := b.Delay(tc.attempt, tc.r); got != tc.want {
				t.Errorf("Delay(%d, %v) = %s, want %s", tc.attempt, tc.r, got, tc.want)
			}
		})
	}
}

func TestNewClientChecksOptions(t *testing.T) {
	tests := map[string]struct {
		edit func(*ClientOptions)
		want string
	}{
		"a target is required":                 {func(o *ClientOptions) { o.Target = "" }, "target"},
		"a pod name is required":               {func(o *ClientOptions) { o.Pod = "" }, "pod"},
		"a tier name cannot contain a slash":   {func(o *ClientOptions) { o.Tier = "a/b" }, "tier"},
		"an apply hook is required":            {func(o *ClientOptions) { o.Apply = nil }, "apply"},
		"a backoff max below initial is wrong": {func(o *ClientOptions) { o.Backoff = Backoff{Initial: time.Second, Max: time.Millisecond} }, "backoff.max"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := ClientOptions{Target: "127.0.0.1:1", Namespace: "ns", Pod: "p", Tier: "t", Apply: func(ctx context.Context, c tierconfig.Config, v string) error { return nil }}
			tc.edit(&o)
			_, err := NewClient(o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewClient error = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

func TestIsConnError(t *testing.T) {
	tests := map[string]struct {
		err  error
		want bool
	}{
		"no error is not a connection error":            {nil, false},
		"the server ending the stream is one":           {fmt.Errorf("receive: %w", io.EOF), true},
		"an unreachable server is one":                  {fmt.Errorf("open stream: %w", status.Error(codes.Unavailable, "connection refused")), true},
		"the server refusing the node is not":           {status.Error(codes.InvalidArgument, "node.cluster"), false},
		"an error that is not a gRPC status is not one": {errors.New("disk full"), false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := IsConnError(tc.err); got != tc.want {
				t.Errorf("IsConnError(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestClientPicksItsTiersResource(t *testing.T) {
	c, err := NewClient(ClientOptions{Target: "127.0.0.1:1", Namespace: "shop", Pod: "web-0", Tier: "frontend",
		Apply: func(context.Context, tierconfig.Config, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	mine, _ := mustEncode(t, "shop/frontend", ttlConfig(60))
	other, _ := mustEncode(t, "shop/backend", ttlConfig(1))
	bad, _ := mustEncode(t, "shop/frontend", invalidConfig())
	resp := func(typeURL string, res ...*anypb.Any) *discoveryv3.DiscoveryResponse {
		return &discoveryv3.DiscoveryResponse{TypeUrl: typeURL, Resources: res}
	}
	tests := map[string]struct {
		resp      *discoveryv3.DiscoveryResponse
		found     bool
		wantErr   string
		wantTTL60 bool
	}{
		"its own resource is decoded":                  {resp(ResourceTypeURL, mine), true, "", true},
		"its own resource is found among others":       {resp(ResourceTypeURL, other, mine), true, "", true},
		"an empty response withdraws nothing":          {resp(ResourceTypeURL), false, "", false},
		"another tier's resource is refused by name":   {resp(ResourceTypeURL, other), false, `no resource named "shop/frontend" (got "shop/backend")`, false},
		"a response of another type is refused":        {resp("type.googleapis.com/envoy.config.cluster.v3.Cluster", mine), false, "response type", false},
		"an invalid config of its own names the field": {resp(ResourceTypeURL, bad), true, "l1.shards", false},
		"a lone undecodable resource explains why":     {resp(ResourceTypeURL, &anypb.Any{TypeUrl: ResourceTypeURL, Value: []byte{0xff}}), false, "does not unmarshal", false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, found, err := c.pick(tc.resp)
			if found != tc.found {
				t.Errorf("found = %v, want %v", found, tc.found)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error = %v, want %q", err, tc.wantErr)
			}
			if tc.wantTTL60 && cfg.Defaults.FallbackTTL.Std() != time.Minute {
				t.Errorf("decoded fallback TTL %s, want 1m", cfg.Defaults.FallbackTTL)
			}
		})
	}
}
