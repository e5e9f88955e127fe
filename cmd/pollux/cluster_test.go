package main

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"

	"pollux/testbed/launch"
)

// testCluster is a cluster of this test binary's processes that stops
// once, however often Stop is called.
type testCluster struct {
	*launch.Cluster
	t    *testing.T
	once sync.Once
	err  error
}

// startCluster starts a cluster of this binary's processes: launch.Start
// with o, its Exec and Env set to run them. Tests defer finish.
func startCluster(ctx context.Context, t *testing.T, o launch.Options) *testCluster {
	t.Helper()
	o.Exec, o.Env = selfExec, append(o.Env, "POLLUX_TEST_PROCESS=1")
	c, err := launch.Start(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	return &testCluster{Cluster: c, t: t}
}

// clientFlags are the flags a CLI command needs to reach the servers ms
// of c with token: --server, --ca, --token.
func clientFlags(c *launch.Cluster, token string, ms []*launch.Member) []string {
	return []string{"--server", httpAddrs(ms), "--ca", c.TLS().CA, "--token", token}
}

// httpAddrs is the servers' HTTP addresses as --server takes them.
func httpAddrs(ms []*launch.Member) string {
	hs := make([]string, len(ms))
	for i, m := range ms {
		hs[i] = m.HTTP
	}
	return strings.Join(hs, ",")
}

// Stop stops every process the first time; later calls return its result.
func (c *testCluster) Stop() error {
	c.once.Do(func() { c.err = c.Cluster.Stop() })
	return c.err
}

// finish stops the cluster if the test did not, failing the test if it
// does not stop cleanly, and, when the test failed, logs the tail of
// every process's log.
func (c *testCluster) finish() {
	c.once.Do(func() {
		if c.err = c.Cluster.Stop(); c.err != nil {
			c.t.Errorf("stopping the cluster: %v", c.err)
		}
	})
	if !c.t.Failed() {
		return
	}
	for _, m := range append(c.Servers, c.Agents...) {
		b, _ := os.ReadFile(m.Log)
		c.t.Logf("--- %s log (last 3000 bytes)\n%s", m.ID, tail(b, 3000))
	}
}
