package server

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"pollux/actors/server/api"
	"pollux/cluster"
	"pollux/consensus/state"
	"pollux/internal/logbuf"
	"pollux/internal/usage"
	"pollux/optimizer/topology"
)

// fakeConfig is a replicated state whose configuration a test sets.
type fakeConfig struct {
	mu  sync.Mutex
	cfg state.ClusterConfig
}

func (f *fakeConfig) LocalState() *state.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &state.State{Config: f.cfg}
}

// fakeMember is a gossip member whose metadata updates a test reads.
type fakeMember struct {
	mu      sync.Mutex
	meta    cluster.Meta
	updated chan cluster.Meta
}

func (f *fakeMember) Local() cluster.Member {
	f.mu.Lock()
	defer f.mu.Unlock()
	return cluster.Member{Name: "s0", Meta: f.meta}
}

func (f *fakeMember) UpdateMeta(m cluster.Meta, _ time.Duration) error {
	f.mu.Lock()
	f.meta = m
	f.mu.Unlock()
	f.updated <- m
	return nil
}

// watchLevels waits for the cluster's configuration, then advertises its
// levels, or stops the server when its given levels or its topology do
// not fit them.
func TestWatchLevels(t *testing.T) {
	tests := []struct {
		name     string
		levels   []string // the cluster's
		given    []string
		topology string
		want     string // the levels advertised
		err      string
	}{
		{"the rack alone", nil, nil, "rack=r1", "rack", ""},
		{"given and the cluster's", []string{"rack", "zone"}, []string{"rack", "zone"}, "rack=r1,zone=z1", "rack,zone", ""},
		{"other levels given", []string{"rack", "zone"}, []string{"rack"}, "rack=r1", "",
			"--topology-levels rack: the cluster's levels are rack,zone (set at bootstrap)"},
		{"a topology without the zone", []string{"rack", "zone"}, nil, "rack=r1", "", `server: --topology: cluster: bad node metadata: topology "rack=r1"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			src := &fakeConfig{}
			m := &fakeMember{meta: cluster.Meta{Role: cluster.RoleServer, Topology: tt.topology}, updated: make(chan cluster.Meta, 1)}
			done := make(chan struct{})
			go func() { defer close(done); watchLevels(ctx, src, m, tt.given, slog.New(slog.DiscardHandler), cancel) }()
			// The leader configures the cluster while it watches.
			src.mu.Lock()
			src.cfg = state.ClusterConfig{ID: "c1", Levels: tt.levels}
			src.mu.Unlock()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("watchLevels did not return once the cluster was configured")
			}
			err := context.Cause(ctx)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, usage.ErrBadSetting) {
					t.Fatalf("stopped by %v, want a bad setting saying %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("stopped by %v", err)
			}
			select {
			case meta := <-m.updated:
				if meta.Levels != tt.want || meta.Topology != tt.topology {
					t.Errorf("advertised %+v, want levels %q", meta, tt.want)
				}
			default:
				t.Error("the levels were not advertised")
			}
		})
	}
}

// fakeRaft is a Raft configuration.
type fakeRaft []raft.Server

func (f fakeRaft) Servers() ([]raft.Server, error) { return f, nil }

// fakeMembers is a gossip membership.
type fakeMembers []cluster.Member

func (f fakeMembers) Members() []cluster.Member { return f }

func servers(ids ...string) fakeRaft {
	var out fakeRaft
	for _, id := range ids {
		out = append(out, raft.Server{ID: raft.ServerID(id), Suffrage: raft.Voter})
	}
	return out
}

func serverMembers(racks map[string]string) fakeMembers {
	var out fakeMembers
	for id, rack := range racks {
		out = append(out, cluster.Member{Name: id, Meta: cluster.Meta{Role: cluster.RoleServer, Rack: rack}})
	}
	return out
}

func TestWarnRackMajority(t *testing.T) {
	tests := []struct {
		name    string
		members fakeMembers
		warn    string // "": no warning
	}{
		{"two of three in r0", serverMembers(map[string]string{"s0": "r0", "s1": "r1", "s2": "r0"}), "rack=r0 voters=s0,s2 of=3"},
		{"one rack each", serverMembers(map[string]string{"s0": "r0", "s1": "r1", "s2": "r2"}), ""},
		// Servers that declare no rack are in the default one.
		{"no racks declared", serverMembers(map[string]string{"s0": "", "s1": "", "s2": ""}), "voters=s0,s1,s2 of=3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var log logbuf.Buffer
			warnRackMajority(context.Background(), servers("s0", "s1", "s2"), tt.members, time.Hour, slog.New(slog.NewTextHandler(&log, nil)))
			lines := log.Lines("a majority of the voters share one rack")
			if tt.warn == "" && len(lines) != 0 || tt.warn != "" && (len(lines) != 1 || !strings.Contains(lines[0], tt.warn)) {
				t.Errorf("log %q, want a warning with %q", log.String(), tt.warn)
			}
		})
	}
}

// Until gossip sees every voter warnRackMajority waits, and a cancelled
// wait warns of nothing.
func TestWarnRackMajorityWaitsForEveryVoter(t *testing.T) {
	var log logbuf.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		warnRackMajority(ctx, servers("s0", "s1", "s2"), serverMembers(map[string]string{"s0": "r0", "s2": "r0"}), time.Hour,
			slog.New(slog.NewTextHandler(&log, nil)))
	}()
	cancel()
	<-done
	if log.String() != "" {
		t.Errorf("log %q, want nothing", log.String())
	}
}

func TestRacksOf(t *testing.T) {
	rs := []raft.Server{{ID: "s0", Suffrage: raft.Voter}, {ID: "s1", Suffrage: raft.Voter}, {ID: "s3", Suffrage: raft.Nonvoter}}
	members := fakeMembers{
		{Name: "s0", Meta: cluster.Meta{Role: cluster.RoleServer, Rack: "r1"}},
		{Name: "s1", Meta: cluster.Meta{Role: cluster.RoleServer}},
		{Name: "a0", Meta: cluster.Meta{Role: cluster.RoleAgent, Rack: "r9"}},
	}
	peers, all := racksOf(rs, members)
	want := []api.Peer{{ID: "s0", Voter: true, Rack: "r1"}, {ID: "s1", Voter: true, Rack: topology.DefaultDomain}, {ID: "s3"}}
	if !all || !reflect.DeepEqual(peers, want) {
		t.Errorf("racksOf = %+v, %v; want %+v, true", peers, all, want)
	}
	if _, all := racksOf(rs, members[:1]); all {
		t.Error("every voter seen without s1 in the gossip")
	}
}
