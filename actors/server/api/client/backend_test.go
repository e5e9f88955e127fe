package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/cluster/pki"
	"pollux/consensus/state"
)

// fakeBackend is a consensus server holding a state in memory, for the
// real API handler: the leader s1, or a follower.
type fakeBackend struct {
	mu       sync.Mutex
	st       *state.State
	servers  []raft.Server
	follower bool
}

func (f *fakeBackend) Leadership() (uint64, bool) { return 3, !f.follower }
func (f *fakeBackend) Leader() (raft.ServerID, raft.ServerAddress) {
	return "s1", "127.0.0.1:7001"
}
func (f *fakeBackend) Read(context.Context) (*state.State, error) { return f.LocalState(), nil }
func (f *fakeBackend) SaveSnapshot(context.Context) ([]byte, error) {
	return state.EncodeState(f.LocalState()), nil
}
func (f *fakeBackend) RestoreSnapshot(_ context.Context, b []byte) error {
	st, err := state.DecodeState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.st = st
	return nil
}
func (f *fakeBackend) LocalState() *state.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Clone()
}
func (f *fakeBackend) LocalEvents(job string, since uint64, limit int) ([]state.Event, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Events.Since(job, since, limit), f.st.Events.LastSeq()
}
func (f *fakeBackend) LocalJob(id string) (*state.Job, state.ClusterConfig) {
	st := f.LocalState()
	return st.Jobs[id], st.Config
}
func (f *fakeBackend) ApplyCommand(_ context.Context, c state.Command) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, err := state.ApplyTo(f.st, c, 1)
	return err
}
func (f *fakeBackend) Authenticate(secret string) (state.Token, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t, err := f.st.ACL.Authenticate(secret)
	return t, f.st.ACL.Bootstrapped(), err
}
func (f *fakeBackend) Servers() ([]raft.Server, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.servers), nil
}
func (f *fakeBackend) AddVoter(_ context.Context, id raft.ServerID, addr raft.ServerAddress) error {
	if f.follower {
		return errors.New("not the leader")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers = append(f.servers, raft.Server{ID: id, Address: addr, Suffrage: raft.Voter})
	return nil
}
func (f *fakeBackend) RemoveServer(_ context.Context, id raft.ServerID) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers = slices.DeleteFunc(f.servers, func(s raft.Server) bool { return s.ID == id })
	return nil
}
func (f *fakeBackend) Unreachable() map[raft.ServerID]time.Time { return nil }

// Secrets of the tokens newBackend makes.
const (
	adminSecret = "plx_admin-secret-of-the-client-tests-0123456"
	readSecret  = "plx_read-secret-of-the-client-tests-01234567"
)

// newBackend is a cluster of three voters (s1 leads) with one 4-GPU node
// and, unless fresh, an admin token (acc-admin) and a read token
// (acc-read, grafana); a fresh cluster's tokens are not bootstrapped.
func newBackend(fresh bool) *fakeBackend {
	fb := &fakeBackend{st: &state.State{Jobs: map[string]*state.Job{}, Nodes: map[string]*state.Node{
		"n1": {ID: "n1", GPUs: 4, Health: state.Alive, Rack: "r1", Addresses: []string{"127.0.0.1:9"}},
	}, Allocation: state.Allocation{Generation: 2, Jobs: map[string][]state.Slot{}}}, servers: []raft.Server{
		{ID: "s1", Address: "127.0.0.1:7001", Suffrage: raft.Voter}, {ID: "s2", Address: "127.0.0.1:7002", Suffrage: raft.Voter},
		{ID: "s3", Address: "127.0.0.1:7003", Suffrage: raft.Voter}}}
	cmds := []state.Command{&state.InitCluster{ID: "c1", CheckpointRoot: "/ckpt"}}
	if !fresh {
		cmds = append(cmds,
			&state.BootstrapACL{Token: state.Token{Accessor: "acc-admin", Name: api.BootstrapName, Role: state.RoleAdmin,
				Hash: state.HashSecret(adminSecret), CreateTime: 1_700_000_000}},
			&state.CreateToken{Token: state.Token{Accessor: "acc-read", Name: "grafana", Role: state.RoleRead,
				Hash: state.HashSecret(readSecret), CreateTime: 1_700_000_060}})
	}
	for _, c := range cmds {
		if err := fb.ApplyCommand(context.Background(), c); err != nil {
			panic(err)
		}
	}
	return fb
}

// newAPI is the real API of server id over fb, with the servers s1-s4
// alive; a follower redirects the membership changes to leaderHTTP, the
// leader's API address.
func newAPI(id string, fb *fakeBackend, leaderHTTP string) *api.API {
	members := func() []cluster.Member {
		ms := []cluster.Member{{Name: "s1", Meta: cluster.Meta{Role: cluster.RoleServer, HTTPAddr: leaderHTTP}}}
		for _, id := range []string{"s2", "s3", "s4"} {
			ms = append(ms, cluster.Member{Name: id, Meta: cluster.Meta{Role: cluster.RoleServer}})
		}
		return ms
	}
	return api.New(id, api.Config{Backend: fb, Apps: []string{"cifar10"}, Members: members, Logger: slog.New(slog.DiscardHandler)})
}

// newServer serves the real API over a fresh fakeBackend on plain HTTP
// (the address, http://127.0.0.1:PORT, is what pollux server --insecure
// would give).
func newServer() (*httptest.Server, *fakeBackend) {
	fb := newBackend(false)
	srv := httptest.NewServer(newAPI("s1", fb, ""))
	return srv, fb
}

// startTLS starts srv with the server certificate of s1 in b, without
// logging the handshakes the tests make fail.
func startTLS(t *testing.T, srv *httptest.Server, b *pki.Bundle) {
	t.Helper()
	creds, err := b.Credentials("s1")
	if err != nil {
		t.Fatal(err)
	}
	if srv.TLS, err = creds.ServerConfig(pki.ChannelAPI); err != nil {
		t.Fatal(err)
	}
	// httptest shows its own certificate unless the config lists one.
	srv.TLS.Certificates = []tls.Certificate{creds.Cert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
}

// hostPort is the host:port of a test server's URL.
func hostPort(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "https://") }
