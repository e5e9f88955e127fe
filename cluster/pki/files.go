package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"
)

// File names `pollux tls` writes in its directory.
const (
	CAFile    = "pollux-ca.pem"
	CAKeyFile = "pollux-ca-key.pem"
)

// CertFiles returns the certificate and key file names of id:
// <role>-<name>.pem and <role>-<name>-key.pem.
func CertFiles(id Identity) (cert, key string) {
	base := string(id.Role) + "-" + id.Name
	return base + ".pem", base + "-key.pem"
}

// WriteCA writes ca's certificate (mode 0644) and key (0600) into dir as
// CAFile and CAKeyFile, refusing to replace existing files.
func WriteCA(dir string, ca *CA) (certPath, keyPath string, err error) {
	return writePair(dir, CAFile, CAKeyFile, ca.Cert, ca.Key)
}

// WriteIssued writes an issued certificate and key into dir under
// CertFiles' names, refusing to replace existing files.
func WriteIssued(dir string, id Identity, is *Issued) (certPath, keyPath string, err error) {
	c, k := CertFiles(id)
	return writePair(dir, c, k, is.Cert, is.Key)
}

func writePair(dir, certName, keyName string, cert *x509.Certificate, key *ecdsa.PrivateKey) (string, string, error) {
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	certPath, keyPath := filepath.Join(dir, certName), filepath.Join(dir, keyName)
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("%w: %s exists; not replacing it", ErrBadFile, p)
		}
	}
	if err := writeNew(keyPath, keyPEM, 0o600); err != nil {
		return "", "", err
	}
	if err := writeNew(certPath, CertPEM(cert), 0o644); err != nil {
		os.Remove(keyPath)
		return "", "", err
	}
	return certPath, keyPath, nil
}

// writeNew creates path (failing if it exists) with mode and data.
func writeNew(path string, data []byte, mode fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(path)
		return fmt.Errorf("%w: writing %s: %w", ErrBadFile, path, err)
	}
	return nil
}

// CheckPrivate checks that path (a private key, a gossip key, a token)
// is a regular file that only its owner may read or write, as ssh does
// with its keys: a key others can read is a key others have. The error
// names the file, its mode and the fix.
func CheckPrivate(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%w: %s is not a regular file", ErrBadFile, path)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return fmt.Errorf("%w: %s has mode %04o: other users may read or change it; make it its owner's alone (chmod 600 %s)",
			ErrUnprotected, path, perm, path)
	}
	return nil
}

// maxPEMFile bounds a certificate or key file.
const maxPEMFile = 1 << 20

func readPEMFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	if st.Size() > maxPEMFile {
		return nil, fmt.Errorf("%w: %s is %d bytes, more than a PEM file should be", ErrBadFile, path, st.Size())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	return b, nil
}

// ParseCerts decodes every CERTIFICATE block of a PEM file's content.
func ParseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no PEM certificate", ErrBadFile)
	}
	return out, nil
}

// ParseKey decodes the first private key block of a PEM file's content,
// which must be an ECDSA key (PKCS #8 or SEC 1).
func ParseKey(b []byte) (*ecdsa.PrivateKey, error) {
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return nil, fmt.Errorf("%w: no PEM private key", ErrBadFile)
		}
		switch blk.Type {
		case "PRIVATE KEY":
			k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
			}
			ek, ok := k.(*ecdsa.PrivateKey)
			if !ok {
				return nil, fmt.Errorf("%w: key is %T, want ECDSA", ErrBadFile, k)
			}
			return ek, nil
		case "EC PRIVATE KEY":
			k, err := x509.ParseECPrivateKey(blk.Bytes)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
			}
			return k, nil
		}
	}
}

// LoadCA reads a CA certificate and its key.
func LoadCA(certPath, keyPath string) (*CA, error) {
	cb, err := readPEMFile(certPath)
	if err != nil {
		return nil, err
	}
	certs, err := ParseCerts(cb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	kb, err := readPEMFile(keyPath)
	if err != nil {
		return nil, err
	}
	key, err := ParseKey(kb)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	c := certs[0]
	if !c.IsCA {
		return nil, fmt.Errorf("%w: %s is not a CA certificate", ErrBadFile, certPath)
	}
	if !key.PublicKey.Equal(c.PublicKey) {
		return nil, fmt.Errorf("%w: %s is not the key of %s", ErrBadFile, keyPath, certPath)
	}
	return &CA{Cert: c, Key: key}, nil
}

// LoadPool reads the cluster CA certificate(s) of a PEM file into a pool.
func LoadPool(caPath string) (*x509.CertPool, error) {
	b, err := readPEMFile(caPath)
	if err != nil {
		return nil, err
	}
	certs, err := ParseCerts(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", caPath, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		if !c.IsCA {
			return nil, fmt.Errorf("%w: %s holds %q, which is not a CA certificate", ErrBadFile, caPath, c.Subject.CommonName)
		}
		pool.AddCert(c)
	}
	return pool, nil
}

// Credentials are what a server or agent proves itself with and checks
// its peers against: the cluster CA, its certificate and key, and the
// identity in it.
type Credentials struct {
	Pool     *x509.CertPool
	Cert     tls.Certificate
	Identity Identity
	// NotAfter is when the certificate expires.
	NotAfter time.Time

	// certPath and keyPath are where Renew reads a renewed certificate;
	// renewed is the newest it read (nil: Cert).
	certPath, keyPath string
	renewed           atomic.Pointer[tls.Certificate]
}

// current is the certificate to show peers: the newest renewal, or Cert.
func (c *Credentials) current() *tls.Certificate {
	if r := c.renewed.Load(); r != nil {
		return r
	}
	return &c.Cert
}

// Renew re-reads the certificate and key from the files they were
// loaded from (a certificate renewed in place, pollux tls cert create)
// and shows it on every new connection from then on. It must chain to
// the same CA pool and name the same identity; otherwise nothing
// changes. It returns the new certificate's expiry.
func (c *Credentials) Renew() (time.Time, error) {
	if c.certPath == "" {
		return time.Time{}, fmt.Errorf("%w: credentials not loaded from files", ErrBadFile)
	}
	pair, err := loadPair(c.certPath, c.keyPath)
	if err != nil {
		return time.Time{}, err
	}
	id, err := verifyLeaf(c.Pool, pair.Certificate, x509.ExtKeyUsageClientAuth, time.Now())
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", c.certPath, err)
	}
	if id != c.Identity {
		return time.Time{}, fmt.Errorf("%w: %s is the certificate of %s, want %s", ErrBadFile, c.certPath, id, c.Identity)
	}
	c.renewed.Store(&pair)
	return pair.Leaf.NotAfter, nil
}

// loadPair reads a certificate and its key.
func loadPair(certPath, keyPath string) (tls.Certificate, error) {
	cb, err := readPEMFile(certPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	kb, err := readPEMFile(keyPath)
	if err != nil {
		return tls.Certificate{}, err
	}
	pair, err := tls.X509KeyPair(cb, kb)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("%w: %s and %s: %w", ErrBadFile, certPath, keyPath, err)
	}
	return pair, nil
}

// LoadCredentials reads the CA file, certificate and key, and checks that
// the certificate is the key's, is signed by the CA, is valid now and
// names a pollux identity.
func LoadCredentials(caPath, certPath, keyPath string) (*Credentials, error) {
	pool, err := LoadPool(caPath)
	if err != nil {
		return nil, err
	}
	pair, err := loadPair(certPath, keyPath)
	if err != nil {
		return nil, err
	}
	leaf := pair.Leaf
	id, err := verifyLeaf(pool, pair.Certificate, x509.ExtKeyUsageClientAuth, time.Now())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	return &Credentials{Pool: pool, Cert: pair, Identity: id, NotAfter: leaf.NotAfter, certPath: certPath, keyPath: keyPath}, nil
}
