package pki

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		t.Fatalf("%s: not PEM", path)
	}
	c, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var sans = ServingSANs{
	Owner: "kube-apiserver",
	IPs:   []net.IP{net.ParseIP("10.213.0.1"), net.ParseIP("127.0.0.1")},
	DNS:   []string{"localhost", "kubernetes.default.svc"},
}

func TestEnsureMakesAChainThatVerifies(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, sans); err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, filepath.Join(dir, CACert))
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	server := readCert(t, filepath.Join(dir, ServerCert))
	for _, host := range []string{"10.213.0.1", "127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := server.Verify(x509.VerifyOptions{Roots: pool, DNSName: host}); err != nil {
			t.Errorf("serving certificate for %s: %v", host, err)
		}
	}
	admin := readCert(t, filepath.Join(dir, AdminCert))
	if _, err := admin.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("admin certificate: %v", err)
	}
	if admin.Subject.CommonName != "admin" || len(admin.Subject.Organization) != 1 || admin.Subject.Organization[0] != "system:masters" {
		t.Errorf("admin subject = %v", admin.Subject)
	}
	if st, err := os.Stat(filepath.Join(dir, SAKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("sa.key: %v %v", st, err)
	}
}

func TestEnsureKeepsWhatIsValidAndRenewsWhatIsNot(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, sans); err != nil {
		t.Fatal(err)
	}
	ca1 := readCert(t, filepath.Join(dir, CACert))
	srv1 := readCert(t, filepath.Join(dir, ServerCert))
	if err := Ensure(dir, sans); err != nil {
		t.Fatal(err)
	}
	if srv2 := readCert(t, filepath.Join(dir, ServerCert)); srv2.SerialNumber.Cmp(srv1.SerialNumber) != 0 {
		t.Error("a valid serving certificate was replaced")
	}
	more := sans
	more.DNS = append(append([]string{}, sans.DNS...), "kubernetes.default.svc.cluster.local")
	if err := Ensure(dir, more); err != nil {
		t.Fatal(err)
	}
	srv3 := readCert(t, filepath.Join(dir, ServerCert))
	if srv3.SerialNumber.Cmp(srv1.SerialNumber) == 0 || srv3.VerifyHostname("kubernetes.default.svc.cluster.local") != nil {
		t.Error("a serving certificate missing a SAN was kept")
	}
	if ca3 := readCert(t, filepath.Join(dir, CACert)); !ca3.Equal(ca1) {
		t.Error("the CA changed")
	}
}

func TestWriteKubeconfigEmbedsCredentials(t *testing.T) {
	dir := t.TempDir()
	if err := Ensure(dir, sans); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := WriteKubeconfig(path, dir, "https://10.213.0.1:6443", "localkube", "admin"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"certificate-authority-data:", "client-certificate-data:", "client-key-data:", "server: https://10.213.0.1:6443", "current-context: localkube"} {
		if !contains(string(b), want) {
			t.Errorf("kubeconfig lacks %q", want)
		}
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}
