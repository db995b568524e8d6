package operator

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// The invalidation relay (controlplane.Relay) on the operator's side:
// every replica serves it next to xDS, and, with --relay-peers, receives
// from every other replica the messages published there. A peer proves
// it is a replica of this operator with its own ServiceAccount token,
// which a TokenReview checks to be the operator's ServiceAccount's.

// relayPeers lists the other replicas: the pods --relay-peers selects in
// the operator's namespace that have an address, this one left out.
type relayPeers struct {
	pods     client.Reader // the API server: the cache holds injected pods only
	ns, self string
	selector labels.Selector
	port     string
}

func (p relayPeers) list(ctx context.Context) ([]controlplane.Peer, error) {
	var pods corev1.PodList
	if err := p.pods.List(ctx, &pods, client.InNamespace(p.ns), client.MatchingLabelsSelector{Selector: p.selector}); err != nil {
		return nil, err
	}
	var out []controlplane.Peer
	for _, pod := range pods.Items {
		// A terminating replica is listed until it is gone: it still
		// serves (its shutdown delay), and its stream ends cleanly.
		if pod.Name == p.self || pod.Status.PodIP == "" {
			continue
		}
		out = append(out, controlplane.Peer{Name: pod.Name, Addr: net.JoinHostPort(pod.Status.PodIP, p.port)})
	}
	return out, nil
}

// peerAuthenticator admits the Peer calls that present a token of the
// operator's own ServiceAccount (user), as a TokenReview says.
type peerAuthenticator struct {
	reviews client.Client
	user    string
	now     func() time.Time
	// limit bounds the reviews of tokens not cached: anyone who reaches
	// the port can send made-up tokens.
	limit *rate.Limiter

	mu    sync.Mutex
	cache map[[sha256.Size]byte]peerReview
}

type peerReview struct {
	name  string
	until time.Time
}

func newPeerAuthenticator(reviews client.Client, user string) *peerAuthenticator {
	return &peerAuthenticator{reviews: reviews, user: user, now: time.Now, limit: rate.NewLimiter(1, 10),
		cache: make(map[[sha256.Size]byte]peerReview)}
}

// Authenticate implements controlplane.PeerAuthenticator.
func (a *peerAuthenticator) Authenticate(ctx context.Context) (string, error) {
	tok, err := controlplane.BearerToken(ctx)
	if err != nil {
		return "", err
	}
	h := sha256.Sum256([]byte(tok))
	now := a.now()
	a.mu.Lock()
	r, ok := a.cache[h]
	a.mu.Unlock()
	if ok && now.Before(r.until) {
		return r.name, nil
	}
	if !a.limit.Allow() {
		return "", status.Error(codes.Unavailable, "too many peer tokens to review; retry later")
	}
	tr := &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok}}
	if err := a.reviews.Create(ctx, tr); err != nil {
		return "", status.Errorf(codes.Unavailable, "token review: %v", err)
	}
	if !tr.Status.Authenticated {
		return "", status.Errorf(codes.Unauthenticated, "peer token refused by the API server: %s", tr.Status.Error)
	}
	if got := tr.Status.User.Username; got != a.user {
		return "", status.Errorf(codes.PermissionDenied, "peer token is %q's, not this operator's ServiceAccount %q", got, a.user)
	}
	name := single(tr.Status.User.Extra[extraPodName])
	if name == "" {
		name = a.user
	}
	until := now.Add(reviewMaxAge)
	if exp, ok := jwtExpiry(tok); ok && exp.Before(until) {
		until = exp
	}
	a.mu.Lock()
	if len(a.cache) >= 1000 {
		clear(a.cache)
	}
	a.cache[h] = peerReview{name: name, until: until}
	a.mu.Unlock()
	return name, nil
}

// serviceAccountUser is the user a ServiceAccount token authenticates as
// (its sub claim), read without verifying: it is this replica's own token.
func serviceAccountUser(tok string) (string, error) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return "", fmt.Errorf("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	var c struct {
		Sub string `json:"sub"`
	}
	if err := json.Unmarshal(payload, &c); err != nil {
		return "", fmt.Errorf("payload: %w", err)
	}
	if !strings.HasPrefix(c.Sub, saUserPrefix) {
		return "", fmt.Errorf("subject %q is not a ServiceAccount", c.Sub)
	}
	return c.Sub, nil
}

// relayToken reads this replica's token (the kubelet refreshes it).
func relayToken(path string) func() (string, error) {
	return func() (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("--relay-token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// relayPeerDial are the options of connections to other replicas: with
// TLS, their certificate is the control plane's, checked for the name the
// sidecars check (the host of --control-plane-address, else the xDS
// Service's name), since replicas are dialled by pod address.
func relayPeerDial(o Options) ([]grpc.DialOption, error) {
	if !o.XDSTLS {
		return nil, nil
	}
	pem, err := os.ReadFile(o.xdsCAFile())
	if err != nil {
		return nil, fmt.Errorf("relay peers: the control plane's CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("relay peers: %s: no PEM certificate", o.xdsCAFile())
	}
	name := o.XDSService + "." + o.Namespace + ".svc"
	if host, _, err := net.SplitHostPort(o.ControlPlaneAddress); err == nil && host != "" {
		name = host
	}
	return []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS12, RootCAs: pool, ServerName: name,
	}))}, nil
}

// relayRunnable runs the relay's peer links on every replica.
type relayRunnable struct {
	relay *controlplane.Relay
	ready <-chan struct{} // the certificate files exist
	o     Options
	peers relayPeers
	log   *slog.Logger
}

func (relayRunnable) NeedLeaderElection() bool { return false }

func (r relayRunnable) Start(ctx context.Context) error {
	select {
	case <-r.ready:
	case <-ctx.Done():
		return nil
	}
	dial, err := relayPeerDial(r.o)
	if err != nil {
		return err
	}
	return r.relay.RunPeers(ctx, controlplane.PeerOptions{Peers: r.peers.list, DialOptions: dial, Token: relayToken(r.o.RelayTokenFile)})
}
