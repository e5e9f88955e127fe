package fedlab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"pollux/actors/fedlink"
	"pollux/cluster/federation"
	"pollux/cluster/pki"
	"pollux/testbed/launch"
)

// Set is the labs of a federation started on this machine: their names,
// in order, and each lab's cluster by name.
type Set struct {
	Names []string
	Labs  map[string]*launch.Cluster
}

// Start starts one lab per name (each with its own CA from
// pki.DevLabBundle, a federation file naming every other lab as a peer
// with its CA, and a federation listener on loopback), every lab with
// the servers, agents and clocks of tmpl, in tmpl.Dir/<name>, each with
// its own checkpoint root (tmpl.Dir/<name>/checkpoints), which every
// peer's federation file declares as that lab's (docs/federation.md,
// "Checkpoints": on one machine every agent reaches every root). The
// labs started are returned also on error, to be stopped.
func Start(ctx context.Context, tmpl launch.Options, names []string, quota federation.Quota, interval time.Duration) (*Set, error) {
	return StartWith(ctx, tmpl, names, quota, interval, federation.DefaultSettings(), nil)
}

// StartWith is Start with the federation's terms (lease time to live,
// ...) given, and shape, when not nil, called on each lab's federation
// file before it is written (a quota or peers of its own).
func StartWith(ctx context.Context, tmpl launch.Options, names []string, quota federation.Quota, interval time.Duration,
	terms federation.Settings, shape func(lab string, f *fedlink.File)) (*Set, error) {
	ls := &Set{Names: names, Labs: map[string]*launch.Cluster{}}
	// Each lab's federation port stays held until that lab starts: the
	// labs started before it must not be given it (their own ports,
	// their outgoing connections).
	fedPorts, err := launch.ReservePorts(len(names))
	if err != nil {
		return ls, err
	}
	defer fedPorts.Close()
	addrs, bundles := map[string]string{}, map[string]*pki.Bundle{}
	var servers, agents []string
	for i := range max(tmpl.Servers, 1) {
		servers = append(servers, fmt.Sprintf("s%d", i))
	}
	for i := range tmpl.Agents {
		agents = append(agents, fmt.Sprintf("a%d", i))
	}
	for i, n := range names {
		addrs[n] = fmt.Sprintf("127.0.0.1:%d", fedPorts.Ports[i])
		if bundles[n], err = pki.DevLabBundle(filepath.Join(tmpl.Dir, n, "tls"), n, servers, agents); err != nil {
			return ls, err
		}
	}
	for i, n := range names {
		fedFile, err := writeFile(tmpl.Dir, n, names, quota, terms, addrs, bundles, shape)
		if err != nil {
			return ls, err
		}
		o := tmpl
		o.Dir, o.Bundle, o.CheckpointRoot = filepath.Join(tmpl.Dir, n), bundles[n], filepath.Join(tmpl.Dir, n, "checkpoints")
		o.ServerArgs = append(append([]string(nil), tmpl.ServerArgs...), "--cluster", n, "--federation", fedFile,
			"--federation-addr", addrs[n], "--federation-interval", interval.String())
		fedPorts.Release(i)
		c, err := launch.Start(ctx, o)
		if c != nil {
			ls.Labs[n] = c
		}
		if err != nil {
			return ls, fmt.Errorf("lab %s: %w", n, err)
		}
	}
	return ls, nil
}

// writeFile writes lab n's federation file, dir/<n>/federation.json, and
// returns its path.
func writeFile(dir, n string, names []string, quota federation.Quota, terms federation.Settings, addrs map[string]string,
	bundles map[string]*pki.Bundle, shape func(lab string, f *fedlink.File)) (string, error) {
	f := fedlink.File{Quota: quota, Terms: &terms}
	for _, p := range names {
		if p != n {
			f.Peers = append(f.Peers, fedlink.PeerFile{Name: p, Addresses: []string{addrs[p]}, CAFile: bundles[p].CA,
				CheckpointRoot: filepath.Join(dir, p, "checkpoints")})
		}
	}
	if shape != nil {
		shape(n, &f)
	}
	raw, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	fedFile := filepath.Join(dir, n, "federation.json")
	if err := os.WriteFile(fedFile, raw, 0o644); err != nil {
		return "", err
	}
	return fedFile, nil
}

// Stop stops every process of every lab.
func (ls *Set) Stop() error {
	var errs []error
	for _, n := range ls.Names {
		if c := ls.Labs[n]; c != nil {
			if err := c.Stop(); err != nil {
				errs = append(errs, fmt.Errorf("lab %s: %w", n, err))
			}
		}
	}
	return errors.Join(errs...)
}
