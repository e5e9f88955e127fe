package pki

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Channel is one kind of connection of the cluster.
type Channel string

// The channels.
const (
	// ChannelRaft is a server's Raft port: Raft RPCs and the write
	// forwarding of followers to the leader. Servers only.
	ChannelRaft Channel = "raft"
	// ChannelActor is actor remoting (protoactor's gRPC): servers talk to
	// servers and agents, agents to servers only.
	ChannelActor Channel = "actor"
	// ChannelAPI is the HTTP API of a server: anyone with the CA may
	// connect; a certificate is optional and, if shown, must be the
	// cluster CA's.
	ChannelAPI Channel = "api"
	// ChannelReport is an agent's report port, where its workers (which
	// hold no certificate) send progress reports.
	ChannelReport Channel = "report"
)

// acceptFrom[ch][r] lists the roles whose certificates a holder of role r
// accepts from peers that connect to it on the mutual channel ch. A
// dialer of role d accepts a peer of role r if d is in acceptFrom[ch][r]:
// a dialer only reaches peers that would accept it.
var acceptFrom = map[Channel]map[Role][]Role{
	ChannelRaft:       {RoleServer: {RoleServer}},
	ChannelActor:      {RoleServer: {RoleServer, RoleAgent}, RoleAgent: {RoleServer}},
	ChannelFederation: {RoleServer: {RoleServer}},
}

// Accepts returns the roles a holder of role me accepts as the peer on
// ch, when it listens (dialer false) or dials (dialer true). On the API
// channel a listening server accepts every role (and no certificate); on
// the report channel a listening agent accepts workers without
// certificates (nil), and a dialer accepts servers (API) or agents
// (reports).
func Accepts(ch Channel, me Role, dialer bool) ([]Role, error) {
	switch ch {
	case ChannelAPI:
		if dialer {
			return []Role{RoleServer}, nil
		}
		if me == RoleServer {
			return slices.Clone(Roles), nil
		}
	case ChannelReport:
		if dialer {
			return []Role{RoleAgent}, nil
		}
		if me == RoleAgent {
			return nil, nil
		}
	default:
		pol, ok := acceptFrom[ch]
		if !ok {
			return nil, fmt.Errorf("%w: unknown channel %q", ErrChannel, ch)
		}
		if !dialer {
			if roles := pol[me]; len(roles) > 0 {
				return slices.Clone(roles), nil
			}
			break
		}
		var roles []Role
		for _, r := range Roles {
			if slices.Contains(pol[r], me) {
				roles = append(roles, r)
			}
		}
		if len(roles) > 0 {
			return roles, nil
		}
	}
	side := "serve"
	if dialer {
		side = "dial"
	}
	return nil, fmt.Errorf("%w: a %s does not %s the %s channel", ErrChannel, me, side, ch)
}

// ServerConfig is the configuration of a listener of ch held by c: its
// certificate, and the check of the connecting peer's certificate (its
// chain to the cluster CA, its validity, its role).
func (c *Credentials) ServerConfig(ch Channel) (*tls.Config, error) {
	if ch == ChannelFederation {
		return nil, fmt.Errorf("%w: the federation channel checks peers against their own clusters' CAs (FederationServerConfig)", ErrChannel)
	}
	roles, err := Accepts(ch, c.Identity.Role, false)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return c.current(), nil },
	}
	pool := c.Pool
	switch ch {
	case ChannelReport:
		// Workers hold no certificate; Python's ssl module and older
		// clients may speak TLS 1.2 only.
		cfg.MinVersion = tls.VersionTLS12
		cfg.ClientAuth = tls.NoClientCert
	case ChannelAPI:
		cfg.MinVersion = tls.VersionTLS12
		cfg.ClientAuth = tls.RequestClientCert
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return nil
			}
			_, err := verifyPeer(pool, raw, x509.ExtKeyUsageClientAuth, ch, roles)
			return err
		}
	default:
		cfg.ClientAuth = tls.RequireAnyClientCert
		cfg.VerifyPeerCertificate = func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := verifyPeer(pool, raw, x509.ExtKeyUsageClientAuth, ch, roles)
			return err
		}
	}
	return cfg, nil
}

// ClientConfig is the configuration of a dialer of ch held by c: it shows
// c's certificate and checks the peer's (chain, validity, host name and
// role). Dialers leave ServerName empty: crypto/tls and gRPC take it from
// the address dialled.
func (c *Credentials) ClientConfig(ch Channel) (*tls.Config, error) {
	roles, err := Accepts(ch, c.Identity.Role, true)
	if err != nil {
		return nil, err
	}
	switch ch {
	case ChannelReport:
		return nil, fmt.Errorf("%w: workers dial the report channel without a certificate (ReportClient)", ErrChannel)
	case ChannelFederation:
		return nil, fmt.Errorf("%w: the federation channel checks peers against their own clusters' CAs (FederationClientConfig)", ErrChannel)
	}
	cfg := clientConfig(c.Pool, ch, roles)
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return c.current(), nil }
	return cfg, nil
}

// APIClient is the configuration of a client of the HTTP API: it checks
// that the server holds a server certificate of the CA in pool, and shows
// cert if it is not nil.
func APIClient(pool *x509.CertPool, cert *tls.Certificate) *tls.Config {
	cfg := clientConfig(pool, ChannelAPI, []Role{RoleServer})
	cfg.MinVersion = tls.VersionTLS12
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	return cfg
}

// ReportClient is the configuration of a worker sending reports: it
// checks that the agent holds an agent certificate of the CA in pool.
func ReportClient(pool *x509.CertPool) *tls.Config {
	cfg := clientConfig(pool, ChannelReport, []Role{RoleAgent})
	cfg.MinVersion = tls.VersionTLS12
	return cfg
}

func clientConfig(pool *x509.CertPool, ch Channel, roles []Role) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    pool,
		// The chain and host name are verified by crypto/tls; the role
		// here, once they are.
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("%w: the %s peer showed no certificate", ErrRefused, ch)
			}
			id, err := IdentityOf(cs.PeerCertificates[0])
			if err != nil {
				return err
			}
			return checkRole(id, ch, roles)
		},
	}
}

// verifyPeer checks a peer's certificate chain as a TLS stack does (chain
// to pool, validity now, key usage) and then its identity and role. Its
// errors name the identity the certificate claims, for the log.
func verifyPeer(pool *x509.CertPool, raw [][]byte, usage x509.ExtKeyUsage, ch Channel, roles []Role) (Identity, error) {
	if len(raw) == 0 {
		return Identity{}, fmt.Errorf("%w: no certificate shown on the %s channel", ErrRefused, ch)
	}
	id, err := verifyLeaf(pool, raw, usage, time.Now())
	if err != nil {
		return Identity{}, err
	}
	return id, checkRole(id, ch, roles)
}

// verifyLeaf verifies the chain raw[0], raw[1:]... against pool at now
// for usage and returns the leaf's identity.
func verifyLeaf(pool *x509.CertPool, raw [][]byte, usage x509.ExtKeyUsage, now time.Time) (Identity, error) {
	certs := make([]*x509.Certificate, 0, len(raw))
	for _, b := range raw {
		c, err := x509.ParseCertificate(b)
		if err != nil {
			return Identity{}, fmt.Errorf("%w: unparsable certificate: %w", ErrRefused, err)
		}
		certs = append(certs, c)
	}
	leaf := certs[0]
	claimed := describe(leaf)
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return Identity{}, fmt.Errorf("%w: %s: %w", ErrRefused, claimed, err)
	}
	id, err := IdentityOf(leaf)
	if err != nil {
		return Identity{}, err
	}
	return id, nil
}

func checkRole(id Identity, ch Channel, roles []Role) error {
	if slices.Contains(roles, id.Role) {
		return nil
	}
	want := make([]string, len(roles))
	for i, r := range roles {
		want[i] = string(r)
	}
	return fmt.Errorf("%w: %s may not use the %s channel here (only %s)", ErrRefused, id, ch, strings.Join(want, ", "))
}

// describe names a certificate by what it claims, for refusal messages:
// its pollux identity if it has one, else its subject.
func describe(c *x509.Certificate) string {
	if id, err := IdentityOf(c); err == nil {
		return fmt.Sprintf("certificate of %s (issuer %q)", id, c.Issuer.CommonName)
	}
	return fmt.Sprintf("certificate %q (issuer %q)", c.Subject.CommonName, c.Issuer.CommonName)
}
