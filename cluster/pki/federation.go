package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"time"
)

// ChannelFederation is the channel between the control planes of
// federated clusters (docs/federation.md): a server's federation
// listener, dialled by the servers of peer clusters. TLS 1.3 and mutual
// like the internal channels, servers only, but each side checks the
// other against the CA of the cluster its certificate claims (its trust
// domain), not against its own cluster's CA.
const ChannelFederation Channel = "federation"

// PeerPools gives the CA pool a federation trusts for a cluster, and
// false for a cluster that is not a peer.
type PeerPools func(cluster string) (*x509.CertPool, bool)

// FederationServerConfig is the configuration of c's federation
// listener: it shows c's certificate and accepts a peer only with a
// server certificate that names a cluster pools knows and chains to that
// cluster's CAs (so a peer cannot pass for another with its own CA).
// The handler behind it reads the peer with FederationPeer.
func (c *Credentials) FederationServerConfig(pools PeerPools) (*tls.Config, error) {
	if c.Identity.Role != RoleServer || c.Identity.Cluster == "" {
		return nil, fmt.Errorf("%w: the federation channel needs a server certificate that names its cluster, not %s", ErrChannel, c.Identity)
	}
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.current(), nil },
		ClientAuth:     tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			certs, err := parseChain(raw)
			if err != nil {
				return err
			}
			_, _, err = FederationPeer(certs, pools, x509.ExtKeyUsageClientAuth, time.Now())
			return err
		},
	}, nil
}

// FederationClientConfig is the configuration of c dialling the
// federation listener of cluster, whose CAs are pool: the peer must show
// a server certificate of that cluster chaining to pool.
func (c *Credentials) FederationClientConfig(cluster string, pool *x509.CertPool) (*tls.Config, error) {
	if c.Identity.Role != RoleServer || c.Identity.Cluster == "" {
		return nil, fmt.Errorf("%w: the federation channel needs a server certificate that names its cluster, not %s", ErrChannel, c.Identity)
	}
	pools := func(name string) (*x509.CertPool, bool) { return pool, name == cluster }
	return &tls.Config{
		MinVersion:           tls.VersionTLS13,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.current(), nil },
		// The chain is checked below against the peer cluster's pool,
		// with the host name the address dialled.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the federation peer showed no certificate", ErrRefused)
			}
			if _, _, err := FederationPeer(cs.PeerCertificates, pools, x509.ExtKeyUsageServerAuth, time.Now()); err != nil {
				return err
			}
			if cs.ServerName != "" {
				if err := cs.PeerCertificates[0].VerifyHostname(cs.ServerName); err != nil {
					return fmt.Errorf("%w: %s: %w", ErrRefused, describe(cs.PeerCertificates[0]), err)
				}
			}
			return nil
		},
	}, nil
}

// FederationPeer verifies a federation peer's chain (leaf first) at now
// for usage against the pool of the cluster its certificate claims, and
// returns its identity and the fingerprint (Fingerprint) of the CA
// certificate that verified it: what federation.Lab.Trusts checks. The
// peer must be a server of a named cluster that pools knows.
func FederationPeer(certs []*x509.Certificate, pools PeerPools, usage x509.ExtKeyUsage, now time.Time) (Identity, string, error) {
	if len(certs) == 0 {
		return Identity{}, "", fmt.Errorf("%w: no certificate shown on the %s channel", ErrRefused, ChannelFederation)
	}
	leaf := certs[0]
	id, err := IdentityOf(leaf)
	if err != nil {
		return Identity{}, "", err
	}
	if id.Cluster == "" {
		return Identity{}, "", fmt.Errorf("%w: %s names no cluster (spiffe://<cluster>/server/<name>) on the %s channel", ErrRefused, describe(leaf), ChannelFederation)
	}
	if err := checkRole(id, ChannelFederation, []Role{RoleServer}); err != nil {
		return Identity{}, "", err
	}
	pool, ok := pools(id.Cluster)
	if !ok {
		return Identity{}, "", fmt.Errorf("%w: %s: cluster %s is not a peer of this federation", ErrRefused, describe(leaf), id.Cluster)
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return Identity{}, "", fmt.Errorf("%w: %s is not signed by a CA trusted for cluster %s: %w", ErrRefused, describe(leaf), id.Cluster, err)
	}
	chain := chains[0]
	return id, Fingerprint(chain[len(chain)-1]), nil
}

func parseChain(raw [][]byte) ([]*x509.Certificate, error) {
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return nil, fmt.Errorf("%w: unparsable certificate: %w", ErrRefused, err)
		}
		certs = append(certs, c)
	}
	return certs, nil
}
