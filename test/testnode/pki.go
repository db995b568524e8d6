package testnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the node's one CA and the files made from it. Every component
// and the tests authenticate as one admin in system:masters: the node
// tests the product, not Kubernetes' RBAC for its own components.
type pki struct {
	dir string
	ca  *x509.Certificate
	key *ecdsa.PrivateKey
}

// File names in pki.dir.
const (
	caCert      = "ca.crt"
	serverCert  = "apiserver.crt"
	serverKey   = "apiserver.key"
	adminCert   = "admin.crt"
	adminKey    = "admin.key"
	saKey       = "sa.key"
	saPub       = "sa.pub"
	kubeconfigF = "admin.kubeconfig"
)

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tiercache-node-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, key: key}
	if err := p.writePEM(caCert, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	serverName := pkix.Name{CommonName: "kube-apiserver"}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain, "localhost"}
	ips := []net.IP{NodeIP.AsSlice(), APIServiceIP.AsSlice(), net.IPv4(127, 0, 0, 1)}
	if err := p.issue(serverCert, serverKey, serverName, x509.ExtKeyUsageServerAuth, dns, ips); err != nil {
		return nil, err
	}
	admin := pkix.Name{CommonName: "tiercache-node-admin", Organization: []string{"system:masters"}}
	if err := p.issue(adminCert, adminKey, admin, x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return nil, err
	}
	sa, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := p.writeKey(saKey, sa); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&sa.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, p.writePEM(saPub, "PUBLIC KEY", pub)
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) issue(certFile, keyFile string, subject pkix.Name, usage x509.ExtKeyUsage, dns []string, ips []net.IP) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		return err
	}
	if err := p.writePEM(certFile, "CERTIFICATE", der); err != nil {
		return err
	}
	return p.writeKey(keyFile, key)
}

func (p *pki) writeKey(name string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return p.writePEM(name, "PRIVATE KEY", der)
}

func (p *pki) writePEM(name, typ string, der []byte) error {
	return os.WriteFile(p.path(name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
