package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// tokenTable is an Authenticator over a fixed table of tokens, recording
// every token it is asked about. (The operator's TokenReview
// authenticator is tested against a real API server in
// internal/operator.)
type tokenTable struct {
	mu     sync.Mutex
	tokens map[string]Identity
	seen   []string
	// ttl, when set, makes every identity expire that long after it was
	// checked.
	ttl time.Duration
}

func (tt *tokenTable) authenticate(ctx context.Context, node *corev3.Node) (Identity, error) {
	tok, err := BearerToken(ctx)
	if err != nil {
		return Identity{}, err
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	tt.seen = append(tt.seen, tok)
	id, ok := tt.tokens[tok]
	if !ok {
		return Identity{}, status.Error(codes.Unauthenticated, "unknown token")
	}
	if tt.ttl > 0 {
		id.Expires = time.Now().Add(tt.ttl)
	}
	return id, nil
}

func (tt *tokenTable) seenTokens() []string {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	return append([]string(nil), tt.seen...)
}

func writeToken(t testing.TB, path, tok string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// rawStream opens an ADS stream with its own client, sending token (if
// any) as the authorization metadata.
func rawStream(t *testing.T, addr, token string) discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	t.Cleanup(cancel)
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, AuthorizationKey, "Bearer "+token)
	}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func nodeRequest(id, cluster string, nack bool) *discoveryv3.DiscoveryRequest {
	req := &discoveryv3.DiscoveryRequest{
		Node:          &corev3.Node{Id: id, Cluster: cluster},
		ResourceNames: []string{cluster},
		TypeUrl:       ResourceTypeURL,
	}
	if nack {
		req.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: "attacker text"}
	}
	return req
}

func TestAuthenticatedStreams(t *testing.T) {
	tt := &tokenTable{tokens: map[string]Identity{"web-token": {Tier: "shop/web"}}}
	srv := startServer(t, "127.0.0.1:0", Options{Authenticate: tt.authenticate})
	publish(t, srv, "shop/web", 30)
	publish(t, srv, "shop/admin", 40)

	refusals := []struct {
		name, token, id, cluster string
		code                     codes.Code
		says                     string
	}{
		{"a stream without a token is unauthenticated", "", "shop/web-0", "shop/web", codes.Unauthenticated, "no authorization metadata"},
		{"an unknown token is unauthenticated", "forged", "shop/web-0", "shop/web", codes.Unauthenticated, "unknown token"},
		{"a valid token claiming another tier is denied", "web-token", "shop/web-0", "shop/admin", codes.PermissionDenied, `this credential is for tier "shop/web"`},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			stream := rawStream(t, srv.addr, tc.token)
			// The first request is a NACK: it must not be recorded.
			if err := stream.Send(nodeRequest(tc.id, tc.cluster, true)); err != nil {
				t.Fatal(err)
			}
			resp, err := stream.Recv()
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("got response %v, error %v; want %s saying %q", resp, err, tc.code, tc.says)
			}
			if n := srv.NACKs(tc.cluster); n.Total != 0 {
				t.Errorf("a refused stream's NACK was recorded: %+v", n)
			}
			if n := srv.Connected(tc.cluster); n != 0 {
				t.Errorf("a refused stream is counted as connected (%d)", n)
			}
		})
	}

	t.Run("a stream that changes its node after authenticating is ended", func(t *testing.T) {
		stream := rawStream(t, srv.addr, "web-token")
		if err := stream.Send(nodeRequest("shop/web-0", "shop/web", false)); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if got := resourceName(resp.GetResources()[0]); got != "shop/web" {
			t.Fatalf("served %q, want shop/web", got)
		}
		eventually(t, waitLong, func() bool { return srv.Connected("shop/web") == 1 }, "the authenticated stream is not counted")
		next := nodeRequest("shop/web-0", "shop/admin", false)
		next.ResponseNonce = resp.GetNonce()
		next.VersionInfo = resp.GetVersionInfo()
		if err := stream.Send(next); err != nil {
			t.Fatal(err)
		}
		resp, err = stream.Recv()
		if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "node changed") {
			t.Fatalf("got %v, %v; want PermissionDenied saying the node changed", resp, err)
		}
		eventually(t, waitLong, func() bool { return srv.Connected("shop/web") == 0 }, "the ended stream is still counted")
	})

	t.Run("the legitimate sidecar gets its config", func(t *testing.T) {
		tokenFile := filepath.Join(t.TempDir(), "token")
		writeToken(t, tokenFile, "web-token")
		notify := make(chan applied, 4)
		startSidecar(t, srv.addr, "shop", "web", "web-0", notify, func(o *ClientOptions) { o.TokenFile = tokenFile })
		got := nextApplied(t, notify, "the tier's config")
		if got.cfg.Defaults.FallbackTTL.Std() != 30*time.Second {
			t.Errorf("applied ttl %s, want shop/web's 30s", got.cfg.Defaults.FallbackTTL)
		}
	})
}

// TestTokenExpiryEndsTheStreamAndTheSidecarReconnectsWithTheNewToken:
// the kubelet rewrites the token file before the old token expires; the
// server ends a stream at its token's expiry and the client reconnects
// with the file's new content.
func TestTokenExpiryEndsTheStreamAndTheSidecarReconnectsWithTheNewToken(t *testing.T) {
	tt := &tokenTable{
		tokens: map[string]Identity{"old": {Tier: "shop/web"}, "new": {Tier: "shop/web"}},
		ttl:    300 * time.Millisecond,
	}
	srv := startServer(t, "127.0.0.1:0", Options{Authenticate: tt.authenticate})
	publish(t, srv, "shop/web", 30)
	tokenFile := filepath.Join(t.TempDir(), "token")
	writeToken(t, tokenFile, "old")
	notify := make(chan applied, 4)
	sc := startSidecar(t, srv.addr, "shop", "web", "web-0", notify, func(o *ClientOptions) { o.TokenFile = tokenFile })
	nextApplied(t, notify, "the first config")

	writeToken(t, tokenFile, "new")
	eventually(t, waitLong, func() bool {
		seen := tt.seenTokens()
		return len(seen) > 0 && seen[len(seen)-1] == "new"
	}, "the client did not reconnect with the new token (seen %v)", tt.seenTokens())
	eventually(t, waitLong, func() bool { return sc.State().Connected && srv.Connected("shop/web") == 1 }, "not connected after the rotation")
	// The config did not change: nothing was applied again.
	v := publish(t, srv, "shop/web", 50)
	for a := nextApplied(t, notify, "the next config"); a.version != v; a = nextApplied(t, notify, "the next config") {
	}
}

// TestUnreadableTokenFileIsRetried: a missing token file fails the
// attempt without ending Run; once the file appears the sidecar connects.
func TestUnreadableTokenFileIsRetried(t *testing.T) {
	tt := &tokenTable{tokens: map[string]Identity{"web-token": {Tier: "shop/web"}}}
	srv := startServer(t, "127.0.0.1:0", Options{Authenticate: tt.authenticate})
	publish(t, srv, "shop/web", 30)
	tokenFile := filepath.Join(t.TempDir(), "token")
	notify := make(chan applied, 4)
	sc := startSidecar(t, srv.addr, "shop", "web", "web-0", notify, func(o *ClientOptions) { o.TokenFile = tokenFile })
	select {
	case a := <-notify:
		t.Fatalf("applied %s without a token", a.version)
	case <-time.After(300 * time.Millisecond):
	}
	if len(tt.seenTokens()) != 0 || sc.State().Connected {
		t.Fatalf("connected without a token file")
	}
	writeToken(t, tokenFile, "web-token")
	nextApplied(t, notify, "the config once the token exists")
}

func TestBearerToken(t *testing.T) {
	cases := map[string]struct {
		md   []string // values of the authorization key; nil for none
		want string   // the token, or "" for an Unauthenticated error
		says string
	}{
		"a bearer token is taken":              {[]string{"Bearer abc.def"}, "abc.def", ""},
		"the scheme is case-insensitive":       {[]string{"bearer abc"}, "abc", ""},
		"no metadata is refused":               {nil, "", "no authorization metadata"},
		"another scheme is refused":            {[]string{"Basic dXNlcjpwdw=="}, "", "Bearer <token>"},
		"a scheme without a token is refused":  {[]string{"Bearer "}, "", "Bearer <token>"},
		"two authorization values are refused": {[]string{"Bearer a", "Bearer b"}, "", "more than one"},
		"a value without a scheme is refused":  {[]string{"abc"}, "", "Bearer <token>"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			md := metadata.MD{}
			for _, v := range tc.md {
				md.Append(AuthorizationKey, v)
			}
			got, err := BearerToken(metadata.NewIncomingContext(context.Background(), md))
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Errorf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("got %q, %v; want Unauthenticated saying %q", got, err, tc.says)
			}
		})
	}
}

// TestAStreamIsNotCountedWhileItAuthenticates: until the Authenticator
// has accepted it, a stream is not connected and its NACK is not
// recorded, however long the check takes.
func TestAStreamIsNotCountedWhileItAuthenticates(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	srv := startServer(t, "127.0.0.1:0", Options{Authenticate: func(ctx context.Context, node *corev3.Node) (Identity, error) {
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Identity{}, status.Error(codes.Unauthenticated, "refused after a while")
	}})
	publish(t, srv, "shop/web", 30)
	stream := rawStream(t, srv.addr, "some-token")
	if err := stream.Send(nodeRequest("shop/web-0", "shop/web", true)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(waitLong):
		t.Fatal("the Authenticator was not called")
	}
	if n := srv.Connected("shop/web"); n != 0 {
		t.Errorf("a stream being authenticated is counted as connected (%d)", n)
	}
	if n := srv.NACKs("shop/web"); n.Total != 0 {
		t.Errorf("the NACK of a stream being authenticated was recorded: %+v", n)
	}
	close(release)
	if _, err := stream.Recv(); status.Code(err) != codes.Unauthenticated {
		t.Errorf("got %v, want Unauthenticated", err)
	}
	if n := srv.NACKs("shop/web"); n.Total != 0 {
		t.Errorf("the NACK of a refused stream was recorded: %+v", n)
	}
}
