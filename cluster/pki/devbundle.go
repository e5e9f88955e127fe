package pki

import (
	"crypto/tls"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"pollux/cluster"
)

// GossipKeyFile is the gossip key file DevBundle writes.
const GossipKeyFile = "gossip.key"

// DevClient is the name of the client certificate DevBundle makes.
const DevClient = "client"

// Bundle is everything a local cluster needs to run secured: a CA, one
// certificate per process, a client certificate and a gossip key, as
// files in Dir.
type Bundle struct {
	Dir string
	// CA and GossipKey are file paths.
	CA, GossipKey string
	roles         map[string]Role
}

// DevBundle makes a new CA, a certificate per server and agent name
// (valid for 127.0.0.1 and localhost), a client certificate (DevClient)
// and a gossip key, in dir (created; it must not hold a bundle already).
// Launchers of local clusters (pollux demo, pollux chaos, tests) call it
// and pass Flags(name) to each process.
func DevBundle(dir string, servers, agents []string) (*Bundle, error) {
	return DevBundleHosts(dir, servers, agents, nil)
}

// DevBundleHosts is DevBundle for processes that are also reached at
// other addresses than loopback (e.g. each in a network namespace of its
// own): the certificate of each server or agent name in hosts also names
// hosts[name] (IP addresses or DNS names).
func DevBundleHosts(dir string, servers, agents []string, hosts map[string][]string) (*Bundle, error) {
	return devBundle(dir, "", servers, agents, hosts)
}

// DevLabBundle is DevBundle for a lab of a federation: its servers' and
// agents' certificates name cluster (spiffe://<cluster>/<role>/<name>).
func DevLabBundle(dir, cluster string, servers, agents []string) (*Bundle, error) {
	if err := (Identity{Role: RoleServer, Name: "x", Cluster: cluster}).Validate(); err != nil || cluster == "" {
		return nil, fmt.Errorf("%w: cluster %q", ErrBadName, cluster)
	}
	return devBundle(dir, cluster, servers, agents, nil)
}

func devBundle(dir, clusterName string, servers, agents []string, hosts map[string][]string) (*Bundle, error) {
	b := &Bundle{Dir: dir, CA: filepath.Join(dir, CAFile), GossipKey: filepath.Join(dir, GossipKeyFile), roles: map[string]Role{}}
	ids := []Identity{{Role: RoleClient, Name: DevClient}}
	for _, s := range servers {
		ids = append(ids, Identity{Role: RoleServer, Name: s, Cluster: clusterName})
	}
	for _, a := range agents {
		ids = append(ids, Identity{Role: RoleAgent, Name: a, Cluster: clusterName})
	}
	for _, id := range ids {
		if _, dup := b.roles[id.Name]; dup {
			return nil, fmt.Errorf("%w: %q named twice", ErrBadName, id.Name)
		}
		if err := id.Validate(); err != nil {
			return nil, err
		}
		b.roles[id.Name] = id.Role
	}
	for name := range hosts {
		if r, ok := b.roles[name]; !ok || r == RoleClient {
			return nil, fmt.Errorf("%w: hosts for %q, which is no server or agent of the bundle", ErrBadName, name)
		}
	}
	ca, err := NewCA(CAOptions{})
	if err != nil {
		return nil, err
	}
	if _, _, err := WriteCA(dir, ca); err != nil {
		return nil, err
	}
	for _, id := range ids {
		is, err := ca.Issue(CertRequest{Identity: id, Hosts: hosts[id.Name]})
		if err != nil {
			return nil, err
		}
		if _, _, err := WriteIssued(dir, id, is); err != nil {
			return nil, err
		}
	}
	key, err := cluster.NewKey()
	if err != nil {
		return nil, err
	}
	if err := writeNew(b.GossipKey, []byte(key+"\n"), 0o600); err != nil {
		return nil, err
	}
	return b, nil
}

// Add issues one more certificate of the bundle's CA, for a process
// started after the bundle was made (a server added to a running
// cluster), valid for loopback and hosts. It refuses a name the bundle
// already holds.
func (b *Bundle) Add(role Role, name string, hosts []string) error {
	id := Identity{Role: role, Name: name}
	if err := id.Validate(); err != nil {
		return err
	}
	if _, dup := b.roles[name]; dup {
		return fmt.Errorf("%w: %q named twice", ErrBadName, name)
	}
	ca, err := LoadCA(b.CA, filepath.Join(b.Dir, CAKeyFile))
	if err != nil {
		return err
	}
	is, err := ca.Issue(CertRequest{Identity: id, Hosts: hosts})
	if err != nil {
		return err
	}
	if _, _, err := WriteIssued(b.Dir, id, is); err != nil {
		return err
	}
	b.roles[name] = role
	return nil
}

// Files returns the certificate and key paths of a name of the bundle.
func (b *Bundle) Files(name string) (cert, key string, err error) {
	r, ok := b.roles[name]
	if !ok {
		return "", "", fmt.Errorf("%w: %q is not in the bundle", ErrBadName, name)
	}
	c, k := CertFiles(Identity{Role: r, Name: name})
	return filepath.Join(b.Dir, c), filepath.Join(b.Dir, k), nil
}

// Flags are the command-line flags of `pollux server` or `pollux agent`
// named name: --ca, --cert, --key and --gossip-key. It panics on a name
// the bundle does not hold (a launcher's bug).
func (b *Bundle) Flags(name string) []string {
	cert, key, err := b.Files(name)
	if err != nil {
		panic(err)
	}
	return []string{"--ca", b.CA, "--cert", cert, "--key", key, "--gossip-key", b.GossipKey}
}

// ClientTLS is the configuration of an HTTP API client of the bundle's
// cluster, showing the DevClient certificate.
func (b *Bundle) ClientTLS() (*tls.Config, error) {
	c, err := b.Credentials(DevClient)
	if err != nil {
		return nil, err
	}
	return APIClient(c.Pool, &c.Cert), nil
}

// Credentials loads the credentials of a name of the bundle.
func (b *Bundle) Credentials(name string) (*Credentials, error) {
	cert, key, err := b.Files(name)
	if err != nil {
		return nil, err
	}
	return LoadCredentials(b.CA, cert, key)
}

// GossipKeys reads the bundle's gossip key.
func (b *Bundle) GossipKeys() ([][]byte, error) { return cluster.ReadKeyFile(b.GossipKey) }

// HTTPClient is an HTTPS client of the bundle's cluster API (see
// ClientTLS), with an overall timeout per request.
func (b *Bundle) HTTPClient(timeout time.Duration) (*http.Client, error) {
	cfg, err := b.ClientTLS()
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr, Timeout: timeout}, nil
}
