package worker

import (
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
	"testing"
	"time"
)

// testCA makes a CA and a certificate for 127.0.0.1 signed by it; it
// returns the server's TLS configuration and the CA's PEM file.
func testCA(t *testing.T) (*tls.Config, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "pollux test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "agent"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		MinVersion: tls.VersionTLS12}, caFile
}

// TestReportsOverTLS: with POLLUX_REPORT_CA set, the library reports over
// TLS, verifying the listener's certificate against that CA; a listener
// whose certificate that CA did not sign gets no report.
func TestReportsOverTLS(t *testing.T) {
	l := library(t)
	cfg, caFile := testCA(t)
	s := newTLSSink(t, cfg)
	_, otherCA := testCA(t)
	for _, tc := range []struct {
		name, ca string
		want     bool
	}{{"trusted", caFile, true}, {"untrusted", otherCA, false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := oneRank("digits-tls-"+tc.name, t.TempDir(), s.addr(), "--max-epochs", "1", "--report-every", "0.05")
			r.extraEnv = []string{"POLLUX_REPORT_CA=" + tc.ca}
			ws := start(t, l, r)
			wait(t, ws, 2*time.Minute)
			n := 0
			for _, rep := range s.all() {
				if rep.Job == r.job {
					n++
				}
			}
			if (n > 0) != tc.want {
				t.Errorf("%d reports over TLS with the %s CA; output:\n%s", n, tc.name, tail(ws[0].out.String()))
			}
		})
	}
}
