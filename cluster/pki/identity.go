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
}

func (id Identity) String() string { return string(id.Role) + "/" + id.Name }

// uriScheme and uriHost are the fixed parts of an identity URI.
const (
	uriScheme = "spiffe"
	uriHost   = "pollux"
)

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
	return nil
}

// URI is the identity as a URI subject alternative name:
// spiffe://pollux/<role>/<name>.
func (id Identity) URI() *url.URL {
	return &url.URL{Scheme: uriScheme, Host: uriHost, Path: "/" + string(id.Role) + "/" + id.Name}
}

// IdentityOf reads the identity of a certificate: its one URI subject
// alternative name of the form spiffe://pollux/<role>/<name>. It does
// not verify the certificate.
func IdentityOf(c *x509.Certificate) (Identity, error) {
	var found []Identity
	for _, u := range c.URIs {
		if u.Scheme != uriScheme || u.Host != uriHost {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
		if len(parts) != 2 || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" || u.ForceQuery {
			return Identity{}, fmt.Errorf("%w: identity URI %q is not spiffe://pollux/<role>/<name>", ErrRefused, u)
		}
		id := Identity{Role: Role(parts[0]), Name: parts[1]}
		if err := id.Validate(); err != nil {
			return Identity{}, fmt.Errorf("%w: identity URI %q: %w", ErrRefused, u, err)
		}
		found = append(found, id)
	}
	switch len(found) {
	case 0:
		return Identity{}, fmt.Errorf("%w: certificate %q has no pollux identity (URI spiffe://pollux/<role>/<name>)", ErrRefused, c.Subject.CommonName)
	case 1:
		return found[0], nil
	}
	return Identity{}, fmt.Errorf("%w: certificate %q has %d pollux identities", ErrRefused, c.Subject.CommonName, len(found))
}
