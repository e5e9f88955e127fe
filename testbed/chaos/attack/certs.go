package attack

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"path/filepath"
	"time"

	"pollux/cluster/pki"
)

// certs are the certificates an attacker may hold: the cluster's own of
// the wrong role (and a server's, for the members' own connections
// during a flood) (stolen from an agent or a user), a self-signed one
// claiming to be a server, an expired server certificate of the cluster
// CA, and one of another CA.
type certs struct {
	server, agent, otherAgent    tls.Certificate
	client                       tls.Certificate
	selfSigned, expired, otherCA tls.Certificate
}

func makeCerts(b *pki.Bundle, server, agent string) (certs, error) {
	var cs certs
	other := "a1"
	if agent == other {
		other = "a0"
	}
	for name, dst := range map[string]*tls.Certificate{server: &cs.server, agent: &cs.agent, other: &cs.otherAgent, pki.DevClient: &cs.client} {
		c, err := b.Credentials(name)
		if err != nil {
			return cs, err
		}
		*dst = c.Cert
	}
	ca, err := pki.LoadCA(b.CA, filepath.Join(b.Dir, pki.CAKeyFile))
	if err != nil {
		return cs, err
	}
	srvID := pki.Identity{Role: pki.RoleServer, Name: server}
	issued := func(ca *pki.CA, req pki.CertRequest) (tls.Certificate, error) {
		is, err := ca.Issue(req)
		if err != nil {
			return tls.Certificate{}, err
		}
		return tls.Certificate{Certificate: [][]byte{is.Cert.Raw}, PrivateKey: is.Key, Leaf: is.Cert}, nil
	}
	if cs.expired, err = issued(ca, pki.CertRequest{Identity: srvID, Hosts: []string{"127.0.0.1"},
		NotBefore: time.Now().Add(-48 * time.Hour), Validity: 24 * time.Hour}); err != nil {
		return cs, fmt.Errorf("an expired certificate: %w", err)
	}
	otherCA, err := pki.NewCA(pki.CAOptions{CommonName: "another CA"})
	if err != nil {
		return cs, err
	}
	if cs.otherCA, err = issued(otherCA, pki.CertRequest{Identity: srvID, Hosts: []string{"127.0.0.1"}}); err != nil {
		return cs, fmt.Errorf("a certificate of another CA: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return cs, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: server, OrganizationalUnit: []string{"server"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		URIs:        []*url.URL{srvID.URI()}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return cs, err
	}
	cs.selfSigned = tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return cs, nil
}
