package pki

import (
	"crypto/x509"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// Role is what a certificate's holder is to the cluster.
type Role string

// The roles.
const (
	// RoleServer is a control-plane server: a Raft member.
	RoleServer Role = "server"
	// RoleAgent is a node agent: it runs workers on one machine.
	RoleAgent Role = "agent"
	// RoleClient is a user or tool of the HTTP API.
	RoleClient Role = "client"
)

// Roles are every role, in order.
var Roles = []Role{RoleServer, RoleAgent, RoleClient}

// ParseRole checks s names a role.
func ParseRole(s string) (Role, error) {
	for _, r := range Roles {
		if string(r) == s {
			return r, nil
		}
	}
	return "", fmt.Errorf("%w: role %q, want server, agent or client", ErrBadName, s)
}

// Identity is who a certificate says its holder is.
type Identity struct {
	Role Role
	Name string
	// Cluster is the holder's cluster (the trust domain of its identity
	// URI), "" for the default trust domain, DefaultCluster: a cluster
	// in a federation names itself so that its peers can tell its
	// certificates apart (docs/federation.md).
	Cluster string
}

func (id Identity) String() string {
	if id.Cluster != "" {
		return id.Cluster + "/" + string(id.Role) + "/" + id.Name
	}
	return string(id.Role) + "/" + id.Name
}

// ClusterName is the identity's trust domain: its cluster, or
// DefaultCluster.
func (id Identity) ClusterName() string {
	if id.Cluster == "" {
		return DefaultCluster
	}
	return id.Cluster
}

// DefaultCluster is the trust domain of an identity that names no
// cluster: spiffe://pollux/<role>/<name>.
const DefaultCluster = "pollux"

// uriScheme is the scheme of an identity URI.
const uriScheme = "spiffe"

// nameRE is the shape of a holder's name: a member name or host name.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$`)

// Validate reports whether id can be put in a certificate.
func (id Identity) Validate() error {
	if _, err := ParseRole(string(id.Role)); err != nil {
		return err
	}
	if !nameRE.MatchString(id.Name) {
		return fmt.Errorf("%w: name %q, want 1-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit", ErrBadName, id.Name)
	}
	if id.Cluster != "" && (!nameRE.MatchString(id.Cluster) || id.Cluster == DefaultCluster) {
		return fmt.Errorf("%w: cluster %q, want 1-63 characters of [A-Za-z0-9._-], starting and ending with a letter or digit, other than %q",
			ErrBadName, id.Cluster, DefaultCluster)
	}
	return nil
}

// URI is the identity as a URI subject alternative name:
// spiffe://<cluster>/<role>/<name>, the cluster being DefaultCluster
// when the identity names none.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: id.ClusterName(), Path: "/" + string(id.Role) + "/" + id.Name}
}

// IdentityOf reads the identity of a certificate: its one URI subject
// alternative name of the form spiffe://<cluster>/<role>/<name> (a
// trust domain of DefaultCluster is an identity of no cluster). It does
// not verify the certificate.
func IdentityOf(c *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range c.URIs {
		if u.Scheme != uriScheme {
			continue
		}
		if !nameRE.MatchString(u.Host) {
			return Identity{}, fmt.Errorf("%w: identity URI %q: trust domain %q is not a cluster name", ErrRefused, u, u.Host)
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		if len(parts) != 2 || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.ForceQuery {
			return Identity{}, fmt.Errorf("%w: identity URI %q is not spiffe://<cluster>/<role>/<name>", ErrRefused, u)
		}
		id := Identity{Role: Role(parts[0]), Name: parts[1]}
		if u.Host != DefaultCluster {
			id.Cluster = u.Host
		}
		if err := id.Validate(); err != nil {
			return Identity{}, fmt.Errorf("%w: identity URI %q: %w", ErrRefused, u, err)
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, fmt.Errorf("%w: certificate %q has no pollux identity (URI spiffe://<cluster>/<role>/<name>)", ErrRefused, c.Subject.CommonName)
	case 1:
		return found[0], nil
	}
	return Identity{}, fmt.Errorf("%w: certificate %q has %d pollux identities", ErrRefused, c.Subject.CommonName, len(found))
}
