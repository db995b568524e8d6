package controlplane

import (
	"context"
	"maps"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// TestSidecarsSaysWhatEachSidecarHolds connects three real clients of one
// tier: one applies every version, one refuses the second, one is stuck
// applying it. Sidecars must count them by the version they hold and the
// version they refused, follow them as they move on or leave, and
// OnChange must name the tier on each move.
func TestSidecarsSaysWhatEachSidecarHolds(t *testing.T) {
	changes := make(chan string, 1024)
	srv := startServer(t, "127.0.0.1:0", Options{OnChange: func(tier string) {
		select {
		case changes <- tier:
		default:
		}
	}})
	const tier = "shop/frontend"
	v1 := publish(t, srv, tier, 60)

	notify := make(chan applied, 16)
	good := startSidecar(t, srv.addr, "shop", "frontend", "good", notify)
	refuser := startSidecar(t, srv.addr, "shop", "frontend", "refuser", notify)
	release := make(chan struct{})
	stuck := startSidecar(t, srv.addr, "shop", "frontend", "stuck", notify, func(o *ClientOptions) {
		apply := o.Apply
		o.Apply = func(ctx context.Context, c tierconfig.Config, version string) error {
			if version != v1 {
				// Stuck until released: it holds v1 meanwhile.
				select {
				case <-release:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return apply(ctx, c, version)
		}
	})
	for range 3 {
		nextApplied(t, notify, "the first config")
	}
	want := func(what string, connected int, applied, rejected map[string]int) {
		t.Helper()
		var got Sidecars
		for deadline := time.Now().Add(waitLong); ; time.Sleep(5 * time.Millisecond) {
			got = srv.Sidecars()[tier]
			if got.Connected == connected && maps.Equal(got.Applied, applied) && maps.Equal(got.Rejected, rejected) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: Sidecars = %+v, want %d connected, applied %v, rejected %v", what, got, connected, applied, rejected)
			}
		}
	}
	want("all on the first version", 3, map[string]int{v1: 3}, map[string]int{})
	if changed := drain(changes); !changed[tier] {
		t.Errorf("OnChange named %v, want %s", changed, tier)
	}

	_, v2, _ := Encode(tier, ttlConfig(120))
	refuser.mu.Lock()
	refuser.fail = v2
	refuser.mu.Unlock()
	if got := publish(t, srv, tier, 120); got != v2 {
		t.Fatalf("published %s, want %s", got, v2)
	}
	nextApplied(t, notify, "the second config on the good sidecar")
	want("one applied, one refused, one stuck", 3, map[string]int{v2: 1, v1: 2}, map[string]int{v2: 1})
	if changed := drain(changes); !changed[tier] {
		t.Errorf("OnChange named %v after the ACK and the NACK, want %s", changed, tier)
	}

	close(release)
	nextApplied(t, notify, "the second config on the stuck sidecar")
	want("the stuck one applied", 3, map[string]int{v2: 2, v1: 1}, map[string]int{v2: 1})

	// The next version is accepted by all: the refusal is over.
	v3 := publish(t, srv, tier, 180)
	for range 3 {
		nextApplied(t, notify, "the third config")
	}
	want("all on the third version", 3, map[string]int{v3: 3}, map[string]int{})
	if n := srv.Sidecars()[tier].NACKs; n.Total != 1 || n.Last.Node != "shop/refuser" || n.Last.Version != v2 {
		t.Errorf("NACKs = %+v, want the refuser's one of %s", n, v2)
	}

	good.stop()
	stuck.stop()
	want("two left", 1, map[string]int{v3: 1}, map[string]int{})
	drain(changes)
	refuser.stop()
	want("all left", 0, map[string]int{}, map[string]int{})
	if changed := drain(changes); !changed[tier] {
		t.Errorf("OnChange did not name %s when the last stream closed", tier)
	}

	// A tier without streams stays reported while it has NACKs; Clear
	// forgets them.
	if got, ok := srv.Sidecars()[tier]; !ok || got.NACKs.Total != 1 {
		t.Errorf("Sidecars()[%s] = %+v, %v: want its NACK kept", tier, got, ok)
	}
	srv.Clear(tier)
	if got, ok := srv.Sidecars()[tier]; ok {
		t.Errorf("Sidecars()[%s] = %+v after Clear, want absent", tier, got)
	}
}

// TestAVersionInfoThatIsNoVersionIsReportedAsUnknown: a client's
// version_info is its own to send; what is not a version does not travel
// further as one.
func TestAVersionInfoThatIsNoVersionIsReportedAsUnknown(t *testing.T) {
	srv := startServer(t, "127.0.0.1:0", Options{})
	conn, err := grpc.NewClient(srv.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		VersionInfo:   strings.Repeat("Z", 10_000),
		Node:          &corev3.Node{Id: "shop/web-0", Cluster: "shop/frontend"},
		ResourceNames: []string{"shop/frontend"},
		TypeUrl:       ResourceTypeURL,
	}); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitLong, func() bool { return srv.Sidecars()["shop/frontend"].Connected == 1 }, "the stream was not counted")
	if got := srv.Sidecars()["shop/frontend"].Applied; !maps.Equal(got, map[string]int{"": 1}) {
		t.Errorf("Applied = %v, want the sidecar counted under \"\" (unknown)", got)
	}
}

func TestVersionOrEmpty(t *testing.T) {
	v := Version(ttlConfig(60))
	cases := []struct {
		name, in, want string
	}{
		{"a version is kept", v, v},
		{"a short hex prefix is kept", v[:12], v[:12]},
		{"nothing is unknown", "", ""},
		{"upper case is no version", strings.ToUpper(v), ""},
		{"a longer string than a sha256 is no version", v + "0", ""},
		{"text is no version", "latest", ""},
		{"a newline is no version", v[:10] + "\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := versionOrEmpty(c.in); got != c.want {
				t.Errorf("versionOrEmpty(%q) = %q, want %q", c.in, got, c.want)
			}
		})
	}
}

// drain returns the tiers signalled so far.
func drain(ch <-chan string) map[string]bool {
	out := map[string]bool{}
	for {
		select {
		case tier := <-ch:
			out[tier] = true
		default:
			return out
		}
	}
}
