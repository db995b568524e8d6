package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// AuthorizationKey is the gRPC metadata key of the sidecar's credential,
// sent as "Bearer <token>".
const AuthorizationKey = "authorization"

// Identity is what an Authenticator proved about a stream's peer.
type Identity struct {
	// Tier is the "<namespace>/<tier>" the peer may subscribe to; the
	// Server refuses a node whose cluster differs.
	Tier string
	// Expires is when the credential must be checked again: the Server
	// ends the stream then (Unavailable), and the sidecar reconnects,
	// with a fresh token when the kubelet has refreshed it. Zero means
	// never.
	Expires time.Time
}

// Authenticator decides whether a stream may be served. ctx carries the
// stream's incoming gRPC metadata (BearerToken reads it); node is the one
// the first request claims. An error refuses the stream: a gRPC status
// error is returned to the peer as it is (Unauthenticated for a missing or
// invalid credential, PermissionDenied for a claim the credential does not
// back, Unavailable when the check itself could not be made); any other
// error is returned as Unauthenticated.
type Authenticator func(ctx context.Context, node *corev3.Node) (Identity, error)

// BearerToken returns the bearer token of the incoming gRPC metadata in
// ctx, or an Unauthenticated status error saying what is missing.
func BearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(AuthorizationKey)
	if len(vals) == 0 {
		return "", status.Error(codes.Unauthenticated, "no "+AuthorizationKey+" metadata: the sidecar needs --control-plane-token-file (a projected ServiceAccount token)")
	}
	if len(vals) > 1 {
		return "", status.Error(codes.Unauthenticated, "more than one "+AuthorizationKey+" metadata value")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", status.Error(codes.Unauthenticated, AuthorizationKey+" metadata: want \"Bearer <token>\"")
	}
	return strings.TrimSpace(token), nil
}

// firstRequestTimeout bounds how long an authenticating stream may take
// to send its first request (which names the node).
const firstRequestTimeout = 30 * time.Second

// authenticate reads the stream's first request, checks its node with
// auth, and returns a stream that replays that request, refuses any later
// request claiming another node, and ends when the identity expires. Until
// it returns, nothing of the stream has reached the SotW server, so a
// refused stream is never counted, never NACKs and is sent nothing. stop
// (which ends the owned reader goroutine) must be called once the handler
// is done with the stream.
func authenticate(serverCtx context.Context, stream discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer, auth Authenticator) (*authStream, error) {
	ctx, cancel := context.WithCancel(stream.Context())
	s := &authStream{
		AggregatedDiscoveryService_StreamAggregatedResourcesServer: stream,
		reqs:   make(chan *discoverygrpc.DiscoveryRequest),
		cancel: cancel,
	}
	go s.read(ctx)

	t := time.NewTimer(firstRequestTimeout)
	defer t.Stop()
	var first *discoverygrpc.DiscoveryRequest
	select {
	case req, ok := <-s.reqs:
		if !ok {
			cancel()
			return nil, s.recvErr
		}
		first = req
	case <-t.C:
		cancel()
		return nil, status.Errorf(codes.DeadlineExceeded, "no first request within %s", firstRequestTimeout)
	case <-serverCtx.Done():
		cancel()
		return nil, status.Error(codes.Unavailable, "control plane shutting down")
	}
	node := first.GetNode()
	if node == nil {
		cancel()
		return nil, status.Error(codes.InvalidArgument, "node: the first request must name the node")
	}
	if err := ValidateTierKey(node.GetCluster()); err != nil {
		cancel()
		return nil, status.Errorf(codes.InvalidArgument, "node.cluster: %v", err)
	}
	authCtx, cancelAuth := context.WithCancel(stream.Context())
	stopAuth := context.AfterFunc(serverCtx, cancelAuth)
	id, err := auth(authCtx, node)
	stopAuth()
	cancelAuth()
	if err != nil {
		cancel()
		if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
			return nil, err
		}
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	if id.Tier != node.GetCluster() {
		cancel()
		return nil, status.Errorf(codes.PermissionDenied, "node.cluster %q: this credential is for tier %q", node.GetCluster(), id.Tier)
	}
	s.id, s.cluster, s.first = node.GetId(), node.GetCluster(), first
	s.ctx = ctx
	if !id.Expires.IsZero() {
		var cancelExp context.CancelFunc
		s.ctx, cancelExp = context.WithDeadline(ctx, id.Expires)
		s.cancel = func() { cancelExp(); cancel() }
	}
	return s, nil
}

// authStream is an authenticated ADS stream (see authenticate).
type authStream struct {
	discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesServer
	// ctx ends at the credential's expiry, or when the stream ends.
	ctx    context.Context
	cancel context.CancelFunc
	// reqs carries what the reader goroutine received; it is closed
	// after recvErr is set.
	reqs    chan *discoverygrpc.DiscoveryRequest
	recvErr error
	// id and cluster are the authenticated node's; first is the request
	// that named them, replayed by the first Recv.
	id, cluster string
	first       *discoverygrpc.DiscoveryRequest

	mu   sync.Mutex
	fail error // why Recv ended the stream, returned by the handler
}

// read receives requests until the stream fails or ctx ends. gRPC's Recv
// cannot be interrupted, so it runs here, where a credential's expiry does
// not have to wait for it: it returns when the handler returns.
func (s *authStream) read(ctx context.Context) {
	defer close(s.reqs)
	for {
		req, err := s.AggregatedDiscoveryService_StreamAggregatedResourcesServer.Recv()
		if err != nil {
			s.recvErr = err
			return
		}
		select {
		case s.reqs <- req:
		case <-ctx.Done():
			s.recvErr = ctx.Err()
			return
		}
	}
}

func (s *authStream) Context() context.Context { return s.ctx }

func (s *authStream) Recv() (*discoverygrpc.DiscoveryRequest, error) {
	if req := s.first; req != nil {
		s.first = nil
		return req, nil
	}
	select {
	case req, ok := <-s.reqs:
		if !ok {
			return nil, s.recvErr
		}
		if n := req.GetNode(); n != nil && (n.GetId() != s.id || n.GetCluster() != s.cluster) {
			return nil, s.setFail(status.Errorf(codes.PermissionDenied, "node changed within the stream (id %q, cluster %q; authenticated as %q, %q)",
				n.GetId(), n.GetCluster(), s.id, s.cluster))
		}
		return req, nil
	case <-s.ctx.Done():
		if errors.Is(s.ctx.Err(), context.DeadlineExceeded) {
			// Unavailable: the client reconnects at once, as after an
			// operator restart, and authenticates again.
			return nil, s.setFail(status.Error(codes.Unavailable, "the stream's credential is due for re-authentication: reconnect"))
		}
		return nil, s.ctx.Err()
	}
}

func (s *authStream) setFail(err error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail == nil {
		s.fail = err
	}
	return err
}

// failure is why the stream was ended by Recv, or nil.
func (s *authStream) failure() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fail
}

// readToken reads a bearer token file (a projected ServiceAccount token,
// which the kubelet rewrites before it expires).
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("token file %s: empty", path)
	}
	if strings.ContainsAny(tok, " \r\n\t") {
		return "", fmt.Errorf("token file %s: not a single token", path)
	}
	return tok, nil
}
