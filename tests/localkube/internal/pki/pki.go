// Package pki creates, once, the certificates and keys of the local cluster and keeps them across
// restarts: a CA, the API server's serving certificate, the admin client certificate and the
// service-account signing key pair.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Names of the files in the pki directory.
const (
	CACert     = "ca.crt"
	CAKey      = "ca.key"
	ServerCert = "apiserver.crt"
	ServerKey  = "apiserver.key"
	AdminCert  = "admin.crt"
	AdminKey   = "admin.key"
	SAKey      = "sa.key"
	SAPub      = "sa.pub"
	// The front proxy (requestheader) CA and the API server's client certificate for it: the
	// API server's aggregation layer uses them, and the controller manager and scheduler read
	// the CA from kube-system/extension-apiserver-authentication (they log errors without it).
	FrontProxyCACert = "front-proxy-ca.crt"
	FrontProxyCAKey  = "front-proxy-ca.key"
	FrontProxyCert   = "front-proxy-client.crt"
	FrontProxyKey    = "front-proxy-client.key"
	FrontProxyClient = "front-proxy-client"
)

// A local test cluster lives for years at most; renewing leaf certificates a month before they
// expire keeps an old checkout working without a reset.
const (
	caValidity   = 20 * 365 * 24 * time.Hour
	leafValidity = 2 * 365 * 24 * time.Hour
	renewBefore  = 30 * 24 * time.Hour
)

// ServingSANs are what the API server's certificate must name.
type ServingSANs struct {
	IPs   []net.IP
	DNS   []string
	Owner string // common name
}

// Ensure creates whatever is missing or stale in dir and returns nothing else: every consumer
// reads the files.
func Ensure(dir string, sans ServingSANs) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ca, caKey, err := ensureCA(dir, CACert, CAKey, "localkube-ca")
	if err != nil {
		return fmt.Errorf("CA: %w", err)
	}
	serving := &x509.Certificate{
		Subject:     pkix.Name{CommonName: sans.Owner},
		IPAddresses: sans.IPs,
		DNSNames:    sans.DNS,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if err := ensureLeaf(dir, ServerCert, ServerKey, serving, ca, caKey); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	admin := &x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ensureLeaf(dir, AdminCert, AdminKey, admin, ca, caKey); err != nil {
		return fmt.Errorf("admin certificate: %w", err)
	}
	fpCA, fpKey, err := ensureCA(dir, FrontProxyCACert, FrontProxyCAKey, "localkube-front-proxy-ca")
	if err != nil {
		return fmt.Errorf("front proxy CA: %w", err)
	}
	proxyClient := &x509.Certificate{
		Subject:     pkix.Name{CommonName: FrontProxyClient},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if err := ensureLeaf(dir, FrontProxyCert, FrontProxyKey, proxyClient, fpCA, fpKey); err != nil {
		return fmt.Errorf("front proxy client certificate: %w", err)
	}
	if err := ensureSAKeys(dir); err != nil {
		return fmt.Errorf("service-account keys: %w", err)
	}
	return nil
}

func ensureCA(dir, certName, keyName, commonName string) (*x509.Certificate, crypto.Signer, error) {
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if cert, key, err := load(certPath, keyPath); err == nil {
		return cert, key, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := sign(tmpl, tmpl, key.Public(), key, caValidity)
	if err != nil {
		return nil, nil, err
	}
	if err := writeKeyPair(certPath, keyPath, der, key); err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	return cert, key, err
}

func ensureLeaf(dir, certName, keyName string, tmpl, ca *x509.Certificate, caKey crypto.Signer) error {
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if cert, _, err := load(certPath, keyPath); err == nil && fresh(cert, tmpl, ca) {
		return nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	der, err := sign(tmpl, ca, key.Public(), caKey, leafValidity)
	if err != nil {
		return err
	}
	return writeKeyPair(certPath, keyPath, der, key)
}

// fresh reports whether an existing certificate can be kept: signed by this CA, not about to
// expire, and naming at least what the template names.
func fresh(cert, tmpl, ca *x509.Certificate) bool {
	if cert.CheckSignatureFrom(ca) != nil || time.Until(cert.NotAfter) < renewBefore {
		return false
	}
	if cert.Subject.CommonName != tmpl.Subject.CommonName {
		return false
	}
	for _, ip := range tmpl.IPAddresses {
		if cert.VerifyHostname(ip.String()) != nil {
			return false
		}
	}
	for _, name := range tmpl.DNSNames {
		if cert.VerifyHostname(name) != nil {
			return false
		}
	}
	return true
}

func ensureSAKeys(dir string) error {
	keyPath, pubPath := filepath.Join(dir, SAKey), filepath.Join(dir, SAPub)
	if _, err := os.Stat(keyPath); err == nil {
		if _, err := os.Stat(pubPath); err == nil {
			return nil
		}
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600); err != nil {
		return err
	}
	return writePEM(pubPath, "PUBLIC KEY", pub, 0o644)
}

func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, signer crypto.Signer, validity time.Duration) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	t := *tmpl
	t.SerialNumber = serial
	t.NotBefore = time.Now().Add(-time.Hour) // tolerate a little clock skew between processes
	t.NotAfter = time.Now().Add(validity)
	return x509.CreateCertificate(rand.Reader, &t, parent, pub, signer)
}

func load(certPath, keyPath string) (*x509.Certificate, crypto.Signer, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s is not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s holds no signing key", keyPath)
	}
	return cert, signer, nil
}

// Keys are PKCS#8 ("PRIVATE KEY"), which client-go, rustls and openssl all read.
func writeKeyPair(certPath, keyPath string, der []byte, key crypto.Signer) error {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writePEM(keyPath, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return err
	}
	return writePEM(certPath, "CERTIFICATE", der, 0o644)
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
