package leasehold_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	leasehold "github.com/leasehold/leasehold/clients/go"
)

// certificates writes a CA and a server certificate for 127.0.0.1 signed by
// it; it answers the CA file, the server's certificate and key files, and
// the CA as a pool.
func certificates(t *testing.T) (string, string, string, *x509.CertPool) {
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasehold go test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	serverKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serverTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	serverDER, err := x509.CreateCertificate(rand.Reader, serverTemplate, ca, &serverKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", serverDER),
		write("server.key", "PRIVATE KEY", keyDER), pool
}

func TestHTTPSWithACAFileAndUntrustedIsUnavailable(t *testing.T) {
	caFile, certFile, keyFile, pool := certificates(t)
	probe := &http.Client{Timeout: 500 * time.Millisecond, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	svc := launchService(t, nil, []string{"LEASEHOLD_TLS_CERT_FILE=" + certFile, "LEASEHOLD_TLS_KEY_FILE=" + keyFile}, "https", probe)
	ctx := context.Background()
	res, _ := leasehold.NewResource("go-tls", uniqueID())
	trusting, err := leasehold.New(svc.url, leasehold.Options{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := leasehold.NewAttempt("op-tls")
	got, err := trusting.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second})
	if err != nil || !got.Held() {
		t.Fatalf("acquire over https: %+v %v", got, err)
	}
	if _, err := got.Lease.Release(ctx); err != nil {
		t.Fatal(err)
	}
	untrusting := newClient(t, svc.url)
	_, err = untrusting.Acquire(ctx, res, a, leasehold.AcquireOptions{TTL: 5 * time.Second})
	var le *leasehold.Error
	if !errors.Is(err, leasehold.ErrUnavailable) || !errors.As(err, &le) || le.Cause != "tls" {
		t.Fatalf("untrusted: %v", err)
	}
	if _, err := leasehold.New(svc.url, leasehold.Options{CAFile: keyFile}); err == nil {
		t.Fatal("a CA file without a certificate was accepted")
	}
}
