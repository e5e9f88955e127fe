package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Default validities, as Nomad's and Consul's tls commands: the CA five
// years, a certificate one year.
const (
	DefaultCAValidity   = 5 * 365 * 24 * time.Hour
	DefaultCertValidity = 365 * 24 * time.Hour
)

// backdate is how far before "now" a certificate starts to be valid, so
// that peers whose clocks are a little behind accept it.
const backdate = 5 * time.Minute

// Organization is the subject organisation of every certificate.
const Organization = "pollux"

// CA is a cluster certificate authority: its certificate and key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CAOptions describe a new CA. Zero fields take defaults.
type CAOptions struct {
	// CommonName (default "pollux cluster CA").
	CommonName string
	// NotBefore (default now - 5 min) and Validity (default
	// DefaultCAValidity).
	NotBefore time.Time
	Validity  time.Duration
	// Rand is the source of keys and serial numbers (default
	// crypto/rand).
	Rand io.Reader
}

// NewCA makes a self-signed ECDSA P-256 CA that may sign only end-entity
// certificates (path length 0).
func NewCA(o CAOptions) (*CA, error) {
	if o.CommonName == "" {
		o.CommonName = "pollux cluster CA"
	}
	if o.Rand == nil {
		o.Rand = rand.Reader
	}
	if o.NotBefore.IsZero() {
		o.NotBefore = time.Now().Add(-backdate)
	}
	if o.Validity == 0 {
		o.Validity = DefaultCAValidity
	}
	if o.Validity < 0 {
		return nil, fmt.Errorf("%w: validity %v", ErrBadName, o.Validity)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), o.Rand)
	if err != nil {
		return nil, fmt.Errorf("pki: CA key: %w", err)
	}
	serial, err := newSerial(o.Rand)
	if err != nil {
		return nil, err
	}
	ski := keyID(&key.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: o.CommonName, Organization: []string{Organization}},
		NotBefore:             o.NotBefore,
		NotAfter:              o.NotBefore.Add(o.Validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski,
	}
	der, err := x509.CreateCertificate(o.Rand, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("pki: signing CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parsing CA: %w", err)
	}
	return &CA{Cert: cert, Key: key}, nil
}

// CertRequest describes a certificate to issue.
type CertRequest struct {
	Identity Identity
	// Hosts are the IP addresses and DNS names the holder serves on;
	// 127.0.0.1, ::1 and localhost are always added for servers and
	// agents (clients serve nothing and get none).
	Hosts []string
	// NotBefore (default now - 5 min) and Validity (default
	// DefaultCertValidity). A certificate never outlives its CA.
	NotBefore time.Time
	Validity  time.Duration
	// Rand (default crypto/rand).
	Rand io.Reader
}

// Issued is a certificate and its key.
type Issued struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issue signs a new certificate for req. Servers and agents may act as
// TLS servers and clients; a client certificate only as a TLS client.
func (ca *CA) Issue(req CertRequest) (*Issued, error) {
	if err := req.Identity.Validate(); err != nil {
		return nil, err
	}
	if req.Rand == nil {
		req.Rand = rand.Reader
	}
	if req.NotBefore.IsZero() {
		req.NotBefore = time.Now().Add(-backdate)
	}
	if req.Validity == 0 {
		req.Validity = DefaultCertValidity
	}
	if req.Validity < 0 {
		return nil, fmt.Errorf("%w: validity %v", ErrBadName, req.Validity)
	}
	notAfter := req.NotBefore.Add(req.Validity)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	id := req.Identity
	tmpl := &x509.Certificate{
		Subject: pkix.Name{CommonName: id.Name, OrganizationalUnit: []string{string(id.Role)},
			Organization: []string{Organization}},
		NotBefore:      req.NotBefore,
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:           []*url.URL{id.URI()},
		AuthorityKeyId: ca.Cert.SubjectKeyId,
	}
	if id.Role != RoleClient {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		hosts := append([]string{"127.0.0.1", "::1", "localhost"}, req.Hosts...)
		for _, h := range hosts {
			h = strings.TrimSpace(h)
			if h == "" {
				continue
			}
			if ip := net.ParseIP(h); ip != nil {
				if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
					tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
				}
				continue
			}
			if !dnsRE.MatchString(h) {
				return nil, fmt.Errorf("%w: host %q is neither an IP address nor a DNS name", ErrBadName, h)
			}
			if !slices.Contains(tmpl.DNSNames, h) {
				tmpl.DNSNames = append(tmpl.DNSNames, h)
			}
		}
	} else if len(req.Hosts) > 0 {
		return nil, fmt.Errorf("%w: a client certificate serves no host (got %v)", ErrBadName, req.Hosts)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), req.Rand)
	if err != nil {
		return nil, fmt.Errorf("pki: key: %w", err)
	}
	if tmpl.SerialNumber, err = newSerial(req.Rand); err != nil {
		return nil, err
	}
	tmpl.SubjectKeyId = keyID(&key.PublicKey)
	der, err := x509.CreateCertificate(req.Rand, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: signing %s: %w", id, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parsing %s: %w", id, err)
	}
	return &Issued{Cert: cert, Key: key}, nil
}

// dnsRE is a DNS name (or a wildcard one) as certificates carry them.
var dnsRE = regexp.MustCompile(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$`)

func newSerial(r io.Reader) (*big.Int, error) {
	s, err := rand.Int(r, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("pki: serial number: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// keyID is a subject key identifier: the first 20 bytes of the SHA-256
// of the public key's encoding.
func keyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(der)
	return sum[:20]
}

// Fingerprint is the SHA-256 of a certificate, in hex: what to compare
// by eye.
func Fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:])
}

// CertPEM encodes a certificate.
func CertPEM(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// KeyPEM encodes a private key (PKCS #8).
func KeyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("pki: encoding key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
