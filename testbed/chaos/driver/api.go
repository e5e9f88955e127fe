package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"pollux/actors/launch"
	"pollux/cluster/pki"
	"pollux/testbed/builtin"
	"pollux/testbed/chaos/check"
	"pollux/testbed/chaos/history"
)

// Cluster is a cluster started with Start, for tests that drive it
// themselves (bad input on every port) and still want its history
// checked at the end.
type Cluster struct {
	c   *cluster
	dir string // removed by Stop when Start made it
}

// Addrs are one server's listening addresses.
type Addrs struct {
	ID                        string
	Raft, HTTP, Gossip, Actor string
}

// Start starts a cluster of o's size (o.Dir, or a temporary directory)
// and waits until a leader reports every agent's GPUs. On error every
// started process is stopped.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	dir, tmp := o.Dir, o.Dir == ""
	if tmp {
		var err error
		if dir, err = os.MkdirTemp("", "pollux-cluster-*"); err != nil {
			return nil, fmt.Errorf("driver: %w", err)
		}
	}
	c, err := up(ctx, o, dir)
	if err != nil {
		if tmp {
			os.RemoveAll(dir)
		}
		return nil, err
	}
	cl := &Cluster{c: c}
	if tmp {
		cl.dir = dir
	}
	return cl, nil
}

// up lays out and starts a cluster in dir.
func up(ctx context.Context, o Options, dir string) (c *cluster, err error) {
	c, err = newCluster(o, dir, o.Logger)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.close())
			c = nil
		}
	}()
	for _, m := range append(slices.Clone(c.servers), c.agents...) {
		if err := c.start(ctx, m, "", 0); err != nil {
			return nil, err
		}
	}
	return c, c.waitGPUs(ctx, o.Agents*o.GPUsPerAgent, 60*time.Second)
}

// Servers returns every server's addresses.
func (cl *Cluster) Servers() []Addrs {
	var out []Addrs
	addr := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
	for _, m := range cl.c.servers {
		out = append(out, Addrs{ID: m.id, Raft: addr(m.ports[0]), HTTP: addr(m.ports[1]), Gossip: addr(m.ports[2]), Actor: addr(m.ports[3])})
	}
	return out
}

// Exited names the servers and agents whose process has exited.
func (cl *Cluster) Exited() []string {
	var out []string
	for _, m := range append(slices.Clone(cl.c.servers), cl.c.agents...) {
		if p, _ := m.current(); p == nil {
			out = append(out, m.id)
		}
	}
	return out
}

// Leader returns the id of the server that says it leads, waiting up to
// timeout for one.
func (cl *Cluster) Leader(ctx context.Context, timeout time.Duration) (string, error) {
	m, err := cl.c.leader(ctx, timeout)
	if err != nil {
		return "", err
	}
	return m.id, nil
}

// Submit submits job name running the built-in application app, and
// records its acknowledgement; it retries for up to 15 s while no server
// can take it (an election).
func (cl *Cluster) Submit(ctx context.Context, name, app string) error {
	cat, err := builtin.Catalog()
	if err != nil {
		return err
	}
	spec, err := launch.Job{Name: name, App: app}.Spec(cat, cl.c.o.GPUsPerAgent*cl.c.o.Agents)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := cl.c.submit(ctx, name, spec)
		if !errors.Is(err, errUnavailable) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// WaitDone waits until every acknowledged job has completed.
func (cl *Cluster) WaitDone(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		ev, err := cl.c.events()
		if err != nil {
			return err
		}
		if _, err := cl.c.running(); err != nil {
			return err
		}
		m := check.Measure(ev)
		if m.Lost == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d of %d jobs not completed within %s", ErrCluster, m.Lost, m.JobsSubmitted, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop stops every process and returns the history. Call it once.
func (cl *Cluster) Stop() ([]history.Event, error) {
	err := cl.c.stop()
	ev, rerr := cl.c.events()
	err = errors.Join(err, rerr, cl.c.close())
	if cl.dir != "" {
		os.RemoveAll(cl.dir)
		cl.dir = ""
	}
	return ev, err
}

// TLS is the cluster's CA, certificates and gossip key.
func (cl *Cluster) TLS() *pki.Bundle { return cl.c.tls }

// HTTPClient is an HTTPS client of the cluster's API (5 s timeout).
func (cl *Cluster) HTTPClient() *http.Client { return cl.c.submitClient }
