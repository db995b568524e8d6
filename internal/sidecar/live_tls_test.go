package sidecar

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/tiercache/tiercache/internal/controlplane"
)

// selfSignedTLS returns a server certificate for localhost and the PEM of
// the CA (itself) that clients must trust.
func selfSignedTLS(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tiercache-xds test"},
		DNSNames:              []string{"localhost"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestTheControlPlaneOverTLS(t *testing.T) {
	cert, caPEM := selfSignedTLS(t)
	cp := startControlPlane(t, grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}})))
	_, port, _ := net.SplitHostPort(cp.addr)
	target := "localhost:" + port
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	origin := newLiveOrigin(t)

	trusting := startNode(t, origin.URL, append(liveArgs(target, t.TempDir(), smallL1), "--control-plane-ca", caFile)...)
	plaintext := startNode(t, origin.URL, liveArgs(target, t.TempDir(), smallL1)...)
	trusting.waitReady(t)
	plaintext.waitReady(t)

	v := cp.publish(t, smallL1+"rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n")
	trusting.waitVersion(t, v)
	// The plaintext client cannot talk to a TLS server: it keeps its
	// start-up config and reports itself disconnected.
	time.Sleep(300 * time.Millisecond) // the trusting one applied within this; give the other the same chance
	if got := plaintext.metric(t, `tiercache_config_info{version="`+v+`"}`); got == 1 {
		t.Error("a sidecar without --control-plane-ca applied a config from a TLS control plane")
	}
	if got := plaintext.metric(t, "tiercache_control_plane_connected"); got != 0 {
		t.Errorf("control_plane_connected = %v for the plaintext client, want 0", got)
	}
}

// TestTheControlPlaneWithAnInjectedCAAndAToken: the way an injected
// sidecar connects: the CA as text (TIERCACHE_CONTROL_PLANE_CA_PEM) and a
// token file. A sidecar without the token is refused and keeps its
// start-up config.
func TestTheControlPlaneWithAnInjectedCAAndAToken(t *testing.T) {
	cert, caPEM := selfSignedTLS(t)
	cp := startControlPlaneWith(t, controlplane.Options{
		GRPCOptions: []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}))},
		Authenticate: func(ctx context.Context, node *corev3.Node) (controlplane.Identity, error) {
			tok, err := controlplane.BearerToken(ctx)
			if err != nil {
				return controlplane.Identity{}, err
			}
			if tok != "web-0-token" {
				return controlplane.Identity{}, status.Error(codes.Unauthenticated, "unknown token")
			}
			return controlplane.Identity{Tier: "shop/web"}, nil
		},
	})
	_, port, _ := net.SplitHostPort(cp.addr)
	target := "localhost:" + port
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("web-0-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	origin := newLiveOrigin(t)
	withToken := startNode(t, origin.URL, append(liveArgs(target, t.TempDir(), smallL1),
		"--control-plane-ca-pem", string(caPEM), "--control-plane-token-file", tokenFile)...)
	without := startNode(t, origin.URL, append(liveArgs(target, t.TempDir(), smallL1),
		"--control-plane-ca-pem", string(caPEM))...)
	withToken.waitReady(t)
	without.waitReady(t)

	v := cp.publish(t, smallL1+"rules: [{name: a, match: {pathPrefix: /a}, ttl: 60s}]\n")
	withToken.waitVersion(t, v)
	time.Sleep(300 * time.Millisecond) // the other had the same chance
	if got := without.metric(t, `tiercache_config_info{version="`+v+`"}`); got == 1 {
		t.Error("a sidecar without a token applied a config from an authenticating control plane")
	}
}

func TestAControlPlaneCAThatIsNotPEMIsRefused(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(bad, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := RunWith(t.Context(), append(liveArgs("localhost:1", t.TempDir(), smallL1), "--upstream", "http://127.0.0.1:1",
		"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--control-plane-ca", bad), func(string) string { return "" }, discard{}, nil)
	if err == nil || !strings.Contains(err.Error(), "--control-plane-ca") {
		t.Errorf("got %v", err)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func TestBothControlPlaneCAFlagsAreRefused(t *testing.T) {
	_, err := ParseArgs(append(liveArgs("localhost:1", t.TempDir(), smallL1), "--upstream", "http://127.0.0.1:1",
		"--control-plane-ca", "/ca.crt"), func(k string) string {
		if k == "TIERCACHE_CONTROL_PLANE_CA_PEM" {
			return "-----BEGIN CERTIFICATE-----"
		}
		return ""
	}, discard{})
	if err == nil || !strings.Contains(err.Error(), "--control-plane-ca-pem") {
		t.Errorf("got %v, want an error naming both flags", err)
	}
}
