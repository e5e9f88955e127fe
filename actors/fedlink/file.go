package fedlink

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/internal/jsonin"
)

// maxFile bounds a federation file.
const maxFile = 1 << 20

// File is a federation file as written: the lab's quota, the terms of
// lending (optional, each term: federation.DefaultSettings) and its peers.
//
//	{"quota": {"nominal_quota": 16, "lending_limit": 8, "borrowing_limit": 16},
//	 "terms": {"lease_ttl_s": 300, "owner_weight": 2, "margin": 0.1, "lend_cooldown_s": 300, "min_hold_s": 120, "power_mean": -1},
//	 "peers": [{"name": "lab-b", "addresses": ["10.1.0.1:7400", "10.1.0.2:7400"], "ca_file": "lab-b-ca.pem"}]}
type File struct {
	Quota federation.Quota     `json:"quota"`
	Terms *federation.Settings `json:"terms,omitempty"`
	Peers []PeerFile           `json:"peers"`
}

// PeerFile is one peer cluster: its name (the cluster its servers'
// certificates name), the federation addresses of its servers
// (host:port) and the file of the CA certificates it is trusted with (a
// bundle: several during a CA rotation), relative to the federation
// file's directory unless absolute.
//
// Gossip, optional, are addresses (host:port) of the peer's servers in
// the federation's gossip pool (pollux server --federation-gossip-port),
// to join it by.
type PeerFile struct {
	Name      string   `json:"name"`
	Addresses []string `json:"addresses"`
	CAFile    string   `json:"ca_file"`
	Gossip    []string `json:"gossip,omitempty"`
	// CheckpointRoot, if set, is where the peer's jobs checkpoint when
	// they run on this lab's machines (its shared storage as mounted
	// here, an absolute path): the agents run a borrowed job only with
	// its checkpoint directory under it. Without it, under this lab's
	// own checkpoint root (docs/federation.md, "Checkpoints").
	CheckpointRoot string `json:"checkpoint_root,omitempty"`
}

// Peer is a peer cluster as a link uses it.
type Peer struct {
	Name      string
	Addresses []string
	Gossip    []string
	// Pool holds the CA certificates of CAFile; CAs are their
	// fingerprints (pki.Fingerprint), what federation.Peer carries.
	Pool *x509.CertPool
	CAs  []string
	// CheckpointRoot is PeerFile.CheckpointRoot, cleaned ("" none).
	CheckpointRoot string
}

// Federation is a loaded federation file.
type Federation struct {
	Quota    federation.Quota
	Settings federation.Settings
	Peers    []Peer
}

// LabPeers are the peers as federation.Lab lists them.
func (f *Federation) LabPeers() []federation.Peer {
	out := make([]federation.Peer, len(f.Peers))
	for i, p := range f.Peers {
		out[i] = federation.Peer{Name: p.Name, CAs: append([]string(nil), p.CAs...)}
	}
	return out
}

// GossipSeeds are the peers' addresses in the federation's gossip pool.
func (f *Federation) GossipSeeds() []string {
	var out []string
	for _, p := range f.Peers {
		out = append(out, p.Gossip...)
	}
	return out
}

// Pools gives the CA pool of a peer cluster (pki.PeerPools).
func (f *Federation) Pools(cluster string) (*x509.CertPool, bool) {
	for _, p := range f.Peers {
		if p.Name == cluster {
			return p.Pool, true
		}
	}
	return nil, false
}

// Load reads and checks a federation file for the lab self: strict JSON
// (unknown fields refused, errors naming the file and, for syntax, the
// line and column), every peer named once, not self, with at least one
// address and a CA file holding CA certificates.
func Load(path, self string) (*Federation, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	if st.Size() > maxFile {
		return nil, fmt.Errorf("%w: %s is %d bytes, at most %d", ErrBadFile, path, st.Size(), maxFile)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadFile, err)
	}
	// Terms given in part keep the defaults of the others.
	terms := federation.DefaultSettings()
	f := File{Terms: &terms}
	if err := jsonin.Decode(b, &f); err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrBadFile, path, jsonError(b, err))
	}
	fed := &Federation{Quota: f.Quota, Settings: terms}
	if f.Terms == nil { // "terms": null
		fed.Settings = federation.DefaultSettings()
	}
	if err := fed.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %s: terms: %w", ErrBadFile, path, err)
	}
	if q := f.Quota; q.Nominal < 0 || q.LendingLimit < 0 || q.LendingLimit > q.Nominal || q.BorrowingLimit < 0 || q.BorrowingLimit > federation.MaxNodes*federation.MaxNodeGPUs {
		return nil, fmt.Errorf("%w: %s: quota %+v: want 0 <= lending_limit <= nominal_quota and a borrowing_limit >= 0", ErrBadFile, path, q)
	}
	if len(f.Peers) == 0 {
		return nil, fmt.Errorf("%w: %s lists no peers", ErrBadFile, path)
	}
	dir := filepath.Dir(path)
	for _, p := range f.Peers {
		switch {
		case !federation.ValidName(p.Name):
			return nil, fmt.Errorf("%w: %s: peer name %q, want 1-63 characters of [A-Za-z0-9._-]", ErrBadFile, path, p.Name)
		case p.Name == self:
			return nil, fmt.Errorf("%w: %s lists this cluster (%s) as its own peer", ErrBadFile, path, self)
		case len(p.Addresses) == 0 || len(p.Addresses) > 16:
			return nil, fmt.Errorf("%w: %s: peer %s has %d addresses, want 1-16", ErrBadFile, path, p.Name, len(p.Addresses))
		case p.CAFile == "":
			return nil, fmt.Errorf("%w: %s: peer %s has no ca_file", ErrBadFile, path, p.Name)
		case p.CheckpointRoot != "" && (!filepath.IsAbs(p.CheckpointRoot) || filepath.Clean(p.CheckpointRoot) == "/"):
			return nil, fmt.Errorf("%w: %s: peer %s: checkpoint_root %q, want an absolute path below /", ErrBadFile, path, p.Name, p.CheckpointRoot)
		}
		if _, dup := fed.Pools(p.Name); dup {
			return nil, fmt.Errorf("%w: %s lists peer %s twice", ErrBadFile, path, p.Name)
		}
		if len(p.Gossip) > 16 {
			return nil, fmt.Errorf("%w: %s: peer %s has %d gossip addresses, at most 16", ErrBadFile, path, p.Name, len(p.Gossip))
		}
		for _, a := range append(append([]string(nil), p.Addresses...), p.Gossip...) {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("%w: %s: peer %s: address %q is not host:port", ErrBadFile, path, p.Name, a)
			}
		}
		caPath := p.CAFile
		if !filepath.IsAbs(caPath) {
			caPath = filepath.Join(dir, caPath)
		}
		cas, pool, err := loadCAs(caPath)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: peer %s: %w", ErrBadFile, path, p.Name, err)
		}
		root := ""
		if p.CheckpointRoot != "" {
			root = filepath.Clean(p.CheckpointRoot)
		}
		fed.Peers = append(fed.Peers, Peer{Name: p.Name, Addresses: append([]string(nil), p.Addresses...), Gossip: append([]string(nil), p.Gossip...),
			Pool: pool, CAs: cas, CheckpointRoot: root})
	}
	if len(fed.Peers) > federation.MaxPeers {
		return nil, fmt.Errorf("%w: %s lists %d peers, at most %d", ErrBadFile, path, len(fed.Peers), federation.MaxPeers)
	}
	return fed, nil
}

// loadCAs reads a CA bundle: the fingerprints of its CA certificates and
// a pool of them.
func loadCAs(path string) ([]string, *x509.CertPool, error) {
	pool, err := pki.LoadPool(path)
	if err != nil {
		return nil, nil, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	certs, err := pki.ParseCerts(b)
	if err != nil {
		return nil, nil, err
	}
	if len(certs) > 16 {
		return nil, nil, fmt.Errorf("%s holds %d CA certificates, at most 16", path, len(certs))
	}
	var fps []string
	for _, c := range certs {
		fps = append(fps, pki.Fingerprint(c))
	}
	return fps, pool, nil
}

// jsonError says where a JSON syntax error is.
func jsonError(b []byte, err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		line, col := 1, 1
		for _, c := range b[:min(int(se.Offset), len(b))] {
			if c == '\n' {
				line, col = line+1, 1
			} else {
				col++
			}
		}
		return fmt.Sprintf("%d:%d: %v", line, col, err)
	}
	return err.Error()
}
